"""Unpack uploaded runs (a directory's files, or a .zip) into the run store, safely.

Names that come from a browser or an archive are untrusted. Every name is checked
(no ``..``, no absolute paths or drive letters, no backslashes, no control characters
(C0, DEL, C1) nor invisible formatting ones (bidirectional overrides), no file and folder
of the same name), links are refused, and counts, sizes and compression ratios are bounded
while the bytes are read, not from what the archive claims. Files land in a private
staging folder and the run appears in the store by one rename once it is complete, so
no other user ever sees half an upload. Nothing is executed or unpickled.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import stat
import unicodedata
import uuid
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from .. import format as fmt
from .._fsutil import cache_dir
from ..errors import DebugkitError, UploadError
from .access import check_run_tree

MSG_BAD_NAME = "upload: refused file name {name!r}: {why}"
MSG_LINK = "upload: refused {name!r}: links are not allowed in an upload"
MSG_TOO_MANY = "upload: {count} files is more than the limit of {limit}"
MSG_TOO_BIG = "upload: {what} is {size} bytes, over the limit of {limit} bytes"
MSG_BOMB = ("upload: refused {name!r}: it expands {ratio:.0f}x (limit {limit}x); "
            "this looks like a compression bomb")
MSG_ARCHIVE_BOMB = ("upload: refused {name!r}: the archive expands {ratio:.0f}x its {size} bytes "
                    "(limit {limit}x); this looks like a compression bomb")
MSG_STORE_FULL_RUNS = ("upload: the run store {store} already holds {limit} runs, its limit "
                       "(DEBUGKIT_STORE_MAX_RUNS); delete runs first")
MSG_STORE_FULL_BYTES = ("upload: the run store {store} would hold {size} bytes, over its quota of "
                        "{limit} bytes (DEBUGKIT_STORE_MAX_MB); delete runs first")
MSG_STORE_FULL_FILES = ("upload: the run store {store} would hold {count} files, over its limit of "
                        "{limit} (DEBUGKIT_STORE_MAX_FILES); delete runs first")
MSG_BAD_SETTING = "{name}={value!r}: expected a whole number{what}"
MSG_NOT_RUN = "upload: no manifest.json at the top of the upload or in a single top-level folder"
MSG_BAD_ZIP = "upload: {name!r} is not a readable zip archive ({detail})"

_DRIVE = re.compile(r"^[A-Za-z]:")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class UploadLimits:
    """Bounds on one upload. Defaults suit runs of a few GB; set lower for a public server."""

    max_files: int = 20_000
    max_total_bytes: int = 4 << 30
    max_file_bytes: int = 2 << 30
    max_ratio: int = 200  # decompressed / compressed, per zip member (every size)
    max_archive_ratio: int = 200  # everything decompressed / the archive's bytes
    max_depth: int = 12

    @classmethod
    def from_env(cls) -> UploadLimits:
        """``$DEBUGKIT_MAX_UPLOAD_MB`` (the total; a file at most that too) and
        ``$DEBUGKIT_MAX_UPLOAD_FILES`` (files in one run, default 20,000)."""
        out: dict = {}
        mb = os.environ.get("DEBUGKIT_MAX_UPLOAD_MB")
        if mb and mb.isdigit():
            total = int(mb) << 20
            out.update(max_total_bytes=total, max_file_bytes=min(total, cls.max_file_bytes))
        files = _whole_number("DEBUGKIT_MAX_UPLOAD_FILES")
        if files is not None:
            out["max_files"] = files
        return cls(**out)


def _whole_number(name: str, unit: str = "") -> int | None:
    """``$name`` as a whole number, None when unset; :class:`UploadError` otherwise."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    if not value.strip().isdigit():
        raise UploadError(MSG_BAD_SETTING.format(name=name, value=value[:40], what=unit))
    return int(value)


