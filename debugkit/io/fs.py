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
import threading
import time

from .. import objcache
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


def stat_files(dirpath: str, files) -> list[tuple[str, int, int]]:
    """``(name, size, st_mtime_ns)`` of each of ``files`` (names in the local folder
    ``dirpath``, as ``os.walk`` lists them), sorted by name; a file gone since the listing
    is left out. One stat per file for :func:`files_signature` and the run index's
    listing of a whole store (:func:`debugkit.diagnose.run_summaries.store_signatures`)."""
    out = []
    for name in sorted(files):
        try:
            st = os.stat(os.path.join(dirpath, name))
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns))
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
            rel = os.path.relpath(root, path)
            sig += [(name if rel == "." else os.path.join(rel, name), size, ns)
                    for name, size, ns in stat_files(root, files)]
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


#: How long one listing of a URL root is reused: :func:`debugkit.objcache.listing_ttl_s`
#: seconds (2 by default). The run list, the index's signatures and a page's run lookup in one rerun
#: share it, and a run added to the bucket shows within this time (the pages' own
#: run-list cache is 5 s).
_LISTINGS: dict[str, tuple[float, dict]] = {}
_LISTINGS_LOCK = threading.Lock()


def list_tree(root) -> dict[str, dict]:
    """``{relative name: info}`` of every object under a URL ``root``, from one flat
    listing (``ListObjectsV2`` without a delimiter on S3: one request per 1,000 objects,
    not one per run), reused for :func:`debugkit.objcache.listing_ttl_s` seconds. ``{}`` when it cannot be
    listed. ``info`` has ``size`` and the backend's modification stamp."""
    root = as_path(root) if isinstance(root, str) else root
    key = str(root).rstrip("/")
    now = time.monotonic()
    with _LISTINGS_LOCK:
        hit = _LISTINGS.get(key)
        if hit is not None and now - hit[0] < objcache.listing_ttl_s():
            return hit[1]
    fs, base = root.fs, root.path.rstrip("/")
    try:
        found = fs.find(base, detail=True)
    except (OSError, FileNotFoundError, ValueError):
        found = {}
    out = {}
    for name, info in found.items():
        rel = name[len(base):].lstrip("/") if name.startswith(base) else name
        if rel:
            out[rel] = info
    with _LISTINGS_LOCK:
        _LISTINGS[key] = (now, out)
        if len(_LISTINGS) > 64:
            _LISTINGS.pop(next(iter(_LISTINGS)))
    return out


def stamp_of(info: dict) -> str:
    """The modification stamp an fsspec listing gives for an object."""
    return str(next((info.get(k) for k in ("mtime", "LastModified", "updated", "created",
                                           "ETag", "etag", "generation")
                     if info.get(k) is not None), None))


def child_names(folder) -> list[tuple[str, bool]]:
    """``(name, is a folder)`` of each entry of ``folder`` (a ``Path`` or ``UPath``), in no
    particular order; ``[]`` when it is not a folder. Unlike ``iterdir()`` + ``is_dir()``
    it makes no path object and asks no question per entry (on an object store one
    listing answers, see :mod:`debugkit.objcache`)."""
    if is_local(folder):
        try:
            with os.scandir(folder) as entries:
                return [(e.name, e.is_dir()) for e in entries]
        except (FileNotFoundError, NotADirectoryError):
            return []
    base = str(folder.path).rstrip("/")
    try:
        listed = folder.fs.ls(base, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for info in listed:
        name = str(info.get("name", "")).rstrip("/")
        if not name or name == base or name.lstrip("/") == base.lstrip("/"):
            continue  # a file listed as itself, or a backend listing the folder too
        out.append((name.rpartition("/")[2], info.get("type") == "directory"))
    return out
