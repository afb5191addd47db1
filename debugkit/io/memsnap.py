"""Read PyTorch CUDA memory snapshots into flat tables.

A snapshot is the pickle that ``torch.cuda.memory._dump_snapshot`` writes: a dict of
plain values with

- ``segments``: the caching allocator's segments (one per ``cudaMalloc``), each with
  ``device, address, total_size, allocated_size, active_size, requested_size, stream,
  segment_type, segment_pool_id, is_expandable, frames`` and ``blocks`` (``address,
  size, requested_size, state, frames``);
- ``device_traces``: per device, the allocator's recent events (``action, addr`` or
  ``device_free`` for an OOM, ``size, stream, time_us, frames``), when history was
  recorded with ``torch.cuda.memory._record_memory_history``;
- ``allocator_settings`` and ``external_annotations`` (newer PyTorch).

Older PyTorch (2.0) wrote blocks without ``address``/``frames`` and with a ``history``
list of ``{addr, real_size, frames}`` instead; a bare list of segments
(``torch.cuda.memory_snapshot()``) is read too. Frames are ``{filename, line, name}``.

Files are read only through :func:`debugkit.io.safepickle.load_plain`, which refuses
every global, so a hostile file cannot run code. The nested dicts become a few
columnar tables (:class:`MemorySnapshot`); the analyses in
:mod:`debugkit.analysis.memsnap` aggregate those, and nothing per-allocation ever goes
to the browser. Parsed tables are cached by :mod:`debugkit.io.memsnap_cache`; the
snapshots of a run (listing, importing) are :mod:`debugkit.io.run_memsnaps`'s.
"""

from __future__ import annotations

import gc
import os
import shutil
from dataclasses import dataclass, field
from operator import itemgetter, methodcaller
from typing import Any

from ..errors import InvalidInputError
from ..location import as_path
from . import memsnap_cache
from .safepickle import load_plain

MSG_TOP = ("{where}: not a PyTorch memory snapshot: expected a dict with 'segments' (and "
           "'device_traces'), as torch.cuda.memory._dump_snapshot writes, got {got}")
MSG_FIELD = "{where}: {path}: {detail}"

ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom", "free")
BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
_STATE_ALIASES = {"active_awaiting_free": "active_pending_free"}
_INT64_MAX = (1 << 63) - 1


@dataclass
class MemorySnapshot:
    """A memory snapshot as tables.

    Attributes
    ----------
    source : str
        Where it was read from.
    format : str
        ``"trace"`` (PyTorch >= 2.1: frames on blocks), ``"legacy"`` (PyTorch 2.0:
        ``history`` on blocks) or ``"segments"`` (a bare list of segments, no trace).
    stacks : list of tuple of (filename, line, name)
        Unique stacks, innermost frame first; ``stack_id`` columns index this list
        (-1: no stack recorded).
    segments : DataFrame
        ``segment`` (int, row id), ``device``, ``address``, ``total_size``,
        ``allocated_size``, ``active_size``, ``requested_size``, ``stream``,
        ``segment_type`` (``large``/``small``), ``pool_id`` (str), ``is_expandable``,
        ``stack_id``. Bytes are int64.
    blocks : DataFrame
        The allocator's blocks at snapshot time: ``segment``, ``device``, ``address``,
        ``size``, ``requested_size``, ``state`` (``active_allocated``,
        ``active_pending_free``, ``inactive``), ``stack_id``.
    events : DataFrame
        The history, per device in recorded order: ``device``, ``seq`` (0-based order
        within the device's trace), ``action``, ``addr`` (null for an OOM), ``size``,
        ``stream``, ``time_us`` (float, null when not recorded), ``device_free``
        (bytes the driver reported free, OOM events only), ``stack_id``.
    allocator_settings : dict
        ``PYTORCH_CUDA_ALLOC_CONF`` and the allocator's options, when recorded.
    annotations : list of dict
        ``external_annotations`` (newer PyTorch), as recorded.
    """

    source: str
    format: str
    stacks: list
    segments: Any
    blocks: Any
    events: Any
    allocator_settings: dict = field(default_factory=dict)
    annotations: list = field(default_factory=list)
    from_cache: bool = False

    @property
    def devices(self) -> list[int]:
        """Devices that have segments or trace events."""
        ds = set(self.segments["device"].tolist()) | set(self.events["device"].unique().tolist())
        return sorted(int(d) for d in ds)

    @property
    def has_trace(self) -> bool:
        return len(self.events) > 0


