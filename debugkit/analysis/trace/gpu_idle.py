"""GPU idle time: HTA's temporal breakdown (idle share of the span from the first to the
last device event), over the trace's steps.
"""

from __future__ import annotations

import numpy as np

from ...io.chrome_trace import GPU_KERNEL_CATS
from .events import STEP_PREFIX, _x
from .operators import _device_of


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
