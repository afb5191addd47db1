"""Small file-system helpers shared by the writer and the reader, and :func:`find_executable`."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import (
    MSG_FILE_TOO_BIG,
    MSG_JSON_TOO_DEEP,
    MSG_NOT_REGULAR,
    MSG_OUTSIDE_RUN,
    FileLimitError,
    OutsideRunError,
)

#: The largest JSON file debugkit reads whole (bytes). A run's JSON files (manifest,
#: heartbeats, failure records, audits) are kilobytes; an audit with SHAP summaries a few
#: MiB. Larger is refused before it is read, not parsed into memory.
MAX_JSON_BYTES = 64 << 20
#: The deepest nesting of objects and arrays debugkit reads. A run's files are a few
#: levels deep (a batch structure of nested tuples, ~2 per level, the deepest); Python's
#: json parser would recurse into 100,000 brackets until RecursionError, and every
#: reader that walks a document recursively (st.json, tensortree) would too.
MAX_JSON_DEPTH = 64


def find_executable(name: str) -> str | None:
    """The executable ``name`` (a console script such as ``debugkit``, or a tool such as
    ``py-spy``) installed next to the running interpreter, else the one on ``PATH``.

    Next to ``sys.executable`` first: in a virtual environment that is not activated (its
    ``bin/python`` run by its full path), what ``pip`` installed into that environment is
    in that folder and not on ``PATH``, and a different copy on ``PATH`` would belong to
    another environment. ``None`` when neither has it.
    """
    here = Path(sys.executable).parent
    for cand in (here / name, here / f"{name}.exe"):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which(name)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The bytes go to a temporary file in the same directory, which is then renamed over
    ``path`` (``os.replace`` is atomic on POSIX and Windows).
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync:
        fsync_dir(path.parent)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so that a rename inside it survives a power loss (POSIX only)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: str | os.PathLike, obj: Any, *, fsync: bool = False) -> None:
    """Serialise ``obj`` as indented JSON and write it atomically to ``path``."""
    data = json.dumps(obj, indent=2, sort_keys=False, default=_json_default).encode()
    atomic_write_bytes(path, data + b"\n", fsync=fsync)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return obj.item()
        except (TypeError, ValueError, RuntimeError):
            pass
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Return the hex SHA-256 of a file's bytes."""
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") if _is_upath(path) else open(path, "rb") as f:  # type: ignore[union-attr]
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _file_kind(mode: int) -> str:
    import stat

    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular_file(path) -> int:
    """The size of the local file ``path``; :class:`FileLimitError` for a FIFO, a device,
    a socket or a directory (opening a FIFO would block forever)."""
    import stat

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise FileLimitError(MSG_NOT_REGULAR.format(path=path, kind=_file_kind(st.st_mode)))
    return st.st_size


def read_bytes_capped(path, max_bytes: int, what: str = "this file") -> bytes:
    """A file's bytes, refusing a non-regular file or one over ``max_bytes`` before
    reading it (and reading at most ``max_bytes + 1``, should it grow meanwhile).

    ``path`` may be a local path or a ``UPath`` (fsspec URL).
    """
    local = not _is_upath(path)
    if local:
        size = check_regular_file(path)
    else:
        size = int(path.stat().st_size or 0)
    if size > max_bytes:
        raise FileLimitError(MSG_FILE_TOO_BIG.format(path=path, size=size, limit=max_bytes, what=what))
    with open(path, "rb") if local else path.open("rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise FileLimitError(MSG_FILE_TOO_BIG.format(path=path, size=f"more than {max_bytes}",
                                                     limit=max_bytes, what=what))
    return data