# ---------------------------------------------------------------------------- parsing
class _Stacks:
    """Interns frame lists: the same list object (PyTorch shares them) is looked at once."""

    def __init__(self, where: str):
        self.where = where
        self.by_id: dict[int, int] = {}
        self.by_key: dict[tuple, int] = {}
        self.stacks: list[tuple] = []
        self._keep: list = []  # keep interned lists alive so their ids stay unique

    def intern(self, frames, path: str) -> int:
        if not frames:
            return -1
        sid = self.by_id.get(id(frames))
        if sid is not None:
            return sid
        if not isinstance(frames, (list, tuple)):
            raise InvalidInputError(MSG_FIELD.format(where=self.where, path=f"{path}.frames",
                                                     detail="expected a list of frames"))
        try:
            key = tuple((str(f["filename"]), int(f["line"]), str(f["name"])) for f in frames)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(MSG_FIELD.format(
                where=self.where, path=f"{path}.frames",
                detail=f"each frame needs 'filename', 'line' and 'name' ({type(exc).__name__}: {exc})")) from None
        sid = self.by_key.get(key)
        if sid is None:
            sid = len(self.stacks)
            self.stacks.append(key)
            self.by_key[key] = sid
        self.by_id[id(frames)] = sid
        self._keep.append(frames)
        return sid


def _int(v, where, path, name, *, optional=False):
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidInputError(MSG_FIELD.format(where=where, path=path,
                                                 detail=f"{name!r} must be an integer, got {v!r:.60}"))
    if not -(_INT64_MAX + 1) <= v <= _INT64_MAX:
        raise InvalidInputError(MSG_FIELD.format(where=where, path=path,
                                                 detail=f"{name!r} = {v} is out of the 64-bit range"))
    return v


def _req(d, key, where, path):
    if not isinstance(d, dict):
        raise InvalidInputError(MSG_FIELD.format(where=where, path=path,
                                                 detail=f"expected a dict, got {type(d).__name__}"))
    if key not in d:
        raise InvalidInputError(MSG_FIELD.format(where=where, path=path, detail=f"missing {key!r}"))
    return d[key]


def _parse_segments(segments, where: str, stacks: _Stacks):
    seg_cols: dict[str, list] = {k: [] for k in (
        "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
        "stream", "segment_type", "pool_id", "is_expandable", "stack_id")}
    blk_cols: dict[str, list] = {k: [] for k in (
        "segment", "device", "address", "size", "requested_size", "state", "stack_id")}
    legacy = False
    if not isinstance(segments, list):
        raise InvalidInputError(MSG_FIELD.format(where=where, path="segments",
                                                 detail="expected a list"))
    for i, seg in enumerate(segments):
        p = f"segments[{i}]"
        address = _int(_req(seg, "address", where, p), where, p, "address")
        total = _int(_req(seg, "total_size", where, p), where, p, "total_size")
        blocks = _req(seg, "blocks", where, p)
        if not isinstance(blocks, list):
            raise InvalidInputError(MSG_FIELD.format(where=where, path=f"{p}.blocks",
                                                     detail="expected a list"))
        device = _int(seg.get("device", 0), where, p, "device")
        stype = seg.get("segment_type")
        if stype not in ("large", "small"):
            stype = "small" if total <= (2 << 20) else "large"
        pool = seg.get("segment_pool_id")
        seg_cols["device"].append(device)
        seg_cols["address"].append(address)
        seg_cols["total_size"].append(total)
        seg_cols["stream"].append(_int(seg.get("stream", 0), where, p, "stream"))
        seg_cols["segment_type"].append(stype)
        seg_cols["pool_id"].append(",".join(str(x) for x in pool) if isinstance(pool, (list, tuple))
                                   else ("" if pool is None else str(pool)))
        seg_cols["is_expandable"].append(bool(seg.get("is_expandable", False)))
        seg_cols["stack_id"].append(stacks.intern(seg.get("frames"), p))
        offset = address
        alloc_sum = active_sum = req_sum = 0
        for j, b in enumerate(blocks):
            bp = f"{p}.blocks[{j}]"
            size = _int(_req(b, "size", where, bp), where, bp, "size")
            state = _req(b, "state", where, bp)
            state = _STATE_ALIASES.get(state, state)
            if state not in BLOCK_STATES:
                raise InvalidInputError(MSG_FIELD.format(
                    where=where, path=bp, detail=f"state {state!r}: expected one of {BLOCK_STATES}"))
            baddr = b.get("address")
            frames = b.get("frames")
            req = b.get("requested_size")
            if "history" in b:  # PyTorch 2.0: the allocation's context is in history[0]
                legacy = True
                hist = b["history"]
                if isinstance(hist, list) and hist and isinstance(hist[0], dict):
                    frames = hist[0].get("frames", frames)
                    if req is None:
                        req = hist[0].get("real_size")
            baddr = offset if baddr is None else _int(baddr, where, bp, "address")
            req = size if req is None else _int(req, where, bp, "requested_size")
            blk_cols["segment"].append(i)
            blk_cols["device"].append(device)
            blk_cols["address"].append(baddr)
            blk_cols["size"].append(size)
            blk_cols["requested_size"].append(req)
            blk_cols["state"].append(state)
            blk_cols["stack_id"].append(stacks.intern(frames, bp))
            offset = baddr + size
            if state == "active_allocated":
                alloc_sum += size
                req_sum += req
            if state != "inactive":
                active_sum += size
        seg_cols["allocated_size"].append(_int(seg.get("allocated_size", alloc_sum), where, p, "allocated_size"))
        seg_cols["active_size"].append(_int(seg.get("active_size", active_sum), where, p, "active_size"))
        seg_cols["requested_size"].append(_int(seg.get("requested_size", req_sum), where, p, "requested_size"))
    return seg_cols, blk_cols, legacy


