"""Operators and kernels of a chrome trace: each CPU event's parent and depth, self and
total times per operator (torch's ``key_averages()`` conventions), kernels per device
and stream.
"""

from __future__ import annotations

import numpy as np

from ...io.chrome_trace import GPU_CATS, GPU_KERNEL_CATS, GPU_MEMORY_CATS
from .events import CPU_OP, OPERATOR_CATS, RUNTIME_CATS, _x


def compute_nesting(trace):
    """Parent (innermost enclosing event on the same thread) and depth of every CPU-side
    duration event; device events (kernels, copies) get parent -1 and depth -1.

    Returns
    -------
    (index, parent, depth) : ndarrays
        ``index`` are row labels of ``trace.events``; ``parent`` holds a row label or -1.
    """
    x = _x(trace)
    idx = x.index.to_numpy()
    n = len(x)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return idx, parent, depth
    cpu = ~x["cat"].isin(list(GPU_CATS)).to_numpy()
    lane = (x["pid"].astype(str) + "\x1f" + x["tid"].astype(str)).to_numpy()
    ts = x["ts_us"].to_numpy()
    end = ts + x["dur_us"].to_numpy()
    order = np.lexsort((-x["dur_us"].to_numpy(), ts, lane))
    order = order[cpu[order]]
    lane_o, ts_o, end_o = lane[order].tolist(), ts[order].tolist(), end[order].tolist()
    stack: list[int] = []
    cur_lane = None
    eps = 1e-3  # microsecond rounding in the file
    for k, i in enumerate(order.tolist()):
        if lane_o[k] != cur_lane:
            cur_lane = lane_o[k]
            stack = []
        t, e = ts_o[k], end_o[k]
        while stack and end[stack[-1]] <= t + eps:
            stack.pop()
        while stack and e > end[stack[-1]] + eps:
            stack.pop()  # overlaps without nesting: not a child
        if stack:
            parent[i] = stack[-1]
        depth[i] = len(stack)
        stack.append(i)
    pos_parent = np.where(parent >= 0, idx[np.maximum(parent, 0)], -1)
    return idx, pos_parent, depth


def _self_times(trace, idx, parent):
    """Self duration (us) per duration event, aligned with ``idx``."""
    dur = trace.events["dur_us"].to_numpy()[idx]
    child = np.zeros(len(idx))
    has = parent >= 0
    if has.any():
        ppos = np.searchsorted(idx, parent[has])  # idx is sorted (row labels in file order)
        np.add.at(child, ppos, dur[has])
    return np.maximum(dur - child, 0.0)


def _parent_of_rows(trace, idx, parent) -> np.ndarray:
    """Parent row label of every row of ``trace.events`` (-1: none)."""
    out = np.full(len(trace.events), -1, dtype=np.int64)
    out[idx] = parent
    return out


def _kernel_launchers(trace, idx, parent):
    """For each device event: the row of the innermost ``cpu_op`` that launched it (-1
    when unknown). Returns (device rows, launcher rows)."""
    ev = trace.events
    cat = ev["cat"].to_numpy()[idx].astype(str) if len(idx) else np.zeros(0, dtype=str)
    corr = ev["correlation"].to_numpy()[idx]
    dev = np.isin(cat, list(GPU_KERNEL_CATS | GPU_MEMORY_CATS))
    dev_rows = idx[dev]
    launch = np.full(len(dev_rows), -1, dtype=np.int64)
    if not len(dev_rows):
        return dev_rows, launch
    rt = np.isin(cat, list(RUNTIME_CATS)) & (corr >= 0)
    rt_corr, rt_rows = corr[rt], idx[rt]
    order = np.argsort(rt_corr, kind="stable")
    rt_corr, rt_rows = rt_corr[order], rt_rows[order]
    kcorr = corr[dev]
    pos = np.searchsorted(rt_corr, kcorr)
    pos = np.minimum(pos, max(len(rt_corr) - 1, 0))
    found = (len(rt_corr) > 0) & (rt_corr[pos] == kcorr) if len(rt_corr) else np.zeros(len(kcorr), bool)
    cur = np.where(found, rt_rows[pos] if len(rt_rows) else -1, -1)
    # Walk up from the runtime call to the innermost enclosing cpu_op.
    is_op = (ev["cat"] == CPU_OP).to_numpy()
    up = _parent_of_rows(trace, idx, parent)
    for _ in range(256):
        todo = (cur >= 0) & ~is_op[np.maximum(cur, 0)]
        if not todo.any():
            break
        cur = np.where(todo, up[np.maximum(cur, 0)], cur)
    launch[:] = np.where((cur >= 0) & is_op[np.maximum(cur, 0)], cur, -1)
    return dev_rows, launch


