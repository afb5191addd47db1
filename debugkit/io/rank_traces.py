"""Read torch.profiler chrome traces of several ranks (one file per rank) for the
distributed trace analysis.

This is the minimal reading the straggler and overlap analysis needs: the
``distributedInfo`` header (which rank wrote the file) and the complete events
(``"ph": "X"``) with their times, threads, CUDA streams and launch correlation. The
profiler page (issue 5) has a full chrome-trace parser; the two should become one.

Files: ``<run>/traces/*.json`` or ``*.json.gz`` (``export_chrome_trace`` output, or
``tensorboard_trace_handler`` files), or any list of paths given explicitly.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from .. import format as fmt
from .._fsutil import in_run, loads_capped
from ..errors import InvalidInputError, OutsideRunError

_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
MSG_NOT_TRACE = "{path}: not a torch.profiler chrome trace ({detail})"
MSG_NO_RANK = ("{path}: the trace has no distributedInfo.rank (record it with torch.profiler "
               "while torch.distributed is initialised)")
MSG_DUP_RANK = "{path}: rank {rank} already read from {other}; give one trace per rank"

# Event kinds (HTA's kernel types, plus CPU-only traces where gloo runs collectives).
COMM, COMPUTE, MEMORY, STEP, OTHER = "comm", "compute", "memory", "step", "other"


def is_comm_name(name: str) -> bool:
    """NCCL kernels (``ncclKernel_*``, ``ncclDevKernel_*``) and gloo work (``gloo:*``)."""
    return name.startswith("nccl") or "gloo:" in name


def is_memory_name(name: str) -> bool:
    return "Memcpy" in name or "Memset" in name


@dataclass
class RankTrace:
    """One rank's trace.

    Attributes
    ----------
    rank, world_size : int
    backend : str or None
    path : str
    device_trace : bool
        True when the trace holds GPU kernels (then only device events are classified
        as comm/compute); False for a CPU-only trace (gloo work and CPU operators).
    events : DataFrame
        ``name, cat, ts_us, dur_us, end_us, tid, stream, kind, iteration`` (``kind``:
        ``comm | compute | memory | step | other``; ``stream``: the CUDA stream of a
        device event, 0 for gloo work, -1 for other host events; ``iteration``: the
        ``ProfilerStep#N`` the event (or, for a kernel, its launch) started in, -1
        outside any).
    """

    rank: int
    world_size: int | None
    backend: str | None
    path: str
    device_trace: bool
    events: object


def _load_json(path) -> dict:
    from .decompress import read_maybe_gzip

    try:  # inflated within debugkit.io.decompress's limits: a gzip bomb is refused, once
        raw = read_maybe_gzip(path)
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidInputError(MSG_NOT_TRACE.format(path=path, detail=f"bad gzip data: {exc}")) from exc
    try:
        doc = loads_capped(raw, path)  # a trace nested 100,000 deep: refused, no RecursionError
    except ValueError as exc:
        raise InvalidInputError(MSG_NOT_TRACE.format(path=path, detail=f"invalid JSON: {exc}")) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InvalidInputError(MSG_NOT_TRACE.format(path=path, detail="no traceEvents list"))
    return doc


def read_rank_trace(path) -> RankTrace:
    """Read one rank's chrome trace (``.json`` or ``.json.gz``).

    Raises
    ------
    InvalidInputError
        Not JSON, no ``traceEvents``, or no ``distributedInfo.rank``.
    """
    import numpy as np
    import pandas as pd

    doc = _load_json(path)
    info = doc.get("distributedInfo") or {}
    rank = info.get("rank") if isinstance(info, dict) else None
    if not isinstance(rank, int) or rank < 0:
        raise InvalidInputError(MSG_NO_RANK.format(path=path))
    names, cats, ts, dur, tids, streams, corr = [], [], [], [], [], [], []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            t, d = float(e["ts"]), float(e.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        names.append(str(e.get("name", "")))
        cats.append(str(e.get("cat", "")))
        ts.append(t)
        dur.append(d)
        tids.append(str(e.get("tid", "")))
        s = args.get("stream")
        streams.append(int(s) if isinstance(s, (int, float)) else -1)
        c = args.get("correlation")
        corr.append(int(c) if isinstance(c, (int, float)) else -1)
    ev = pd.DataFrame({"name": names, "cat": cats, "ts_us": np.array(ts, float),
                       "dur_us": np.array(dur, float), "tid": tids,
                       "stream": np.array(streams, np.int64), "correlation": np.array(corr, np.int64)})
    ev["end_us"] = ev["ts_us"] + ev["dur_us"]
    device = ev["cat"].isin(_DEVICE_CATS)
    device_trace = bool(device.any())
    kind = np.full(len(ev), OTHER, dtype=object)
    step = ev["name"].str.match(_STEP.pattern) & ~device
    comm = ev["name"].map(is_comm_name).astype(bool)
    mem = ev["name"].map(is_memory_name).astype(bool)
    if device_trace:
        kind[(device & comm).to_numpy()] = COMM
        kind[(device & mem & ~comm).to_numpy()] = MEMORY
        kind[(device & ~comm & ~mem).to_numpy()] = COMPUTE
    else:
        comm_ops = comm & ~step
        kind[comm_ops.to_numpy()] = COMM
        comm_threads = set(ev.loc[comm_ops, "tid"])
        launch = ev["name"].str.startswith(("c10d::", "record_param_comms"))
        cpu = (ev["cat"] == "cpu_op") & ~ev["tid"].isin(comm_threads) & ~launch & ~comm
        kind[cpu.to_numpy()] = COMPUTE
        ev.loc[comm_ops, "stream"] = 0  # gloo queues collectives in order on worker threads
    kind[step.to_numpy()] = STEP
    ev["kind"] = kind
    ev["iteration"] = _assign_iterations(ev, step)
    ev = ev.drop(columns=["correlation"])
    return RankTrace(rank=rank, world_size=info.get("world_size"), backend=info.get("backend"),
                     path=str(path), device_trace=device_trace, events=ev)


def _assign_iterations(ev, step_mask):
    """The ProfilerStep each event starts in; a kernel counts from its launch."""
    import numpy as np

    it = np.full(len(ev), -1, dtype=np.int64)
    steps = ev[step_mask]
    if steps.empty:
        return it
    nums = steps["name"].str.extract(_STEP.pattern)[0].astype(np.int64).to_numpy()
    order = np.argsort(steps["ts_us"].to_numpy())
    starts = steps["ts_us"].to_numpy()[order]
    ends = steps["end_us"].to_numpy()[order]
    nums = nums[order]
    when = ev["ts_us"].to_numpy().copy()
    # Kernels: use the CPU launch's time (same correlation id) when the trace has it.
    launches = ev[ev["cat"].isin(_LAUNCH_CATS) & (ev["correlation"] >= 0)]
    if not launches.empty:
        launch_ts = dict(zip(launches["correlation"], launches["ts_us"]))
        dev = ev["cat"].isin(_DEVICE_CATS).to_numpy()
        corr = ev["correlation"].to_numpy()
        for i in np.nonzero(dev & (corr >= 0))[0]:
            t = launch_ts.get(corr[i])
            if t is not None:
                when[i] = t
    idx = np.searchsorted(starts, when, side="right") - 1
    ok = (idx >= 0) & (when < ends[np.clip(idx, 0, None)])
    it[ok] = nums[idx[ok]]
    return it


def find_rank_traces(run) -> list:
    """The run's per-rank trace files, sorted.

    The ``traces/`` folder's ``*.json`` / ``*.json.gz`` when it has any; else the
    chrome traces ``debugkit import torch-trace`` filed under ``profiles/`` that carry a
    ``distributedInfo`` rank (manifest entries with ``rank``, or, for entries imported
    before that field, the ``torch.profiler (distributed)`` tool), one per rank (the
    newest import of a rank wins).
    """
    d = run.path / fmt.TRACES_DIR
    try:
        if d.is_dir():
            found = []
            for p in sorted(d.iterdir(), key=lambda p: p.name):
                if not p.name.endswith((".json", ".json.gz")):
                    continue
                try:
                    found.append(in_run(run.path, fmt.TRACES_DIR, p.name, what="trace file"))
                except OutsideRunError as exc:  # a link out of the run is never read
                    run.warnings.append(str(exc))
            if found:
                return found
    except OSError:
        pass
    return _imported_rank_traces(run)


def _imported_rank_traces(run) -> list:
    from .run_profiles import list_profiles

    by_rank: dict = {}
    unranked = []
    try:
        entries = list_profiles(run)
    except (OSError, ValueError):
        return []
    for e in entries:
        if e.get("format") != "chrome-trace":
            continue
        rank = e.get("rank")
        if isinstance(rank, int) and not isinstance(rank, bool):
            by_rank[rank] = e  # oldest first: a later import of the same rank replaces it
        elif e.get("tool") == "torch.profiler (distributed)":
            unranked.append(e)
    return [in_run(run.path, e["file"], what="trace file")
            for e in [by_rank[r] for r in sorted(by_rank)] + unranked]


def read_rank_traces(paths) -> dict[int, RankTrace]:
    """Read one trace per rank; ``{rank: RankTrace}`` in rank order.

    Raises
    ------
    InvalidInputError
        A file is not a trace, lacks its rank, or two files claim the same rank.
    """
    out: dict[int, RankTrace] = {}
    for p in paths:
        t = read_rank_trace(p)
        if t.rank in out:
            raise InvalidInputError(MSG_DUP_RANK.format(path=p, rank=t.rank, other=out[t.rank].path))
        out[t.rank] = t
    return dict(sorted(out.items()))


def stack_events(traces: dict[int, RankTrace]):
    """All ranks' events in one DataFrame with a ``rank`` column."""
    import pandas as pd

    parts = []
    for r, t in traces.items():
        df = t.events.copy()
        df.insert(0, "rank", r)
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=["rank", "name", "cat", "ts_us", "dur_us", "tid", "stream",
                                     "end_us", "kind", "iteration"])
    return pd.concat(parts, ignore_index=True)
