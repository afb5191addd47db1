"""Where a run lives: a local path, or an fsspec URL (``s3://``, ``gs://``, ``memory://``...).

Local paths stay plain :class:`pathlib.Path` objects. A URL becomes a
``universal_pathlib`` ``UPath``, which offers the same ``/``, ``iterdir``, ``is_dir``,
``read_bytes`` and ``open`` over any fsspec filesystem, so the reader works on runs
in object stores or shared storage in place, without copying them to the
dashboard's machine. The fsspec backend of a scheme must be installed (``s3fs`` for
``s3://``, ``gcsfs`` for ``gs://``); credentials come from the backend's usual
configuration (environment, config files, instance roles).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

from ..errors import MSG_BAD_TYPED_PATH, InvalidInputError, MissingDependencyError, RunDirError

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


def is_remote(value) -> bool:
    """True for ``scheme://...`` strings other than ``file://``: a location that opening
    would fetch (the allow-list, :mod:`debugkit.io.access`, checks these as text first)."""
    m = _URL.match(value) if isinstance(value, str) else None
    return bool(m) and m.group("scheme").lower() != "file"


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
    try:
        return UPath(value)
    except (ImportError, ValueError) as exc:
        raise RunDirError(MSG_BAD_URL.format(url=value, detail=exc)) from exc


def _is_upath(value) -> bool:
    return type(value).__module__.startswith("upath")


def is_local(path) -> bool:
    """True when ``path`` is a plain local path (os functions work on it)."""
    return isinstance(path, Path) and not _is_upath(path)


def split_roots(text: str) -> list[str]:
    """Split an ``os.pathsep``-separated list of roots that may hold URLs
    (``runs:s3://bucket/runs`` is two roots, not three)."""
    if os.pathsep != ":":
        return [p for p in text.split(os.pathsep) if p]
    parts = text.split(":")
    out: list[str] = []
    glued = False  # whether out[-1] is a URL still waiting for a port
    for part in parts:
        if out and part.startswith("//") and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.\-]*", out[-1]):
            out[-1] = f"{out[-1]}:{part}"
            # "http://127.0.0.1:8629/runs": the host part has no "/" yet, so a port may follow
            glued = "/" not in part[2:]
        elif glued and re.fullmatch(r"\d{1,5}(/.*)?", part):
            out[-1] = f"{out[-1]}:{part}"
            glued = False
        elif part:
            out.append(part)
            glued = False
        else:
            glued = False
    return out


def files_signature(path) -> tuple:
    """``(relative path, size, modification stamp)`` of every file under ``path``.

    Locally the stamp is ``st_mtime_ns``; on an fsspec filesystem it is whatever the
    backend reports (``mtime``, ``LastModified``, ``updated``, ``created``, ``ETag``).
    """
    sig = []
    if is_local(path):
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                p = os.path.join(root, name)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                sig.append((os.path.relpath(p, path), st.st_size, st.st_mtime_ns))
        return tuple(sig)
    fs, base = path.fs, path.path.rstrip("/")
    try:
        found = fs.find(base, detail=True)
    except (OSError, FileNotFoundError):
        return ()
    for name, info in sorted(found.items()):
        stamp = next((info.get(k) for k in ("mtime", "LastModified", "updated", "created", "ETag",
                                            "etag", "generation") if info.get(k) is not None), None)
        rel = name[len(base):].lstrip("/") if name.startswith(base) else name
        sig.append((rel, int(info.get("size") or 0), str(stamp)))
    return tuple(sig)