def _parse_traces(traces, where: str, stacks: _Stacks) -> list[dict]:
    """Per device, the trace as numpy columns.

    Written column by column (one list comprehension per key, then one numpy conversion)
    because this is where a snapshot's millions of events are; when anything is off, a
    slow pass over the events says which one and why.
    """
    import numpy as np

    if traces is None:
        return []
    if not isinstance(traces, list):
        raise InvalidInputError(MSG_FIELD.format(where=where, path="device_traces",
                                                 detail="expected a list (one list per device)"))
    out = []
    for dev, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise InvalidInputError(MSG_FIELD.format(where=where, path=f"device_traces[{dev}]",
                                                     detail="expected a list of events"))
        if not trace:
            continue
        try:  # map() with C-level getters: no Python bytecode per event
            action = list(map(itemgetter("action"), trace))
            size = list(map(itemgetter("size"), trace))
            addr = list(map(methodcaller("get", "addr", -1), trace))
            stream = list(map(methodcaller("get", "stream", 0), trace))
            t_us = list(map(methodcaller("get", "time_us"), trace))
            dfree = list(map(methodcaller("get", "device_free"), trace))
            frames = list(map(methodcaller("get", "frames"), trace))
        except (KeyError, TypeError, AttributeError):
            _locate_trace_error(trace, dev, where)
            raise  # pragma: no cover - _locate_trace_error always raises
        n = len(trace)
        cat = pd_categorical(action, ACTIONS)
        if (cat.codes < 0).any():
            k = int(np.flatnonzero(cat.codes < 0)[0])
            raise InvalidInputError(MSG_FIELD.format(
                where=where, path=f"device_traces[{dev}][{k}]",
                detail=f"action {action[k]!r:.60}: expected one of {ACTIONS}"))
        is_oom = cat.codes == ACTIONS.index("oom")
        cols = {}
        for name, vals in (("addr", addr), ("size", size), ("stream", stream)):
            cols[name] = _int_column(vals, name, dev, where, skip=is_oom if name == "addr" else None)
        missing_addr = (cols["addr"] == -1) & ~is_oom
        if missing_addr.any():
            k = int(np.flatnonzero(missing_addr)[0])
            if "addr" not in trace[k]:
                raise InvalidInputError(MSG_FIELD.format(where=where, path=f"device_traces[{dev}][{k}]",
                                                         detail="missing 'addr'"))
        dfree_arr = np.zeros(n, dtype=np.int64)
        dfree_missing = np.ones(n, dtype=bool)
        oom_idx = np.flatnonzero(is_oom)
        if len(oom_idx):
            vals = [dfree[i] for i in oom_idx.tolist()]
            have = np.asarray([v is not None for v in vals], dtype=bool)
            for i, v in zip(oom_idx[have].tolist(), [v for v in vals if v is not None]):
                _int(v, where, f"device_traces[{dev}][{i}]", "device_free")
                dfree_arr[i] = v
            dfree_missing[oom_idx[have]] = False
        try:
            tus = np.asarray(t_us, dtype=np.float64)
        except (TypeError, ValueError):
            k = next(i for i, v in enumerate(t_us) if not (v is None or isinstance(v, (int, float))))
            raise InvalidInputError(MSG_FIELD.format(
                where=where, path=f"device_traces[{dev}][{k}]",
                detail=f"'time_us' must be a number, got {t_us[k]!r:.60}")) from None
        # Stacks: PyTorch shares one list per distinct traceback, so intern by identity.
        ids = np.fromiter(map(id, frames), dtype=np.uint64, count=n)
        uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        sid_of = np.array([stacks.intern(frames[i], f"device_traces[{dev}][{i}]") for i in first.tolist()],
                          dtype=np.int32)
        out.append({
            "device": np.full(n, dev, dtype=np.int32), "seq": np.arange(n, dtype=np.int64),
            "action": cat, "addr": cols["addr"], "addr_missing": is_oom, "size": cols["size"],
            "stream": cols["stream"], "time_us": tus,
            "device_free": dfree_arr, "device_free_missing": dfree_missing,
            "stack_id": sid_of[inverse.reshape(-1)],
        })
    return out


