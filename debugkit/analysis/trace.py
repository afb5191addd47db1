"""Analyses of torch.profiler chrome traces: the operator table, kernels, GPU idle time,
a per-thread/stream timeline and the step breakdown.

Pure functions of a :class:`~debugkit.io.chrome_trace.ChromeTrace`. Times in the trace
are microseconds; tables report milliseconds (``_ms``) or microseconds (``_us``) as
their column names say.

Conventions follow torch.profiler's ``key_averages()``: an operator's *self* CPU time
is its duration minus that of the events directly nested in it on the same thread; its
*self* CUDA time is the device time of the kernels it launched itself (a kernel's
``correlation`` id names the ``cudaLaunchKernel`` runtime call, whose innermost enclosing
``cpu_op`` launched it), and its total CUDA time adds the kernels of the operators
nested in it.
"""

from __future__ import annotations

import numpy as np

from ..io.chrome_trace import GPU_CATS, GPU_KERNEL_CATS, GPU_MEMORY_CATS

CPU_OP = "cpu_op"
# What torch's key_averages() lists: operators and record_function annotations.
OPERATOR_CATS = ("cpu_op", "user_annotation")
STEP_PREFIX = "ProfilerStep#"
# Step phases from torch.profiler's own annotations and autograd's event names.
DATA_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})


