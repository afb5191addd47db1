"""Where a run lives: a local path, or an fsspec URL (``s3://``, ``gs://``, ``memory://``...).

This is the one place that turns a run location into a path object (layer 0, so the
recorder, checkpoints and readers all use it). Local paths stay plain
:class:`pathlib.Path` objects. A URL becomes a ``universal_pathlib`` ``UPath``, which
offers the same ``/``, ``iterdir``, ``is_dir``, ``read_bytes`` and ``open`` over any
fsspec filesystem, so the reader works on runs in object stores in place. The fsspec
backend of a scheme must be installed (``s3fs`` for ``s3://``: ``pip install
'debugkit[s3]'``); credentials come from the backend's usual configuration (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, config files,
instance roles).

The rule (docs/CONTRIBUTING.md): never ``pathlib.Path(x)`` on a value that may be a run
location; ``Path("s3://b/r")`` is the local folder ``s3:/b/r``. Use :func:`as_path`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote

from ._fsutil import check_regular_file
from .errors import MSG_BAD_TYPED_PATH, InvalidInputError, MissingDependencyError, RunDirError

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")
MSG_BAD_URL = "{url}: cannot open this URL ({detail})"
#: The longest path (characters) and path component that a typed path may have (Linux's
#: PATH_MAX and NAME_MAX); longer is refused before the file system sees it.
MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 255


def check_path_text(value: str) -> str:
    """Return a path typed by a person (or sent in a form) if the OS could take it;
    :class:`InvalidInputError` for NUL or control characters, or an overlong path or
    component, with the value shortened (the message never carries 5,000 characters)."""
    short = value if len(value) <= 80 else value[:60] + f"… ({len(value)} characters)"
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise InvalidInputError(MSG_BAD_TYPED_PATH.format(value=short, why="it contains a NUL or "
                                                          "control character"))
    if len(value) > MAX_PATH_CHARS:
        raise InvalidInputError(MSG_BAD_TYPED_PATH.format(
            value=short, why=f"longer than {MAX_PATH_CHARS} characters"))
    if any(len(part) > MAX_NAME_CHARS for part in value.split("/")):
        raise InvalidInputError(MSG_BAD_TYPED_PATH.format(
            value=short, why=f"a component is longer than {MAX_NAME_CHARS} characters"))
    return value


def is_url(value) -> bool:
    """True for ``scheme://...`` strings (``file://`` included)."""
    return isinstance(value, str) and bool(_URL.match(value))


def is_remote(value) -> bool:
    """True for ``scheme://...`` strings other than ``file://``: a location that opening
    would fetch (the allow-list, :mod:`debugkit.io.access`, checks these as text first)."""
    m = _URL.match(value) if isinstance(value, str) else None
    return m is not None and m.group("scheme").lower() != "file"


def as_path(value):
    """A path object for ``value``: :class:`Path` for local paths and ``file://`` URLs,
    a ``UPath`` for other fsspec URLs. Path-like objects are returned unchanged."""
    if not isinstance(value, str):
        if _is_upath(value) and not isinstance(value, Path):
            return value
        return Path(value).expanduser()
    check_path_text(value)
    m = _URL.match(value)
    if not m:
        return Path(value).expanduser()
    scheme = m.group("scheme").lower()
    if scheme == "file":
        return Path(unquote(value[len("file://"):]) or "/")
    try:
        from upath import UPath
    except ImportError:
        raise MissingDependencyError("universal_pathlib", f"opening {value}",
                                     "universal-pathlib fsspec") from None
    backend = BACKENDS.get(scheme)
    if backend is not None:
        try:
            __import__(backend[0])
        except ImportError:
            raise MissingDependencyError(backend[0], f"opening {value}", backend[1]) from None
    _remembering(scheme)
    try:
        return UPath(value, **STORAGE_OPTIONS.get(scheme, {}))
    except (ImportError, ValueError) as exc:
        raise RunDirError(MSG_BAD_URL.format(url=value, detail=exc)) from exc