def check_name(name: str, limits: UploadLimits = UploadLimits()) -> PurePosixPath:
    """Return ``name`` as a safe relative path, or raise :class:`UploadError`."""
    if not isinstance(name, str) or not name:
        raise UploadError(MSG_BAD_NAME.format(name=name, why="empty name"))
    if any(unicodedata.category(c) == "Cc" for c in name):  # C0, DEL and C1 controls
        raise UploadError(MSG_BAD_NAME.format(name=name, why="it contains NUL or control characters"))
    if any(unicodedata.category(c) in ("Cf", "Zl", "Zp") for c in name):
        # bidi overrides (U+202E shows "evil\u202eyp.sj" as "eviljs.py"), zero-width marks,
        # line and paragraph separators: a name must read as what it is
        raise UploadError(MSG_BAD_NAME.format(
            name=name, why="it contains invisible formatting characters (bidirectional "
                           "overrides, zero-width marks or line separators)"))
    if "\\" in name:
        raise UploadError(MSG_BAD_NAME.format(name=name, why="backslashes are not allowed"))
    if name.startswith("/") or _DRIVE.match(name):
        raise UploadError(MSG_BAD_NAME.format(name=name, why="absolute paths are not allowed"))
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts:
        raise UploadError(MSG_BAD_NAME.format(name=name, why="empty name"))
    if any(p == ".." for p in parts):
        raise UploadError(MSG_BAD_NAME.format(name=name, why="'..' is not allowed"))
    if len(parts) > limits.max_depth:
        raise UploadError(MSG_BAD_NAME.format(name=name, why=f"nested deeper than {limits.max_depth}"))
    if any(len(p) > 255 for p in parts):
        raise UploadError(MSG_BAD_NAME.format(name=name, why="a path component is too long"))
    return PurePosixPath(*parts)


@dataclass(frozen=True)
class StoreQuota:
    """Bounds on the whole run store, so repeated uploads cannot fill the disk.

    ``max_bytes`` (``$DEBUGKIT_STORE_MAX_MB``, default 20 GiB) counts the disk the store
    takes: every file's and folder's allocated blocks (a 1-byte file takes a 4 KiB
    block), uploads in flight included; ``max_runs`` (``$DEBUGKIT_STORE_MAX_RUNS``,
    default 1,000) counts its run folders and ``max_files``
    (``$DEBUGKIT_STORE_MAX_FILES``, default 200,000) its files and folders.
    """

    max_bytes: int = 20 << 30
    max_runs: int = 1000
    max_files: int = 200_000

    @classmethod
    def from_env(cls) -> StoreQuota:
        out = {}
        for name, field, scale in (("DEBUGKIT_STORE_MAX_MB", "max_bytes", 1 << 20),
                                   ("DEBUGKIT_STORE_MAX_RUNS", "max_runs", 1),
                                   ("DEBUGKIT_STORE_MAX_FILES", "max_files", 1)):
            value = _whole_number(name, " (MiB)" if scale > 1 else "")
            if value is not None:
                out[field] = value * scale
        return cls(**out)


@dataclass(frozen=True)
class StoreUsage:
    """What a store takes: ``bytes`` allocated on disk, ``files`` (files, folders and
    links), ``runs`` (top-level run folders)."""

    bytes: int
    files: int
    runs: int


