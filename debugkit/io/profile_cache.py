"""Parsed sampled profiles kept in the cache folder, so a new server does not parse again.

Parsing a py-spy profile (speedscope JSON or collapsed stacks) is the largest part of
opening the Profiler page on a cold server. :func:`read_entry_cached` stores what
:func:`debugkit.io.run_profiles.read_entry` returns for a sampled profile as Arrow IPC
files (its three tables) and ``.npy`` arrays (its stacks, read with
``allow_pickle=False``) under ``$DEBUGKIT_CACHE/profiles/<key>/``, where the key is a
digest of the profile file's path, size and modification time, the pids it drops and
the debugkit version: a changed file is parsed again. Traces and stack dumps are read
as before. The run folder is never written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from .._version import __version__

CACHE_VERSION = 2  # 2: meta holds samples_in_file / launcher_samples
TABLES = ("frames", "counts", "threads")
ARRAYS = ("stack_frames", "stack_offsets")
DONE = "profile.json"  # written last: a folder with it is complete


def _key(entry: dict) -> str | None:
    try:
        st = os.stat(entry["path"])
    except (OSError, TypeError, ValueError):
        return None  # not a local file (fsspec run): no cache
    ident = [str(Path(entry["path"]).resolve()), st.st_size, st.st_mtime_ns, entry.get("format"),
             [entry.get("launcher_pid")], __version__, CACHE_VERSION]
    return hashlib.sha256(json.dumps(ident, default=str).encode()).hexdigest()[:32]


def _save(obj, folder: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc

    staging = folder.parent / f".tmp-{folder.name}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        for name in TABLES:
            table = pa.Table.from_pandas(getattr(obj, name), preserve_index=False)
            with pa.OSFile(str(staging / f"{name}.arrow"), "wb") as sink, \
                    pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
        for name in ARRAYS:
            np.save(staging / f"{name}.npy", np.asarray(getattr(obj, name)), allow_pickle=False)
        (staging / DONE).write_text(json.dumps({"format": obj.format, "meta": obj.meta}))
        try:
            os.rename(staging, folder)
        except OSError:  # another process cached it first
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _load(folder: Path):
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc

    from .profile_types import SampledProfile

    head = json.loads((folder / DONE).read_text())
    tables = {}
    for name in TABLES:
        with pa.memory_map(str(folder / f"{name}.arrow")) as src:
            tables[name] = pa.ipc.open_file(src).read_all().to_pandas()
    arrays = {name: np.load(folder / f"{name}.npy", allow_pickle=False) for name in ARRAYS}
    return SampledProfile(format=head["format"], meta=head["meta"], **tables, **arrays)


def read_entry_cached(entry: dict):
    """:func:`debugkit.io.run_profiles.read_entry`, with sampled profiles kept parsed in
    the cache folder (see the module docstring)."""
    from .._fsutil import cache_dir, touch_cache_entry, trim_cache
    from .run_profiles import read_entry

    key = _key(entry) if entry.get("format") in ("speedscope", "raw") else None
    if key is None:
        return read_entry(entry)
    folder = cache_dir() / "profiles" / key
    if (folder / DONE).is_file():
        try:
            touch_cache_entry(folder)  # the cache evicts the least recently used entry first
            return _load(folder)
        except (OSError, ValueError, KeyError, TypeError):
            shutil.rmtree(folder, ignore_errors=True)  # a damaged cache entry: parse again
    obj = read_entry(entry)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        _save(obj, folder)
        trim_cache(keep=folder)  # the cache folder stays under DEBUGKIT_CACHE_MAX_MB
    except (OSError, ValueError, TypeError):
        pass  # not cacheable here (read-only cache, odd column types): still shown
    return obj