def pd_categorical(values, categories):
    """A Categorical of ``values`` over ``categories``; unknown values get code -1."""
    import numpy as np
    import pandas as pd

    try:
        codes = pd.Index(list(categories)).get_indexer(values)
    except TypeError:  # unhashable values
        codes = np.array([categories.index(v) if isinstance(v, str) and v in categories else -1
                          for v in values])
    return pd.Categorical.from_codes(np.where(codes >= 0, codes, -1), categories=list(categories)) \
        if (codes >= 0).all() else _Codes(codes)


class _Codes:
    """Codes with unknown entries (-1), only for reporting the first bad one."""

    def __init__(self, codes):
        self.codes = codes


def _int_column(vals, name, dev, where, skip=None):
    """``vals`` as int64, refusing anything that is not an integer (the slow pass names it)."""
    import numpy as np

    try:
        arr = np.asarray(vals)
        ok = arr.ndim == 1 and (arr.dtype.kind in "ib" or (
            arr.dtype.kind == "u" and (not len(arr) or int(arr.max()) <= _INT64_MAX)))
    except (OverflowError, ValueError, TypeError):
        ok = False
    if ok:
        return arr.astype(np.int64)
    for k, v in enumerate(vals):
        if skip is not None and skip[k]:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not -(_INT64_MAX + 1) <= v <= _INT64_MAX:
            raise InvalidInputError(MSG_FIELD.format(
                where=where, path=f"device_traces[{dev}][{k}]",
                detail=f"{name!r} must be a 64-bit integer, got {v!r:.60}"))
    return np.asarray([0 if (skip is not None and skip[k]) else v for k, v in enumerate(vals)],
                      dtype=np.int64)


def _locate_trace_error(trace, dev, where):
    for k, e in enumerate(trace):
        p = f"device_traces[{dev}][{k}]"
        a = _req(e, "action", where, p)
        if a != "oom":
            _req(e, "addr", where, p)
        _req(e, "size", where, p)
    raise InvalidInputError(MSG_FIELD.format(where=where, path=f"device_traces[{dev}]",
                                             detail="malformed event"))