def allocated_bytes(st: os.stat_result) -> int:
    """The disk a file or folder takes: its allocated blocks (``st_blocks`` counts 512-byte
    units on POSIX); where that is unknown, its size rounded up to 4 KiB."""
    blocks = getattr(st, "st_blocks", None)
    if blocks is not None:
        return int(blocks) * 512
    return -(-st.st_size // 4096) * 4096


def block_size(folder: Path) -> int:
    """The file system's allocation unit under ``folder`` (4,096 when unknown)."""
    try:
        vfs = os.statvfs(folder)
        return int(vfs.f_frsize or vfs.f_bsize or 4096)
    except (OSError, AttributeError):
        return 4096


def store_counts(store: Path) -> StoreUsage:
    """The store's :class:`StoreUsage` (links not followed; the store's own files too)."""
    total, files, runs = 0, 0, 0
    store = Path(store)
    if not store.is_dir():
        return StoreUsage(0, 0, 0)
    for top, dirs, names in os.walk(store):
        if Path(top) == store:
            runs = sum(1 for d in dirs if not d.startswith("."))
        for name in [*dirs, *names]:
            try:
                total += allocated_bytes(os.lstat(os.path.join(top, name)))
            except OSError:
                continue
            files += 1
    return StoreUsage(total, files, runs)


class _Budget:
    """Counts one upload against its limits and the store's quota while it is written.

    ``total`` is the upload's bytes (the upload limits); ``disk`` what they take on disk
    (each file rounded up to whole blocks, each new folder one block: the quota)."""

    def __init__(self, limits: UploadLimits, archive_bytes: int | None = None,
                 store: Path | None = None, quota: StoreQuota | None = None,
                 used: StoreUsage | None = None):
        self.limits = limits
        self.files = 0
        self.total = 0
        self.disk = 0
        self.archive_bytes = archive_bytes
        self.store, self.quota = store, quota
        self.used = used or StoreUsage(0, 0, 0)
        self.block = block_size(store) if store is not None else 4096
        self.dirs: set = set()

    def add_file(self, dirs: Iterable = ()):
        """One more file (and the new folders ``dirs`` above it)."""
        new_dirs = [d for d in dirs if d not in self.dirs]
        self.dirs.update(new_dirs)
        self.files += 1
        self.disk += len(new_dirs) * self.block
        if self.files > self.limits.max_files:
            raise UploadError(MSG_TOO_MANY.format(count=self.files, limit=self.limits.max_files))
        if self.quota is not None:
            count = self.used.files + self.files + len(self.dirs)
            if count > self.quota.max_files:
                raise UploadError(MSG_STORE_FULL_FILES.format(store=self.store, count=count,
                                                              limit=self.quota.max_files))
        self._check_disk(0)

    def end_file(self, file_bytes: int):
        """A file is written: charge its whole blocks."""
        self.disk += -(-file_bytes // self.block) * self.block

    def _check_disk(self, pending: int):
        if self.quota is not None and self.used.bytes + self.disk + pending > self.quota.max_bytes:
            raise UploadError(MSG_STORE_FULL_BYTES.format(store=self.store,
                                                          size=self.used.bytes + self.disk + pending,
                                                          limit=self.quota.max_bytes))

    def add_bytes(self, name: str, file_bytes: int, n: int):
        self.total += n
        if file_bytes > self.limits.max_file_bytes:
            raise UploadError(MSG_TOO_BIG.format(what=f"file {name!r}", size=file_bytes,
                                                 limit=self.limits.max_file_bytes))
        if self.total > self.limits.max_total_bytes:
            raise UploadError(MSG_TOO_BIG.format(what="the upload", size=self.total,
                                                 limit=self.limits.max_total_bytes))
        self._check_disk(-(-file_bytes // self.block) * self.block)
        if self.archive_bytes:
            ratio = self.total / self.archive_bytes
            if ratio > self.limits.max_archive_ratio:
                raise UploadError(MSG_ARCHIVE_BOMB.format(name=name, ratio=ratio, size=self.archive_bytes,
                                                          limit=self.limits.max_archive_ratio))


def _copy_bounded(src: BinaryIO, dest: Path, name: str, budget: _Budget,
                  compressed: int | None = None) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(dest, "xb") as out:  # "x": never overwrite (duplicate names are refused)
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            written += len(chunk)
            budget.add_bytes(name, written, len(chunk))
            if compressed is not None:
                ratio = written / max(compressed, 1)
                if ratio > budget.limits.max_ratio:
                    raise UploadError(MSG_BOMB.format(name=name, ratio=ratio,
                                                      limit=budget.limits.max_ratio))
            out.write(chunk)
    budget.end_file(written)


def _zip_is_link(info: zipfile.ZipInfo) -> bool:
    mode = (info.external_attr >> 16) & 0xFFFF
    return info.create_system == 3 and stat.S_IFMT(mode) in (stat.S_IFLNK, stat.S_IFSOCK,
                                                              stat.S_IFCHR, stat.S_IFBLK,
                                                              stat.S_IFIFO)


def _size_of(source) -> int | None:
    try:
        if isinstance(source, (str, os.PathLike)):
            return os.stat(source).st_size
        pos = source.tell()
        end = source.seek(0, os.SEEK_END)
        source.seek(pos)
        return end
    except (OSError, AttributeError, ValueError):
        return None


def extract_zip(source: str | os.PathLike | BinaryIO, dest: Path, *,
                limits: UploadLimits = UploadLimits(), display_name: str = "archive.zip",
                budget: _Budget | None = None) -> None:
    """Extract a zip into the empty folder ``dest`` with every check of this module.

    The compression ratio is bounded for every member, whatever its size, and over the
    whole archive (everything inflated against the archive's bytes), while reading.
    """
    budget = budget or _Budget(limits)
    budget.archive_bytes = _size_of(source)
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UploadError(MSG_BAD_ZIP.format(name=display_name, detail=exc)) from exc
    seen = _Names()
    with zf:
        infos = zf.infolist()
        if len(infos) > limits.max_files:
            raise UploadError(MSG_TOO_MANY.format(count=len(infos), limit=limits.max_files))
        for info in infos:
            rel = check_name(info.filename, limits)
            if _zip_is_link(info):
                raise UploadError(MSG_LINK.format(name=info.filename))
            if info.is_dir():
                continue
            seen.add(rel, info.filename)
            budget.add_file(rel.parents)
            if info.file_size > limits.max_file_bytes:
                raise UploadError(MSG_TOO_BIG.format(what=f"file {info.filename!r}",
                                                     size=info.file_size, limit=limits.max_file_bytes))
            if info.compress_size and info.file_size / info.compress_size > limits.max_ratio:
                raise UploadError(MSG_BOMB.format(name=info.filename,
                                                  ratio=info.file_size / info.compress_size,
                                                  limit=limits.max_ratio))
            try:
                with zf.open(info) as src:
                    _copy_bounded(src, dest / rel, info.filename, budget,
                                  compressed=info.compress_size)
            except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, ValueError,
                    zlib.error, RuntimeError) as exc:  # RuntimeError: encrypted member;
                # ValueError: a local header whose offsets point before the file's start
                raise UploadError(MSG_BAD_ZIP.format(name=display_name, detail=exc)) from exc


def _find_run_root(staging: Path) -> Path:
    if (staging / fmt.MANIFEST).is_file():
        return staging
    children = [p for p in staging.iterdir() if not p.name.startswith(".")]
    if len(children) == 1 and children[0].is_dir() and (children[0] / fmt.MANIFEST).is_file():
        return children[0]
    raise UploadError(MSG_NOT_RUN)


def _publish(staging: Path, store: Path, preferred: str, quota: StoreQuota | None = None) -> Path:
    """Validate the staged run and move it into the store under a fresh name (under a
    lock that re-checks the store's quota, so two uploads at once cannot both pass it)."""
    root = _find_run_root(staging)
    check_run_tree(root)  # with DEBUGKIT_ALLOWED_ROOTS set, as the reader would check it
    try:  # the format's validator: a clear error for a broken or too-new run
        fmt.read_manifest(root)
    except DebugkitError as exc:
        # named by the upload's own path, never the staging folder's (a server path)
        name = f"{root.name}/{fmt.MANIFEST}" if root != staging else fmt.MANIFEST
        text = str(exc).replace(str(root / fmt.MANIFEST), name).replace(
            str(root), root.name if root != staging else "the upload")
        raise UploadError(f"upload: {text}") from None
    with _store_lock(store):
        if quota is not None:
            _check_quota(store, quota, store_counts(store),  # the staged files are in the store too
                         over=lambda used, limit: used > limit)
        return _rename_into(root, store, preferred)


class _store_lock:
    """An exclusive ``flock`` on ``<store>/.upload.lock`` (POSIX; elsewhere a no-op)."""

    def __init__(self, store: Path):
        self.path = Path(store) / ".upload.lock"
        self.f = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # Windows: no flock; the quota is then checked without it
            return self
        self.f = open(self.path, "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.f is not None:
            self.f.close()  # closing releases the lock


def _rename_into(root: Path, store: Path, preferred: str) -> Path:
    base = _SAFE_NAME.sub("-", preferred).strip("-.")[:80] or "upload"
    for n in range(1000):
        name = base if n == 0 else f"{base}-{n + 1}"
        target = store / name
        try:
            os.rename(root, target)  # fails if target exists (non-empty dir) on POSIX
        except OSError:
            if target.exists():
                continue
            raise
        return target
    raise UploadError(f"upload: could not find a free name for {base!r} in the store")


def _staging(store: Path) -> Path:
    store = Path(store)
    store.mkdir(parents=True, exist_ok=True)
    incoming = store / ".incoming"
    incoming.mkdir(exist_ok=True)
    d = incoming / uuid.uuid4().hex
    d.mkdir()
    return d


class _Names:
    """The names of an upload so far: refuses a duplicate, and a file and a folder with
    the same name (``a/b`` and ``a/b/c``), before anything is written."""

    def __init__(self):
        self.files: set[str] = set()
        self.dirs: set[str] = set()

    def add(self, rel: PurePosixPath, name: str) -> None:
        key = str(rel)
        if key in self.files:
            raise UploadError(MSG_BAD_NAME.format(name=name, why="duplicate name"))
        parents = [str(PurePosixPath(*rel.parts[:i])) for i in range(1, len(rel.parts))]
        clash = key if key in self.dirs else next((p for p in parents if p in self.files), None)
        if clash is not None:
            raise UploadError(MSG_BAD_NAME.format(
                name=name, why=f"{clash!r} is both a file and a folder in this upload"))
        self.files.add(key)
        self.dirs.update(parents)


def unpack_files(files: Iterable[tuple[str, BinaryIO | bytes]], store: str | os.PathLike, *,
                 limits: UploadLimits | None = None) -> Path:
    """Store the files of an uploaded run directory and return the new run's path.

    Parameters
    ----------
    files : iterable of (name, data)
        ``name`` is the relative path the browser sent (``myrun/manifest.json``);
        ``data`` a file object or bytes. A single ``.zip`` is unpacked as an archive.
    store : path
        The run store; the run appears there as one folder, or not at all.
    """
    limits = limits or UploadLimits.from_env()
    files = list(files)
    if len(files) == 1 and files[0][0].lower().endswith(".zip"):
        name, data = files[0]
        return unpack_zip(io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data,
                          store, limits=limits, display_name=name)
    if not files:
        raise UploadError("upload: no files were uploaded")
    if len(files) > limits.max_files:
        raise UploadError(MSG_TOO_MANY.format(count=len(files), limit=limits.max_files))
    store = Path(store)
    budget = _quota_budget(store, limits)
    staging = _staging(store)
    try:
        seen = _Names()
        top = set()
        for name, data in files:
            rel = check_name(name, limits)
            seen.add(rel, name)
            top.add(rel.parts[0])
            budget.add_file(rel.parents)
            src = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
            _copy_bounded(src, staging / rel, name, budget)
        preferred = next(iter(top)) if len(top) == 1 and len(seen.files) > 1 else "upload"
        if preferred == fmt.MANIFEST:
            preferred = "upload"
        return _publish(staging, store, preferred, budget.quota)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _quota_budget(store: Path, limits: UploadLimits) -> _Budget:
    """A budget that also stops at the store's quota; refuses at once when it is full."""
    quota = StoreQuota.from_env()
    used = store_counts(store)
    _check_quota(store, quota, used, over=lambda used, limit: used >= limit)
    return _Budget(limits, store=store, quota=quota, used=used)


def check_store_room(store: Path, what: str) -> None:
    """Refuse (:class:`UploadError`, its message starting with ``what``) when the store
    is at its byte or file quota: anything a server writes into the store (an audit)
    counts as an upload does."""
    try:  # the run count is not checked: this adds no run
        _check_quota(Path(store), StoreQuota.from_env(), store_counts(Path(store)),
                     over=lambda used, limit: used >= limit, runs=False)
    except UploadError as exc:
        raise UploadError(f"{what}: " + str(exc).removeprefix("upload: ")) from None


def _check_quota(store: Path, quota: StoreQuota, used: StoreUsage, over, runs: bool = True) -> None:
    if runs and used.runs >= quota.max_runs:
        raise UploadError(MSG_STORE_FULL_RUNS.format(store=store, limit=quota.max_runs))
    if over(used.bytes, quota.max_bytes):
        raise UploadError(MSG_STORE_FULL_BYTES.format(store=store, size=used.bytes, limit=quota.max_bytes))
    if over(used.files, quota.max_files):
        raise UploadError(MSG_STORE_FULL_FILES.format(store=store, count=used.files, limit=quota.max_files))


def unpack_zip(source: str | os.PathLike | BinaryIO, store: str | os.PathLike, *,
               limits: UploadLimits | None = None, display_name: str | None = None) -> Path:
    """Store the run inside a zip archive and return the new run's path."""
    limits = limits or UploadLimits.from_env()
    display_name = display_name or (os.path.basename(source) if isinstance(source, (str, os.PathLike)) else "upload.zip")
    budget = _quota_budget(Path(store), limits)
    staging = _staging(Path(store))
    try:
        extract_zip(source, staging / "x", limits=limits, display_name=display_name, budget=budget)
        (staging / "x").mkdir(exist_ok=True)
        preferred = Path(display_name).stem
        root = _find_run_root(staging / "x")
        if root != staging / "x":
            preferred = root.name
        return _publish(staging / "x", Path(store), preferred, budget.quota)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


MSG_ZIP_OVER_CACHE = ("{path}: refused: {detail}; opening a zip unpacks it into the cache, "
                      "which holds at most {limit} bytes (DEBUGKIT_CACHE_MAX_MB)")


def open_zip_cached(path: Path) -> Path:
    """Unpack a zipped run once into the cache (keyed by the zip's bytes) and return the
    run folder. The zip itself is only read.

    The unpacking has the upload's checks and is bounded by the cache's size
    (``$DEBUGKIT_CACHE_MAX_MB``): least recently used entries are evicted to make room,
    and a zip that would not fit, or is refused otherwise, is refused at once on the next
    open (the refusal is remembered for the file's path, size and modification time)."""
    from .._fsutil import cache_max_bytes, touch_cache_entry, trim_cache
    from ..errors import RunDirError
    from .decompress import check_not_refused, file_key, remember_refusal

    fkey = file_key(path)
    try:
        check_not_refused(fkey)
    except ValueError as exc:
        raise RunDirError(str(exc)) from None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    key = h.hexdigest()[:24]
    target = cache_dir() / "zips" / key
    if target.is_dir():
        touch_cache_entry(target)
    else:
        bound = cache_max_bytes()
        base = UploadLimits.from_env()
        limits = UploadLimits(max_files=base.max_files, max_total_bytes=min(base.max_total_bytes, bound),
                              max_file_bytes=min(base.max_file_bytes, bound))
        staging = cache_dir() / "zips" / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        staging.mkdir(parents=True)
        try:
            try:
                with zipfile.ZipFile(path) as zf:  # room for what the headers claim (bounded)
                    claimed = sum(i.file_size for i in zf.infolist())
            except (zipfile.BadZipFile, OSError, ValueError):
                claimed = 0
            trim_cache(reserve=min(claimed, bound), keep=staging)
            extract_zip(path, staging / "x", limits=limits, display_name=path.name)
            (staging / "x").mkdir(exist_ok=True)
            try:
                os.rename(staging / "x", target)
            except OSError:
                if not target.is_dir():
                    raise
        except UploadError as exc:
            msg = str(exc).removeprefix("upload: ")
            if "over the limit" in msg:
                msg = MSG_ZIP_OVER_CACHE.format(path=path, detail=msg, limit=bound)
            else:
                msg = f"{path}: {msg}"
            remember_refusal(fkey, msg)
            raise RunDirError(msg) from exc
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        trim_cache(keep=target)
    try:
        return _find_run_root(target)
    except UploadError as exc:
        raise RunDirError(f"{path}: the zip holds no run ({exc})") from exc
