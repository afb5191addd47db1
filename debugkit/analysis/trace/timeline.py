"""A per-thread / per-stream timeline of a trace, its lanes named, capped in events and depth.
"""

from __future__ import annotations

import numpy as np

from ...io.chrome_trace import GPU_CATS
from .events import _x
from .gpu_idle import trace_window
from .operators import compute_nesting


def lane_names(trace):
    """``{(pid, tid): label}`` for every lane with events: thread names for CPU lanes,
    ``GPU d · stream s`` for device lanes."""
    x = _x(trace)
    out = {}
    gpu = x["cat"].isin(list(GPU_CATS))
    for (pid, tid), g in x.groupby(["pid", "tid"], observed=True, sort=False):
        pid, tid = str(pid), str(tid)
        if gpu[g.index].any():
            digits = "".join(ch for ch in tid if ch.isdigit())
            out[(pid, tid)] = f"GPU {pid} · stream {digits or tid}"
        else:
            name = trace.threads.get((pid, tid))
            pname = trace.processes.get(pid)
            out[(pid, tid)] = name or (f"{pname} · {tid}" if pname else f"{pid} · {tid}")
    return out


def compute_trace_timeline(trace, max_events: int = 3000, max_depth: int = 2,
                           start_us: float | None = None, end_us: float | None = None):
    """Events to draw on a per-thread/stream timeline, at most ``max_events`` of them
    (the longest), CPU events down to ``max_depth`` levels of nesting.

    Returns
    -------
    DataFrame with columns ``lane`` (label), ``lane_kind`` (``cpu`` or ``gpu``),
    ``name``, ``cat``, ``start_ms`` (from the trace window's start), ``dur_ms``,
    ``depth`` (0 for device events), ``input_shapes``; sorted by lane then start.
    """
    import pandas as pd

    ev = trace.events
    idx, _, depth = compute_nesting(trace)
    x = ev.loc[idx]
    gpu = x["cat"].isin(list(GPU_CATS)).to_numpy()
    w0, _ = trace_window(trace)
    keep = gpu | ((depth >= 0) & (depth <= max_depth))
    keep &= ~x["cat"].isin(["Trace"]).to_numpy()
    ts = x["ts_us"].to_numpy()
    te = ts + x["dur_us"].to_numpy()
    if start_us is not None:
        keep &= te >= start_us
    if end_us is not None:
        keep &= ts <= end_us
    sel = np.flatnonzero(keep)
    if len(sel) > max_events:
        d = x["dur_us"].to_numpy()[sel]
        sel = np.sort(sel[np.argsort(-d, kind="stable")[:max_events]])
    names = lane_names(trace)
    xs = x.iloc[sel]
    lanes = [names.get((str(p), str(t)), f"{p} · {t}") for p, t in zip(xs["pid"].tolist(), xs["tid"].tolist())]
    df = pd.DataFrame({
        "lane": lanes,
        "lane_kind": np.where(gpu[sel], "gpu", "cpu"),
        "name": xs["name"].astype(str).to_numpy(),
        "cat": xs["cat"].astype(str).to_numpy(),
        "start_ms": (ts[sel] - w0) / 1e3,
        "dur_ms": x["dur_us"].to_numpy()[sel] / 1e3,
        "depth": np.where(gpu[sel], 0, depth[sel]),
        "input_shapes": xs["input_dims"].astype(str).to_numpy(),
    })
    return df.sort_values(["lane_kind", "lane", "start_ms"], kind="stable").reset_index(drop=True)
