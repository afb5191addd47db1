"""Where a run comes from: turn what a user gave :func:`~debugkit.io.run.open_run` (a
run folder, a ``.zip`` of one, a TensorBoard log folder, an fsspec URL) into a local or
in-place run folder the reader can open.

A zip is unpacked once into the cache (:func:`debugkit.io.upload.open_zip_cached`), a
zip at a URL is fetched into the cache first, and a TensorBoard folder is converted
once per version of its event files (:func:`debugkit.io.tensorboard.open_tensorboard_cached`).
A run folder at a URL is read in place (see :mod:`debugkit.io.fs`), from one listing and
one concurrent fetch of its small files into the cache (:func:`debugkit.objcache.prefetch`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .. import format as fmt
from .._fsutil import cache_dir, cache_max_bytes, touch_cache_entry, trim_cache
from ..errors import MSG_NO_SUCH_PATH, MSG_NOT_A_RUN, RunDirError
from .access import check_run_tree
from .fs import as_path, is_local


def resolve_run_path(path: str | os.PathLike) -> tuple[Path, Path]:
    """``(folder, source)``: the run folder to read and what the user named.

    Raises
    ------
    RunDirError
        The path does not exist, is a file other than a ``.zip``, or is a folder with
        neither a ``manifest.json`` nor TensorBoard event files.
    InvalidInputError
        ``$DEBUGKIT_ALLOWED_ROOTS`` is set and the path, or a link inside it, resolves
        outside it.
    """
    p = as_path(path)
    if not is_local(p):
        from ..objcache import prefetch

        prefetch(p)  # one listing + one batched fetch of its small files, not one per read
    if not p.exists():
        raise RunDirError(MSG_NO_SUCH_PATH.format(path=p))
    source = p
    check_run_tree(p)  # with DEBUGKIT_ALLOWED_ROOTS set: the run and every link inside it
    if p.is_file():
        if p.suffix.lower() != ".zip":
            raise RunDirError(f"{p}: expected a run directory or a .zip of one")
        from .upload import open_zip_cached

        p = open_zip_cached(p if is_local(p) else _fetch_remote(p))
    if not (p / fmt.MANIFEST).is_file():
        from .tensorboard import is_tensorboard_dir, open_tensorboard_cached

        if not is_tensorboard_dir(p):
            raise RunDirError(MSG_NOT_A_RUN.format(path=p))
        p = open_tensorboard_cached(p)  # converted once per version of its event files
    return p, source


def _fetch_remote(p) -> Path:
    """Copy a remote file (a zipped run) into the local cache, keyed by its URL and size."""
    st = p.stat()
    key = hashlib.sha256(f"{p}|{st.st_size}".encode()).hexdigest()[:24]
    local = cache_dir() / "remote" / key / p.name
    if local.is_file():
        touch_cache_entry(local.parent)
        return local
    bound = cache_max_bytes()
    if (st.st_size or 0) > bound:
        raise RunDirError(f"{p}: refused: {st.st_size} bytes would not fit the cache, which holds "
                          f"at most {bound} bytes (DEBUGKIT_CACHE_MAX_MB)")
    trim_cache(reserve=int(st.st_size or 0))
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.tmp")
    n = 0
    with p.open("rb") as src, open(tmp, "wb") as dst:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            n += len(chunk)
            if n > bound:  # it grew since it was stat'ed
                dst.close()
                os.unlink(tmp)
                raise RunDirError(f"{p}: refused: more than {bound} bytes would not fit the cache "
                                  "(DEBUGKIT_CACHE_MAX_MB)")
            dst.write(chunk)
    os.replace(tmp, local)
    trim_cache(keep=local.parent)
    return local
