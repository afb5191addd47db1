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

from ..location import (  # noqa: F401  (the one path helper, re-exported for io's readers)
    BACKENDS,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    MSG_BAD_URL,
    STORAGE_OPTIONS,
    as_path,
    check_path_text,
    is_local,
    is_remote,
    is_url,
    is_url_path,
    open_binary,
)


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