#: The fsspec backend each object-store scheme needs, and what to install for it.
BACKENDS = {
    "s3": ("s3fs", "'debugkit[s3]'"), "s3a": ("s3fs", "'debugkit[s3]'"),
    "gs": ("gcsfs", "gcsfs"), "gcs": ("gcsfs", "gcsfs"),
    "az": ("adlfs", "adlfs"), "abfs": ("adlfs", "adlfs"),
}
#: Storage options per scheme. Object stores' listing caches are off: a cached listing
#: never expires in s3fs, so a file a live run (or another writer) adds later would stay
#: invisible to ``exists``/``is_file``; readers list what they need once per call instead.
#: The S3 client's connection pool matches the concurrent fetches of a prefetch
#: (:data:`debugkit.objcache.FETCH_CONCURRENCY`; botocore's default is 10).
_S3 = {"use_listings_cache": False, "config_kwargs": {"max_pool_connections": 64}}
STORAGE_OPTIONS = {"s3": _S3, "s3a": _S3,
                   "gs": {"use_listings_cache": False}, "gcs": {"use_listings_cache": False}}
_REMEMBERING: set[str] = set()


def _remembering(scheme: str) -> None:
    """Give an object store's fsspec class the listing- and prefetch-aware subclass of
    :mod:`debugkit.objcache` (once per scheme): pages read a run from one listing and
    one batched fetch instead of a request per question."""
    if scheme in _REMEMBERING or scheme not in BACKENDS:
        return
    import fsspec

    from .objcache import enable

    try:
        cls = fsspec.get_filesystem_class(scheme)
    except (ImportError, ValueError):
        return  # as_path says what is missing
    fsspec.register_implementation(scheme, enable(cls), clobber=True)
    _REMEMBERING.add(scheme)


def _is_upath(value) -> bool:
    return type(value).__module__.startswith("upath")


def is_local(path) -> bool:
    """True when ``path`` is a plain local path (os functions work on it)."""
    return isinstance(path, Path) and not _is_upath(path)


def open_binary(path):
    """A binary file object for ``path`` (local or URL); a local one must be a regular
    file (a FIFO would block ``open()`` forever)."""
    p = as_path(path)
    if is_local(p):
        check_regular_file(p)
        return open(p, "rb")
    return p.open("rb")


def file_stamp(path) -> tuple:
    """``(size, modification stamp)`` of a file, local or URL: a cache key that changes when
    the file is rewritten (locally ``st_mtime_ns``; in an object store the backend's
    ``LastModified``/``mtime``/``ETag``)."""
    p = as_path(path)
    if is_local(p):
        st = p.stat()
        return st.st_size, st.st_mtime_ns
    info = p.fs.info(p.path)
    stamp = next((info.get(k) for k in ("mtime", "LastModified", "updated", "ETag", "etag")
                  if info.get(k) is not None), None)
    return int(info.get("size") or 0), str(stamp)


@contextlib.contextmanager
def local_copy(path):
    """A local folder or file with the content of ``path``: ``path`` itself when local,
    else a temporary copy (downloaded whole, removed on exit). For work that needs a
    local file: a replay's child process, a library that opens file names."""
    p = as_path(path)
    if is_local(p):
        yield p
        return
    tmp = Path(tempfile.mkdtemp(prefix="debugkit-fetch-"))
    try:
        dest = tmp / (p.name or "data")
        if p.is_dir():
            p.fs.get(p.path.rstrip("/") + "/", str(dest) + "/", recursive=True)
        else:
            p.fs.get(p.path, str(dest))
        yield dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_safetensors(path, *, numpy: bool = False) -> dict:
    """The tensors of a ``.safetensors`` file, local (memory-mapped) or in an object store
    (its bytes parsed in memory); numpy arrays with ``numpy=True``, else torch tensors."""
    import importlib

    st = importlib.import_module("safetensors.numpy" if numpy else "safetensors.torch")
    p = as_path(path)
    return st.load_file(str(p)) if is_local(p) else st.load(p.read_bytes())
