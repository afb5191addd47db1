"""The cache of parsed memory snapshots: ``$DEBUGKIT_CACHE/memsnap/<key>/``, Arrow files
of the tables plus ``meta.json``, keyed by the snapshot file's path, size, modification
time and the parser's version (see :func:`debugkit.io.memsnap.read_snapshot`).

An entry is written to a temporary folder and renamed into place, so a reader sees a
whole entry or none; a damaged one is parsed again by the caller.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from .._fsutil import cache_dir, read_json, touch_cache_entry, trim_cache

TABLES = ("segments", "blocks", "events")


def entry_for(p: Path, version: int) -> Path | None:
    """The cache folder of a snapshot file (None when the file cannot be stat'ed)."""
    try:
        st = p.stat()
        key = f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}|{version}"
        return cache_dir() / "memsnap" / hashlib.sha256(key.encode()).hexdigest()[:32]
    except OSError:
        return None


def save(entry: Path, tables: dict, meta: dict, version: int) -> None:
    """Write the :data:`TABLES` (DataFrames) and ``meta`` (JSON-able) as one entry."""
    import pyarrow as pa
    import pyarrow.feather as feather

    tmp = entry.parent / f".tmp-{entry.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        for name in TABLES:
            feather.write_feather(pa.Table.from_pandas(tables[name], preserve_index=False),
                                  str(tmp / f"{name}.arrow"), compression="uncompressed")
        (tmp / "meta.json").write_text(json.dumps({**meta, "version": version}, default=repr))
        try:
            os.replace(tmp, entry)
        except OSError:  # another process wrote it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    trim_cache(keep=entry)  # the cache folder stays under DEBUGKIT_CACHE_MAX_MB


def load(entry: Path, version: int) -> tuple[dict, dict]:
    """``(tables, meta)`` of an entry; ``ValueError`` for one of another parser version."""
    import pyarrow.feather as feather

    meta = read_json(entry / "meta.json")
    if meta.get("version") != version:
        raise ValueError("old cache entry")
    touch_cache_entry(entry)  # the cache evicts the least recently used entry first
    tables = {name: feather.read_table(str(entry / f"{name}.arrow"), memory_map=True).to_pandas()
              for name in TABLES}
    return tables, meta