def read_json(path, *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse a JSON file, at most ``max_bytes`` of it (:data:`MAX_JSON_BYTES`).

    Raises :class:`~debugkit.errors.FileLimitError` (a ``ValueError`` too) for a file over
    the limit or not a regular file, ``ValueError`` for invalid JSON, ``OSError`` when it
    cannot be read: the same exceptions callers of ``json.loads(path.read_text())``
    already handle.
    """
    return loads_capped(read_bytes_capped(path, max_bytes, "a JSON file"), path)


def loads_capped(data: bytes | str, where, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(data)``, refusing a document nested deeper than ``max_depth`` with
    :class:`FileLimitError` (a ``ValueError``) instead of a ``RecursionError``."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise FileLimitError(MSG_JSON_TOO_DEEP.format(path=where, limit=max_depth)) from None
    if isinstance(doc, (dict, list)) and _depth_over(doc, max_depth):
        raise FileLimitError(MSG_JSON_TOO_DEEP.format(path=where, limit=max_depth))
    return doc


def _depth_over(doc, limit: int) -> bool:
    """Whether ``doc`` nests containers deeper than ``limit`` (iterative: it visits
    containers only, never recurses)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return False


def _is_upath(path) -> bool:
    return type(path).__module__.split(".")[0] == "upath"


def _short(name) -> str:
    text = str(name)
    return text if len(text) <= 80 else text[:60] + f"... ({len(text)} characters)"


def _name_parts(name, run, what) -> list[str]:
    """The ``/``-separated parts of one recorded name, refusing what could leave the run."""
    def refuse(why):
        raise OutsideRunError(MSG_OUTSIDE_RUN.format(run=run, what=what, name=_short(name), why=why))

    if isinstance(name, bool) or not isinstance(name, (str, int)):
        refuse(f"a {type(name).__name__}, not a name")
    text = str(name)
    if not text:
        refuse("it is empty")
    if any(ord(c) < 32 or c == "\x7f" for c in text):
        refuse("it contains a NUL or control character")
    if "://" in text or re.match(r"^[A-Za-z]:", text):
        refuse("it names another location (a URL or a drive)")
    if text.startswith(("/", "\\", "~")):
        refuse("it is an absolute path")
    if "\\" in text:
        refuse("it contains a backslash")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        refuse("it contains '..'")
    if not parts:
        refuse("it names the run folder itself")
    return parts


def in_run(run_dir, *names, what: str = "file"):
    """``run_dir`` joined with the names a run recorded, refused unless it stays inside
    the run: every recorded name a reader joins goes through here (checkpoint folders and
    files, failure captures, profile and trace files, memory snapshots, audit files).

    ``names`` are the run's own strings (``"checkpoints"``, ``entry["dir"]``, a file
    name); each may hold ``/``. Refused, with :class:`~debugkit.errors.OutsideRunError`
    (a :class:`~debugkit.errors.RunDirError`): a name that is not a string, empty,
    absolute (``/etc``, ``~``), with a ``..`` part, a backslash, a control character or a
    scheme (``s3://``, ``C:``); and, for a local run, a path that resolves (symlinks
    followed) outside the run folder resolved. An fsspec URL run (``UPath``) is joined
    textually (object stores have no links, and ``os.path.realpath`` means nothing to
    them). The joined path is returned unresolved; it need not exist.
    """
    parts = [p for n in names for p in _name_parts(n, run_dir, what)]
    if _is_upath(run_dir):
        return run_dir.joinpath(*parts)
    base = Path(run_dir)
    joined = base.joinpath(*parts)
    root = os.path.realpath(base)
    target = os.path.realpath(joined)
    if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
        raise OutsideRunError(MSG_OUTSIDE_RUN.format(
            run=run_dir, what=what, name=_short("/".join(str(n) for n in names)),
            why="it is a link leading outside the run"))
    return joined


def is_in_run(run_dir, *names) -> bool:
    """Whether :func:`in_run` accepts the names."""
    try:
        in_run(run_dir, *names)
    except OutsideRunError:
        return False
    return True



def cache_dir() -> Path:
    """Where debugkit keeps derived files (unpacked zips, converted imports, parsed
    profiles and snapshots): ``$DEBUGKIT_CACHE``, default ``~/.cache/debugkit``."""
    d = Path(os.environ.get("DEBUGKIT_CACHE", Path.home() / ".cache" / "debugkit"))
    d.mkdir(parents=True, exist_ok=True)
    return d


# ---------------------------------------------------------------------------- the cache's bound
#: The cache folder's bound when ``$DEBUGKIT_CACHE_MAX_MB`` is unset (MiB).
DEFAULT_CACHE_MAX_MB = 2048
MSG_BAD_CACHE_SETTING = "DEBUGKIT_CACHE_MAX_MB={value!r}: expected a whole number of MiB > 0"
#: Folders of the cache that are never evicted (lock files of running work).
CACHE_KEEP = ("locks",)
#: A ``.tmp-*`` staging entry younger than this is work in flight: not evicted.
_STAGING_GRACE_S = 3600


def cache_max_bytes() -> int:
    """The cache folder's bound: ``$DEBUGKIT_CACHE_MAX_MB`` (default 2,048 MiB)."""
    value = os.environ.get("DEBUGKIT_CACHE_MAX_MB")
    if value is None or not value.strip():
        return DEFAULT_CACHE_MAX_MB << 20
    if not value.strip().isdigit() or int(value) <= 0:
        raise FileLimitError(MSG_BAD_CACHE_SETTING.format(value=value[:40]))
    return int(value) << 20


def _tree_bytes(path: Path) -> int:
    """Disk blocks of a file or folder (links not followed)."""
    total = 0
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    if path.is_dir() and not path.is_symlink():
        for top, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                try:
                    st = os.lstat(os.path.join(top, name))
                except OSError:
                    continue
                total += getattr(st, "st_blocks", 0) * 512 or st.st_size
    return total


def cache_entries() -> list[tuple[float, int, Path]]:
    """``(last use, bytes on disk, path)`` of every cache entry: each item directly inside
    a kind's folder (``zips/<key>``, ``profiles/<key>`` ...), oldest use first. An entry's
    last use is its modification time (readers touch an entry when they use it)."""
    out = []
    root = cache_dir()
    for kind in sorted(root.iterdir()):
        if kind.name in CACHE_KEEP or not kind.is_dir() or kind.is_symlink():
            if kind.is_file():
                out.append((kind.stat().st_mtime, _tree_bytes(kind), kind))
            continue
        for entry in kind.iterdir():
            try:
                mtime = os.lstat(entry).st_mtime
            except OSError:
                continue
            out.append((mtime, _tree_bytes(entry), entry))
    out.sort(key=lambda e: e[0])
    return out


def touch_cache_entry(path: Path) -> None:
    """Mark a cache entry as used now (the eviction order is least recently used)."""
    try:
        os.utime(path)
    except OSError:
        pass


def trim_cache(*, reserve: int = 0, keep: Path | None = None) -> int:
    """Evict the least recently used cache entries until the cache plus ``reserve`` bytes
    fits :func:`cache_max_bytes`; ``keep`` (the entry just written or used) stays.
    Returns the bytes freed."""
    import shutil
    import time

    limit = cache_max_bytes()
    now = time.time()
    try:
        entries = cache_entries()
    except OSError:
        return 0
    used = sum(b for _, b, _ in entries)
    freed = 0
    for mtime, size, path in entries:
        if used + reserve <= limit:
            break
        if keep is not None and Path(path) == Path(keep):
            continue
        if path.name.startswith(".") and now - mtime < _STAGING_GRACE_S:
            continue  # being written now (counted, not evicted)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                path.unlink()
            except OSError:
                continue
        used -= size
        freed += size
    return freed


def process_start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (Linux), to tell a reused pid.

    The writer stores it in each heartbeat; the reader compares it to tell a live writer
    from a pid reused by another process. ``None`` where ``/proc`` is not readable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        # The command name (field 2) may contain spaces; fields after ')' are fixed.
        rest = data[data.rindex(b")") + 2 :].split()
        return int(rest[19])
    except (OSError, ValueError, IndexError):
        return None


#: The entries of this package's folder (its modules and subpackages), by name.
_OWN_ENTRIES = frozenset(p.name for p in Path(__file__).resolve().parent.iterdir()
                         if not p.name.startswith(".") and (p.is_dir() or p.suffix == ".py"))


def in_debugkit(path: str) -> bool:
    """Whether a stack frame's file is debugkit's own code, on this machine or the one that
    wrote the stack: the path's last ``debugkit/`` folder holds one of this package's
    modules or subpackages (``.../debugkit/recorder/writer.py``). A program in a folder
    that is merely named ``debugkit`` (a clone of this repository: ``.../debugkit/tests/
    jobs/train.py``, ``.../debugkit/examples/...``) is the user's code, not debugkit's."""
    p = "/" + str(path).replace("\\", "/").lstrip("/")
    i = p.rfind("/debugkit/")
    return i >= 0 and p[i + 10:].split("/", 1)[0] in _OWN_ENTRIES
