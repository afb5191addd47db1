"""Parsed sampled profiles kept in the cache folder, so a new server does not parse again.

Parsing a py-spy profile (speedscope JSON or collapsed stacks) is the largest part of
opening the Profiler page on a cold server. :func:`read_entry_cached` stores what
:func:`debugkit.io.run_profiles.read_entry` returns for a sampled profile as Arrow IPC
files (its three tables) and ``.npy`` arrays (its stacks, read with
``allow_pickle=False``) under ``$DEBUGKIT_CACHE/profiles/<key>/``, where the key is a
digest of the profile file's path, size and modification time, the pids it drops and
the debugkit version: a changed file is parsed again. Traces and stack dumps are read
as before. The run folder is never written.

:func:`derived` keeps results computed from a cached profile (the Profiler page's step
breakdown and the training loop's flame tree) in a ``derived/`` folder of its entry, in
the same files (DataFrames as Arrow IPC, arrays as ``.npy``, the rest as JSON), keyed by
what was computed, its parameters and a digest of the analysis code
(``debugkit/analysis/profile/``): a new server shows a profile without computing them
again, and a change of that code computes them again. They are evicted with their entry.
"""

from __future__ import annotations

import functools
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
    _save_parts({name: getattr(obj, name) for name in TABLES}, {name: getattr(obj, name) for name in ARRAYS},
                {"format": obj.format, "meta": obj.meta}, folder)


def _save_parts(tables: dict, arrays: dict, head: dict, folder: Path) -> None:
    """DataFrames as Arrow IPC files, arrays as ``.npy`` and ``head`` as JSON (written
    last) in a staging folder, renamed to ``folder``: a reader sees all of it or none."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc

    staging = folder.parent / f".tmp-{folder.name}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        for name, frame in tables.items():
            table = pa.Table.from_pandas(frame, preserve_index=False)
            with pa.OSFile(str(staging / f"{name}.arrow"), "wb") as sink, \
                    pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
        for name, arr in arrays.items():
            np.save(staging / f"{name}.npy", np.asarray(arr), allow_pickle=False)
        (staging / DONE).write_text(json.dumps({**head, "tables": list(tables), "arrays": list(arrays)}))
        try:
            os.rename(staging, folder)
        except OSError:  # another process cached it first
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _load_parts(folder: Path, tables=None, arrays=None) -> tuple[dict, dict, dict]:
    """(tables, arrays, head) as :func:`_save_parts` wrote them (``tables``, ``arrays``:
    the names to read; by default those the head lists)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc

    head = json.loads((folder / DONE).read_text())
    out = {}
    for name in head.get("tables", []) if tables is None else tables:
        with pa.memory_map(str(folder / f"{name}.arrow")) as src:
            out[name] = pa.ipc.open_file(src).read_all().to_pandas()
    arrs = {name: np.load(folder / f"{name}.npy", allow_pickle=False)
            for name in (head.get("arrays", []) if arrays is None else arrays)}
    return out, arrs, head


def _load(folder: Path):
    from .profile_types import SampledProfile

    tables, arrays, head = _load_parts(folder, TABLES, ARRAYS)
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
            obj = _load(folder)
            obj.cache_key = key
            return obj
        except (OSError, ValueError, KeyError, TypeError):
            shutil.rmtree(folder, ignore_errors=True)  # a damaged cache entry: parse again
    obj = read_entry(entry)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        _save(obj, folder)
        trim_cache(keep=folder)  # the cache folder stays under DEBUGKIT_CACHE_MAX_MB
        obj.cache_key = key
    except (OSError, ValueError, TypeError):
        pass  # not cacheable here (read-only cache, odd column types): still shown
    return obj


DERIVED_VERSION = 1


@functools.lru_cache(maxsize=1)
def _analysis_digest() -> str:
    """A digest of the profile analysis code: its results are computed again after a change."""
    h = hashlib.sha256()
    for f in sorted((Path(__file__).resolve().parents[1] / "analysis" / "profile").glob("*.py")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def derived(prof, name: str, params, compute, pack, unpack):
    """``compute()``, kept in the cache entry of ``prof`` (a profile that
    :func:`read_entry_cached` returned) under ``name`` and ``params`` (JSON-able).

    ``pack(result)`` gives ``(tables, arrays, head)``: DataFrames, NumPy arrays and a
    JSON-able dict; ``unpack(tables, arrays, head)`` makes the result again. A profile
    that is not cached, a cache that cannot be written, or a damaged entry: computed.
    """
    key = getattr(prof, "cache_key", None)
    if key is None:
        return compute()
    from .._fsutil import cache_dir

    ident = json.dumps([name, params, _analysis_digest(), DERIVED_VERSION, __version__], default=str)
    folder = cache_dir() / "profiles" / key / "derived" / hashlib.sha256(ident.encode()).hexdigest()[:32]
    if (folder / DONE).is_file():
        try:
            return unpack(*_load_parts(folder))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            shutil.rmtree(folder, ignore_errors=True)  # damaged: computed again
    result = compute()
    try:
        tables, arrays, head = pack(result)
        folder.parent.mkdir(parents=True, exist_ok=True)
        _save_parts(tables, arrays, head, folder)
    except (OSError, ValueError, TypeError):
        pass  # a read-only cache or a column Arrow cannot hold: still returned
    return result