def _x(trace):
    ev = trace.events
    return ev[ev["ph"] == "X"]


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


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of intervals."""
    if not len(starts):
        return 0.0
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    seg = np.flatnonzero(new)
    seg_end = np.append(seg[1:], len(s)) - 1
    return float((run_end[seg_end] - s[seg]).sum())


def _union_intervals(starts, ends):
    """The union as sorted disjoint (start, end) arrays."""
    if not len(starts):
        return np.zeros(0), np.zeros(0)
    o = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[o], np.asarray(ends)[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    seg = np.flatnonzero(new)
    seg_end = np.append(seg[1:], len(s)) - 1
    return s[seg], run_end[seg_end]


def _subtract(a_s, a_e, b_s, b_e):
    """Length of union(a) minus union(b), both disjoint sorted interval sets."""
    total = float((a_e - a_s).sum())
    if not len(b_s) or not len(a_s):
        return total
    overlap = 0.0
    j = 0
    for s, e in zip(a_s.tolist(), a_e.tolist()):
        while j < len(b_s) and b_e[j] <= s:
            j += 1
        k = j
        while k < len(b_s) and b_s[k] < e:
            overlap += min(e, b_e[k]) - max(s, b_s[k])
            k += 1
    return total - overlap


def trace_window(trace) -> tuple[float, float]:
    """(start, end) in us: the span of the ``ProfilerStep#`` annotations, else of every
    duration event."""
    x = _x(trace)
    steps = x[x["name"].astype(str).str.startswith(STEP_PREFIX)]
    src = steps if len(steps) else x
    if not len(src):
        return 0.0, 0.0
    return float(src["ts_us"].min()), float((src["ts_us"] + src["dur_us"]).max())


# HTA's temporal breakdown (hta/analyzers/breakdown_analysis.py, get_temporal_breakdown):
# per rank, idle = (last device event's end - first one's start) - union of device events.
GPU_IDLE_DEFINITION = "hta"
GPU_IDLE_NOTE = ("HTA's definition: idle share of the span from the first to the last GPU event "
                 "(kernels, copies, syncs on a stream){last}")
GPU_IDLE_LAST_DROPPED = "; events launched in the last ProfilerStep are left out (HTA's default)"
GPU_IDLE_LAST_KEPT = "; the last ProfilerStep is included"
GPU_IDLE_FEW_STEPS = ("fewer than two ProfilerStep annotations: every GPU event counts (HTA skips its "
                      "last-step filter too, and warns that the result may not be accurate)")
_STEP_NAME = r"ProfilerStep\s*#\s*\d+"
_SYNC_NAMES = ("Event Sync", "Context Sync")


def _hta_device_events(x, include_last_step: bool):
    """Mask over ``x`` (duration events) of the device events HTA's temporal breakdown
    counts, and whether the last-step filter applied.

    Device events are those on a stream (``args.stream`` >= 0). With two or more distinct
    ``ProfilerStep#N`` names, HTA keeps only the device events whose correlation id is
    that of a host event starting before the last step's start (``include_last_step``:
    before its end) - ``Trace._filter_irrelevant_gpu_kernels``."""
    stream = x["stream"].to_numpy()
    corr = x["correlation"].to_numpy()
    names = x["name"].astype(str)
    dev = stream >= 0
    steps = names.str.fullmatch(_STEP_NAME).to_numpy()
    if len(set(names[steps])) < 2:
        return dev, False
    sync = names.isin(list(_SYNC_NAMES)).to_numpy()
    on_gpu = ((stream >= 0) & (corr >= 0)) | sync
    ts = x["ts_us"].to_numpy()
    st_ts = ts[steps]
    st_end = st_ts + x["dur_us"].to_numpy()[steps]
    host = ~on_gpu & ((ts <= st_end.max()) if include_last_step else (ts < st_ts.max()))
    keep_corr = np.unique(corr[host & (corr >= 0)])
    return on_gpu & np.isin(corr, keep_corr), True


def compute_gpu_idle(trace, include_last_step: bool = False):
    """Share of the time each GPU ran nothing, as Holistic Trace Analysis computes it.

    HTA's temporal breakdown: over the span from the start of the first to the end of
    the last device event (kernels, memory copies/sets and stream syncs: events with a
    stream), the time no device event ran. By default the last ``ProfilerStep`` is left
    out as HTA does (device events launched by host events that start in it or later
    are dropped; ``include_last_step=True`` keeps events launched before its end); with
    fewer than two ``ProfilerStep`` annotations every device event counts (HTA's
    behaviour too). Each trace file is one rank in HTA; here each device of the trace
    gets a row (the same thing for one-GPU-per-rank traces).

    Returns
    -------
    DataFrame with columns ``device``, ``window_ms`` (the first-to-last device event
    span), ``busy_ms`` (device events running), ``kernel_ms`` (kernels only), ``idle_ms``,
    ``idle_fraction`` (``idle_ms / window_ms``; HTA's ``idle_time_pctg`` / 100),
    ``events`` (device events counted) and ``last_step_dropped`` (bool: the last-step
    filter applied); one row per device. Empty without device events.
    """
    import pandas as pd

    x = _x(trace)
    cols = ["device", "window_ms", "busy_ms", "kernel_ms", "idle_ms", "idle_fraction", "events",
            "last_step_dropped"]
    keep, filtered = _hta_device_events(x, include_last_step)
    dropped = filtered and not include_last_step
    dev = x[keep]
    if not len(dev):
        return pd.DataFrame({c: [] for c in cols})
    d = _device_of(dev)
    rows = []
    ts = dev["ts_us"].to_numpy()
    te = ts + dev["dur_us"].to_numpy()
    is_k = dev["cat"].isin(list(GPU_KERNEL_CATS)).to_numpy()
    for device in sorted(set(d.tolist())):
        m = d == device
        s, e = ts[m], te[m]
        span = max(float(e.max() - s.min()), 1e-9)
        busy = _union_length(s, e)
        kern = _union_length(s[is_k[m]], e[is_k[m]])
        rows.append({"device": int(device), "window_ms": span / 1e3, "busy_ms": busy / 1e3,
                     "kernel_ms": kern / 1e3, "idle_ms": (span - busy) / 1e3,
                     "idle_fraction": (span - busy) / span, "events": int(m.sum()),
                     "last_step_dropped": bool(dropped)})
    out = pd.DataFrame(rows, columns=cols)
    out.attrs["step_filter"] = bool(filtered)
    return out


def describe_gpu_idle(gpu) -> str:
    """Which variant of HTA's idle share ``gpu`` (from :func:`compute_gpu_idle`) is."""
    if not len(gpu):
        return ""
    if bool(gpu["last_step_dropped"].all()):
        return GPU_IDLE_NOTE.format(last=GPU_IDLE_LAST_DROPPED)
    if gpu.attrs.get("step_filter"):
        return GPU_IDLE_NOTE.format(last=GPU_IDLE_LAST_KEPT)
    return GPU_IDLE_NOTE.format(last="") + "; " + GPU_IDLE_FEW_STEPS


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


def compute_trace_steps(trace):
    """Each ``ProfilerStep#N`` split into data loading, forward, backward, optimizer and
    other, by wall time.

    Within a step's window: ``data`` is time in ``enumerate(DataLoader)#...``;
    ``optimizer`` in ``Optimizer.step#...`` / ``Optimizer.zero_grad#...``; ``backward`` in
    ``autograd::engine::evaluate_function: ...`` (any thread); ``forward`` the other
    operators on the step's thread; ``other`` the rest (Python between operators, waiting).
    Each instant counts once, in that order of precedence.

    Returns
    -------
    DataFrame with columns ``step`` (int), ``start_ms`` (from the window start),
    ``dur_ms``, ``data_ms``, ``forward_ms``, ``backward_ms``, ``optimizer_ms``,
    ``other_ms``. Empty when the trace has no ``ProfilerStep#`` annotations (record with
    ``schedule=`` and call ``prof.step()``).
    """
    import pandas as pd

    x = _x(trace)
    names = x["name"].astype(str)
    cols = ["step", "start_ms", "dur_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"]
    steps = x[names.str.startswith(STEP_PREFIX)]
    if not len(steps):
        return pd.DataFrame({c: [] for c in cols})
    w0, _ = trace_window(trace)
    ts = x["ts_us"].to_numpy()
    te = ts + x["dur_us"].to_numpy()
    lane = (x["pid"].astype(str) + "\x1f" + x["tid"].astype(str)).to_numpy()
    is_data = names.str.startswith(DATA_PREFIX).to_numpy()
    is_opt = names.str.startswith(OPTIMIZER_PREFIXES).to_numpy()
    is_bwd = names.str.startswith(BACKWARD_PREFIX).to_numpy()
    is_op = (x["cat"] == CPU_OP).to_numpy()
    rows = []
    for r in steps.itertuples():
        s0, s1 = r.ts_us, r.ts_us + r.dur_us
        step_lane = f"{r.pid}\x1f{r.tid}"
        inside = (te > s0) & (ts < s1)
        done_s, done_e = np.zeros(0), np.zeros(0)
        got = {}
        for phase, mask in (("data", is_data & (lane == step_lane)), ("optimizer", is_opt),
                            ("backward", is_bwd), ("forward", is_op & (lane == step_lane))):
            m = inside & mask
            a_s, a_e = _union_intervals(np.clip(ts[m], s0, s1), np.clip(te[m], s0, s1))
            got[phase] = _subtract(a_s, a_e, done_s, done_e)
            done_s, done_e = _union_intervals(np.concatenate([done_s, a_s]), np.concatenate([done_e, a_e]))
        total = s1 - s0
        try:
            step_no = int(r.name.split("#", 1)[1])
        except (IndexError, ValueError):
            step_no = len(rows)
        rows.append({"step": step_no, "start_ms": (s0 - w0) / 1e3, "dur_ms": total / 1e3,
                     "data_ms": got["data"] / 1e3, "forward_ms": got["forward"] / 1e3,
                     "backward_ms": got["backward"] / 1e3, "optimizer_ms": got["optimizer"] / 1e3,
                     "other_ms": max(total - sum(got.values()), 0.0) / 1e3})
    return pd.DataFrame(rows, columns=cols).sort_values("step", kind="stable").reset_index(drop=True)


ANNOTATION_MIN_COVER = 0.5   # annotations must cover half a step to be its phases
ANNOTATION_SURE_COVER = 0.8  # under this, the output says much of the step is unannotated
MSG_ANNOTATION_GAPS = ("your annotations cover {cover:.0%} of the steps; the rest is 'other' "
                       "(time between them)")
MSG_ONE_STEP = "one step only: a single step may not be typical"


def _phase_name(name: str) -> str:
    """A ``record_function`` label as a phase: torch's own DataLoader/optimizer labels map
    to ``data``/``optimizer``; TorchRec's ``## forward ##`` to ``forward``."""
    if name.startswith(DATA_PREFIX):
        return "data"
    if name.startswith(OPTIMIZER_PREFIXES):
        return "optimizer"
    return name.strip().strip("#").strip() or name


def compute_annotated_steps(trace):
    """Each ``ProfilerStep#N`` split by the user's own ``record_function`` annotations.

    A step's phases are the annotations directly inside it on its thread
    (``user_annotation`` events, and ``cpu_op`` events named TorchRec-style
    ``## name ##``), named without the ``##`` (``## sparse_data_dist ##`` ->
    ``sparse_data_dist``; torch's ``enumerate(DataLoader)#...`` -> ``data``,
    ``Optimizer.step#...`` -> ``optimizer``); time in none of them is ``other``. Used
    only when, over all steps, the user's annotations (not torch's) cover at least
    :data:`ANNOTATION_MIN_COVER` of the steps' time and name two phases or more;
    otherwise the result is empty and :func:`compute_trace_steps`' built-in split applies.

    Returns
    -------
    DataFrame with columns ``step`` (int), ``phase``, ``ms``, ``fraction`` (of the step),
    in time order within each step (``other`` last). ``attrs["cover"]`` is the share of
    the steps' time the annotations cover.
    """
    import pandas as pd

    cols = ["step", "phase", "ms", "fraction"]
    empty = pd.DataFrame({c: [] for c in cols})
    empty.attrs["cover"] = 0.0
    x = _x(trace)
    names = x["name"].astype(str)
    step_rows = x.index[names.str.startswith(STEP_PREFIX).to_numpy()]
    if not len(step_rows):
        return empty
    idx, parent, _ = compute_nesting(trace)
    ev = trace.events
    par = _parent_of_rows(trace, idx, parent)
    cat = ev["cat"].astype(str).to_numpy()
    nm = ev["name"].astype(str).to_numpy()
    ts = ev["ts_us"].to_numpy()
    dur = ev["dur_us"].to_numpy()
    is_ann = (cat == "user_annotation") | ((cat == CPU_OP) & np.char.startswith(nm.astype(str), "##"))
    steps = set(step_rows.tolist())
    child = np.flatnonzero(is_ann & np.isin(par, list(steps)))
    child = child[~np.char.startswith(nm[child].astype(str), STEP_PREFIX)]
    rows, user_names, total, covered = [], set(), 0.0, 0.0
    for srow in sorted(steps, key=lambda r: ts[r]):
        s0, s1 = ts[srow], ts[srow] + dur[srow]
        mine = child[par[child] == srow]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        phases: dict[str, list] = {}
        for r in mine.tolist():
            ph = _phase_name(nm[r])
            phases.setdefault(ph, [[], []])
            phases[ph][0].append(max(ts[r], s0))
            phases[ph][1].append(min(ts[r] + dur[r], s1))
            if ph not in ("data", "optimizer") or not nm[r].startswith((DATA_PREFIX,) + OPTIMIZER_PREFIXES):
                user_names.add(ph)
        done_s, done_e = np.zeros(0), np.zeros(0)
        try:
            step_no = int(nm[srow].split("#", 1)[1])
        except (IndexError, ValueError):
            step_no = len({r["step"] for r in rows})
        span = max(s1 - s0, 1e-9)
        for ph, (a, b) in phases.items():
            a_s, a_e = _union_intervals(np.array(a), np.array(b))
            got = _subtract(a_s, a_e, done_s, done_e)
            done_s, done_e = _union_intervals(np.concatenate([done_s, a_s]), np.concatenate([done_e, a_e]))
            rows.append({"step": step_no, "phase": ph, "ms": got / 1e3, "fraction": got / span})
        inside = float((done_e - done_s).sum())
        rows.append({"step": step_no, "phase": "other", "ms": max(span - inside, 0.0) / 1e3,
                     "fraction": max(span - inside, 0.0) / span})
        total += span
        covered += inside
    cover = covered / total if total else 0.0
    if len(user_names) < 2 or cover < ANNOTATION_MIN_COVER:
        empty.attrs["cover"] = cover
        return empty
    out = pd.DataFrame(rows, columns=cols)
    out["step"] = out["step"].astype(np.int64)
    out.attrs["cover"] = cover
    return out


def summarize_step_phases(trace) -> dict:
    """Where the steps' time goes, for ``profile-summary``: the user's annotations when the
    trace has them (``source: "annotations"``), else the built-in split of
    :func:`compute_trace_steps` (``source: "built-in"``); ``phases`` maps each phase to its
    total ``ms`` and ``fraction`` of all steps, ``note`` says what to keep in mind."""
    ann = compute_annotated_steps(trace)
    if len(ann):
        g = ann.groupby("phase", sort=False)["ms"].sum()
        tot = float(g.sum()) or 1.0
        cover = float(ann.attrs["cover"])
        n_steps = int(ann["step"].nunique())
        notes = [MSG_ANNOTATION_GAPS.format(cover=cover)] if cover < ANNOTATION_SURE_COVER else []
        if n_steps < 2:
            notes.append(MSG_ONE_STEP)
        note = "; ".join(notes) or None
        return {"source": "annotations", "steps": n_steps,
                "phases": {k: {"ms": round(float(v), 3), "fraction": round(float(v) / tot, 6)} for k, v in g.items()},
                "annotation_cover": round(cover, 6), "note": note}
    st = compute_trace_steps(trace)
    if not len(st):
        return {"source": None, "steps": 0, "phases": {}, "annotation_cover": None,
                "note": "no ProfilerStep# annotations"}
    tot = float(st["dur_ms"].sum()) or 1.0
    phases = {k: {"ms": round(float(st[f"{k}_ms"].sum()), 3), "fraction": round(float(st[f"{k}_ms"].sum()) / tot, 6)}
              for k in ("data", "forward", "backward", "optimizer", "other")}
    return {"source": "built-in", "steps": int(len(st)), "phases": phases, "annotation_cover": None,
            "note": "phases guessed from torch's own event names (forward: every other operator "
                    "on the step's thread); annotate yours with record_function to split them"}


def trace_threads(trace) -> list[dict]:
    """Lanes as JSON-able rows: ``pid, tid, name, kind (cpu|gpu), events``."""
    x = _x(trace)
    names = lane_names(trace)
    gpu = x["cat"].isin(list(GPU_CATS))
    out = []
    for (pid, tid), g in x.groupby(["pid", "tid"], observed=True, sort=False):
        out.append({"pid": str(pid), "tid": str(tid), "name": names[(str(pid), str(tid))],
                    "kind": "gpu" if gpu[g.index].any() else "cpu", "events": int(len(g))})
    return sorted(out, key=lambda r: (r["kind"], -r["events"]))


def summarize_trace(trace, top: int = 20, include_last_step: bool = False) -> dict:
    """The ``debugkit profile-summary --json`` document of a chrome trace."""
    ops = compute_operator_table(trace)
    gpu = compute_gpu_idle(trace, include_last_step=include_last_step)
    kernels = compute_kernel_table(trace)
    w0, w1 = trace_window(trace)

    def op_rows(df):
        return [{"name": r.name, "calls": int(r.calls), "self_cpu_us": round(r.self_cpu_ms * 1e3, 3),
                 "cpu_total_us": round(r.cpu_total_ms * 1e3, 3), "self_cuda_us": round(r.self_cuda_ms * 1e3, 3),
                 "cuda_total_us": round(r.cuda_total_ms * 1e3, 3), "fraction": round(float(r.self_cpu_fraction), 6)}
                for r in df.head(top).itertuples()]

    by_total = ops.sort_values(["cpu_total_ms", "name"], ascending=[False, True], kind="stable") if len(ops) else ops
    return {
        "format": "chrome-trace",
        "events": int(trace.n_events),
        "threads": trace_threads(trace),
        "window_ms": round((w1 - w0) / 1e3, 3),
        "step_phases": summarize_step_phases(trace),
        "top_self": op_rows(ops),
        "top_total": op_rows(by_total),
        "gpu": {"devices": gpu.to_dict("records"),
                "idle_fraction": None if not len(gpu) else round(float(gpu["idle_fraction"].mean()), 6),
                "idle_definition": GPU_IDLE_DEFINITION if len(gpu) else None,
                "idle_note": describe_gpu_idle(gpu) or None,
                "last_step_dropped": bool(len(gpu) and gpu["last_step_dropped"].all()),
                "top_kernels": [{"name": r.name, "calls": int(r.calls), "total_us": round(r.total_ms * 1e3, 3),
                                 "fraction": round(float(r.gpu_fraction), 6)}
                                for r in kernels.head(top).itertuples()]},
    }
