"""Small file-system helpers shared by the writer and the reader."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


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
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()