def compute_operator_table(trace, by_shapes: bool = False):
    """torch.profiler's operator table (``key_averages()``), from the trace: operators
    (``cpu_op``) and ``record_function`` annotations (``user_annotation``).

    Returns
    -------
    DataFrame with columns ``name``, ``input_shapes`` (only with ``by_shapes``: the
    recorded ``Input Dims``), ``calls``, ``self_cpu_ms``, ``cpu_total_ms``,
    ``self_cuda_ms``, ``cuda_total_ms`` (0 without device events), ``mean_cpu_us``
    (total / calls) and ``self_cpu_fraction`` (of all operators' self CPU time), sorted
    by self CPU time.
    """
    import pandas as pd

    ev = trace.events
    idx, parent, _ = compute_nesting(trace)
    self_us = _self_times(trace, idx, parent)
    dev_rows, launch = _kernel_launchers(trace, idx, parent)
    n_rows = len(ev)
    self_cuda = np.zeros(n_rows)
    total_cuda = np.zeros(n_rows)
    if len(dev_rows):
        kdur = ev["dur_us"].to_numpy()[dev_rows]
        ok = launch >= 0
        np.add.at(self_cuda, launch[ok], kdur[ok])
        is_opcat = ev["cat"].isin(list(OPERATOR_CATS)).to_numpy()
        up = _parent_of_rows(trace, idx, parent)
        cur, d = launch[ok], kdur[ok]
        for _ in range(256):  # the launcher and every operator above it
            if not len(cur):
                break
            hit = is_opcat[cur]
            np.add.at(total_cuda, cur[hit], d[hit])
            cur = up[cur]
            keep = cur >= 0
            cur, d = cur[keep], d[keep]
    x = ev.loc[idx]
    ops = x["cat"].isin(list(OPERATOR_CATS)).to_numpy()
    keys = ["name", "input_dims"] if by_shapes else ["name"]
    df = pd.DataFrame({
        "name": x["name"].astype(str).to_numpy()[ops],
        "input_dims": x["input_dims"].astype(str).to_numpy()[ops],
        "self_us": self_us[ops],
        "dur_us": x["dur_us"].to_numpy()[ops],
        "self_cuda_us": self_cuda[idx[ops]],
        "cuda_total_us": total_cuda[idx[ops]],
    })
    if not len(df):
        cols = ["name"] + (["input_shapes"] if by_shapes else []) + [
            "calls", "self_cpu_ms", "cpu_total_ms", "self_cuda_ms", "cuda_total_ms",
            "mean_cpu_us", "self_cpu_fraction"]
        return pd.DataFrame({c: [] for c in cols})
    g = df.groupby(keys, sort=False, observed=True).agg(
        calls=("dur_us", "size"), self_us=("self_us", "sum"), dur_us=("dur_us", "sum"),
        self_cuda_us=("self_cuda_us", "sum"), cuda_total_us=("cuda_total_us", "sum")).reset_index()
    total_self = float(g["self_us"].sum()) or 1.0
    out = pd.DataFrame({"name": g["name"]})
    if by_shapes:
        out["input_shapes"] = g["input_dims"]
    out["calls"] = g["calls"].astype(np.int64)
    out["self_cpu_ms"] = g["self_us"] / 1e3
    out["cpu_total_ms"] = g["dur_us"] / 1e3
    out["self_cuda_ms"] = g["self_cuda_us"] / 1e3
    out["cuda_total_ms"] = g["cuda_total_us"] / 1e3
    out["mean_cpu_us"] = g["dur_us"] / g["calls"]
    out["self_cpu_fraction"] = g["self_us"] / total_self
    return out.sort_values(["self_cpu_ms", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def compute_kernel_table(trace):
    """GPU kernels (and memory copies/sets) grouped by name.

    Returns
    -------
    DataFrame with columns ``name``, ``kind`` (``kernel`` or ``memory``), ``calls``,
    ``total_ms``, ``mean_us``, ``max_us``, ``gpu_fraction`` (of all device time),
    ``streams`` (e.g. ``"0:7, 0:13"`` as device:stream) and ``launched_by`` (the operator
    that launched most of them), sorted by total time. Empty without device events.
    """
    import pandas as pd

    ev = trace.events
    idx, parent, _ = compute_nesting(trace)
    dev_rows, launch = _kernel_launchers(trace, idx, parent)
    cols = ["name", "kind", "calls", "total_ms", "mean_us", "max_us", "gpu_fraction", "streams", "launched_by"]
    if not len(dev_rows):
        return pd.DataFrame({c: [] for c in cols})
    k = ev.loc[dev_rows]
    names = ev["name"].astype(str).to_numpy()
    df = pd.DataFrame({
        "name": k["name"].astype(str).to_numpy(),
        "kind": np.where(k["cat"].isin(list(GPU_KERNEL_CATS)).to_numpy(), "kernel", "memory"),
        "dur_us": k["dur_us"].to_numpy(),
        "stream": [f"{d}:{s}" for d, s in zip(_device_of(k).tolist(), _stream_of(k).tolist())],
        "launcher": [names[r] if r >= 0 else "" for r in launch.tolist()],
    })
    total = float(df["dur_us"].sum()) or 1.0

    def top(s):
        s = s[s != ""]
        return s.value_counts().index[0] if len(s) else ""

    g = df.groupby(["name", "kind"], sort=False).agg(
        calls=("dur_us", "size"), total_us=("dur_us", "sum"), mean_us=("dur_us", "mean"),
        max_us=("dur_us", "max"), streams=("stream", lambda s: ", ".join(sorted(set(s)))),
        launched_by=("launcher", top)).reset_index()
    g["total_ms"] = g["total_us"] / 1e3
    g["gpu_fraction"] = g["total_us"] / total
    g["calls"] = g["calls"].astype(np.int64)
    return g[cols].sort_values(["total_ms", "name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _device_of(k):
    dev = k["device"].to_numpy()
    pid = k["pid"].astype(str).to_numpy()
    return np.array([d if d >= 0 else (int(p) if p.isdigit() else -1) for d, p in zip(dev.tolist(), pid.tolist())])


def _stream_of(k):
    st = k["stream"].to_numpy()
    tid = k["tid"].astype(str).to_numpy()
    out = []
    for s, t in zip(st.tolist(), tid.tolist()):
        if s >= 0:
            out.append(s)
        else:
            digits = "".join(ch for ch in t if ch.isdigit())
            out.append(int(digits) if digits else -1)
    return np.array(out, dtype=np.int64)