def parse_snapshot(data, where: str = "<snapshot>") -> MemorySnapshot:
    """Turn an unpickled snapshot (dict, or a bare list of segments) into tables.

    Raises
    ------
    InvalidInputError
        It is not a snapshot, or a field is missing or has the wrong type (the message
        names it, e.g. ``segments[3].blocks[2]: missing 'size'``).
    """
    import numpy as np
    import pandas as pd

    if isinstance(data, list):
        data = {"segments": data}
        kind = "segments"
    elif isinstance(data, dict) and "segments" in data:
        kind = "trace"
    else:
        got = (f"a dict with keys {sorted(map(str, data))[:8]}" if isinstance(data, dict)
               else type(data).__name__)
        raise InvalidInputError(MSG_TOP.format(where=where, got=got))
    stacks = _Stacks(where)
    # The unpickled snapshot is millions of live containers; a cyclic collection would
    # walk all of them every few thousand allocations made here, to find nothing.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        seg_cols, blk_cols, legacy = _parse_segments(data["segments"], where, stacks)
        tr = _parse_traces(data.get("device_traces"), where, stacks)
    finally:
        if was_enabled:
            gc.enable()
    if legacy:
        kind = "legacy"

    segments = pd.DataFrame({
        "segment": np.arange(len(seg_cols["address"]), dtype=np.int64),
        "device": np.asarray(seg_cols["device"], dtype=np.int32),
        **{k: np.asarray(seg_cols[k], dtype=np.int64) for k in
           ("address", "total_size", "allocated_size", "active_size", "requested_size", "stream")},
        "segment_type": pd.Categorical(seg_cols["segment_type"], categories=["large", "small"]),
        "pool_id": pd.array(seg_cols["pool_id"], dtype="string"),
        "is_expandable": np.asarray(seg_cols["is_expandable"], dtype=bool),
        "stack_id": np.asarray(seg_cols["stack_id"], dtype=np.int32),
    })
    blocks = pd.DataFrame({
        "segment": np.asarray(blk_cols["segment"], dtype=np.int64),
        "device": np.asarray(blk_cols["device"], dtype=np.int32),
        **{k: np.asarray(blk_cols[k], dtype=np.int64) for k in ("address", "size", "requested_size")},
        "state": pd.Categorical(blk_cols["state"], categories=list(BLOCK_STATES)),
        "stack_id": np.asarray(blk_cols["stack_id"], dtype=np.int32),
    })

    if tr:
        def col(name):
            return np.concatenate([t[name] for t in tr])

        events = pd.DataFrame({
            "device": col("device"),
            "seq": col("seq"),
            "action": pd.Categorical.from_codes(np.concatenate([t["action"].codes for t in tr]),
                                                categories=list(ACTIONS)),
            "addr": pd.arrays.IntegerArray(col("addr"), col("addr_missing")),
            "size": col("size"),
            "stream": col("stream"),
            "time_us": col("time_us"),
            "device_free": pd.arrays.IntegerArray(col("device_free"), col("device_free_missing")),
            "stack_id": col("stack_id").astype(np.int32),
        })
    else:
        events = pd.DataFrame({
            "device": np.zeros(0, np.int32), "seq": np.zeros(0, np.int64),
            "action": pd.Categorical([], categories=list(ACTIONS)),
            "addr": pd.array([], dtype="Int64"), "size": np.zeros(0, np.int64),
            "stream": np.zeros(0, np.int64), "time_us": np.zeros(0, np.float64),
            "device_free": pd.array([], dtype="Int64"), "stack_id": np.zeros(0, np.int32)})
    settings = data.get("allocator_settings")
    notes = data.get("external_annotations")
    return MemorySnapshot(
        source=where, format=kind, stacks=stacks.stacks, segments=segments, blocks=blocks,
        events=events, allocator_settings=settings if isinstance(settings, dict) else {},
        annotations=notes if isinstance(notes, list) else [])


# Bump when the parsed tables change, so old cache entries are not read.
PARSE_VERSION = 1


def read_snapshot(path: str | os.PathLike, *, cache: bool = True) -> MemorySnapshot:
    """Read a snapshot pickle with the restricted unpickler and parse it.

    Parsing a large snapshot takes seconds per million events, so the parsed tables are
    kept in debugkit's cache (``$DEBUGKIT_CACHE/memsnap/``, Arrow files keyed by the
    file's path, size and modification time); the next read of the same file loads them
    in a fraction of that. The snapshot file itself is only read.

    Raises
    ------
    InvalidInputError
        Missing file, a pickle that asks for any global (refused, never run), a corrupt
        pickle, or data that is not a snapshot.
    """
    p = as_path(path)
    if not p.is_file():
        raise InvalidInputError(f"{p}: no such file")
    entry = memsnap_cache.entry_for(p, PARSE_VERSION) if cache else None
    if entry is not None and entry.is_dir():
        try:
            tables, meta = memsnap_cache.load(entry, PARSE_VERSION)
            return MemorySnapshot(
                source=str(p), format=meta["format"],
                stacks=[tuple(tuple(f) for f in st) for st in meta["stacks"]],
                allocator_settings=meta.get("allocator_settings") or {},
                annotations=meta.get("annotations") or [], from_cache=True, **tables)
        except (OSError, ValueError, KeyError, ImportError) as exc:  # a damaged entry: parse again
            shutil.rmtree(entry, ignore_errors=True)
            del exc
    data = load_plain(p)
    snap = parse_snapshot(data, where=str(p))
    del data
    if entry is not None:
        try:
            memsnap_cache.save(entry, {name: getattr(snap, name) for name in memsnap_cache.TABLES}, {
                "format": snap.format, "stacks": snap.stacks,
                "allocator_settings": snap.allocator_settings, "annotations": snap.annotations,
            }, PARSE_VERSION)
        except OSError:
            pass  # a read-only or full cache only costs speed
    return snap


def summarize(snap: MemorySnapshot) -> dict:
    """Counts and totals of a snapshot (what an import prints)."""
    seg, blk, ev = snap.segments, snap.blocks, snap.events
    oom = ev[ev["action"] == "oom"]
    return {
        "format": snap.format,
        "devices": snap.devices,
        "segments": int(len(seg)),
        "blocks": int(len(blk)),
        "reserved_bytes": int(seg["total_size"].sum()),
        "allocated_bytes": int(blk.loc[blk["state"] == "active_allocated", "size"].sum()),
        "trace_events": int(len(ev)),
        "oom_events": int(len(oom)),
        "stacks": len(snap.stacks),
    }
