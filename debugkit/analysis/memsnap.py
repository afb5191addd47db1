"""Aggregations of a PyTorch memory snapshot: who holds the memory, when.

Everything here takes a :class:`debugkit.io.memsnap.MemorySnapshot` (flat tables) and
returns small DataFrames: a few hundred points per site for the timeline, a few dozen
segments, the top allocations. Work is vectorized over the event arrays, so a
snapshot of millions of events is aggregated in seconds and nothing per-allocation is
ever handed to a chart.

Semantics follow PyTorch's own viewer (pytorch.org/memory_viz):

- an allocation is *active* from its ``alloc`` event until its ``free_completed``
  (memory freed while another stream still uses it stays active until then); when a
  trace has no ``free_completed`` at all, ``free_requested`` ends it;
- allocations alive in the snapshot's blocks but absent from the trace were made before
  recording started (or before the ring buffer's window); they are counted from the
  trace's start, with the stack the block recorded;
- a trace ``free`` of an address never allocated in the trace is such an early
  allocation that ended during the trace; its allocation stack is unknown.

An allocation's *site* is a label made of the top frames of its stack: by default the
first frame of the user's own code (frames under site-packages, the standard library
or torch are skipped), which is the line a person can change.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

PREEXISTING = "(allocated before the trace)"
NO_STACK = "(no stack recorded)"
OTHER = "(other sites)"

LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "\\site-packages\\", "/lib/python3",
                   "<frozen ", "/torch/", "<string>", "<built-in>")
# C++ frames that say nothing about who allocated (PyTorch's own viewer skips them too).
_CPP_NOISE = ("unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
              "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_", "c10::cuda::",
              "CUDACachingAllocator", "at::native::empty", "at::empty", "at::detail::empty")


# ---------------------------------------------------------------------------- sites
def frame_label(frame) -> str:
    """``train.py:34 train_step`` for a ``(filename, line, name)`` frame."""
    filename, line, name = frame
    return f"{os.path.basename(str(filename)) or filename}:{line} {name}"


def _is_python(frame) -> bool:
    return str(frame[0]).endswith(".py")


def _is_library(frame) -> bool:
    return any(m in str(frame[0]) for m in LIBRARY_MARKERS)


def site_label(stack, depth: int = 1, user_code: bool = True) -> str:
    """The allocation site of one stack (innermost frame first).

    Parameters
    ----------
    depth : int
        How many frames make the label (joined by `` < ``, innermost first).
    user_code : bool
        Skip library frames (site-packages, the standard library, torch) when the stack
        has frames of the user's own code.
    """
    if not stack:
        return NO_STACK
    py = [f for f in stack if _is_python(f)]
    chosen = [f for f in py if not _is_library(f)] if user_code else py
    if not chosen:
        chosen = py
    if not chosen:
        chosen = [f for f in stack if not any(n in str(f[2]) or n in str(f[0]) for n in _CPP_NOISE)]
    if not chosen:
        chosen = list(stack)
    return " < ".join(frame_label(f) for f in chosen[: max(1, int(depth))])


def site_labels(stacks, depth: int = 1, user_code: bool = True) -> list[str]:
    """:func:`site_label` of every unique stack (index = ``stack_id``)."""
    return [site_label(s, depth, user_code) for s in stacks]


def format_stack(stack, limit: int = 30) -> str:
    """A stack as text, innermost frame first, one frame a line."""
    if not stack:
        return NO_STACK
    lines = [f"{f[0]}:{f[1]} in {f[2]}" for f in stack[:limit]]
    if len(stack) > limit:
        lines.append(f"... {len(stack) - limit} more frames")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- allocations
def device_events(snap, device: int) -> pd.DataFrame:
    """The trace events of one device, in recorded order."""
    ev = snap.events
    return ev[ev["device"] == device].sort_values("seq", kind="stable").reset_index(drop=True)


def compute_allocations(snap, device: int = 0) -> pd.DataFrame:
    """Every allocation the trace and the final state know of, with its lifetime.

    Returns
    -------
    DataFrame with columns ``addr``, ``size`` (requested bytes), ``stack_id``,
    ``alloc_seq`` (index of its ``alloc`` event; -1: made before the trace),
    ``free_seq`` (index of the event that ended it; the trace's length when it is still
    alive), ``alloc_time_us`` / ``free_time_us`` (NaN when unknown), ``preexisting``
    and ``alive_at_end`` (bool). Event indices count the device's trace events.
    """
    ev = device_events(snap, device)
    n = len(ev)
    act = ev["action"].astype(str).to_numpy()
    addr = ev["addr"].fillna(-1).to_numpy(dtype=np.int64)
    size = ev["size"].to_numpy(dtype=np.int64)
    stack = ev["stack_id"].to_numpy(dtype=np.int64)
    t_us = ev["time_us"].to_numpy(dtype=np.float64)
    free_action = "free_completed" if (act == "free_completed").any() else "free_requested"
    is_alloc = act == "alloc"
    is_free = (act == free_action) | (act == "free")
    idx = np.flatnonzero(is_alloc | is_free)
    order = idx[np.lexsort((idx, addr[idx]))]  # by address, then time
    a_sorted = addr[order]
    alloc_sorted = is_alloc[order]
    same_prev = np.zeros(len(order), dtype=bool)
    same_prev[1:] = a_sorted[1:] == a_sorted[:-1]
    # A free pairs with the alloc just before it at the same address.
    prev_alloc = np.zeros(len(order), dtype=bool)
    prev_alloc[1:] = alloc_sorted[:-1]
    matched_free = ~alloc_sorted & same_prev & prev_alloc
    unmatched_free = ~alloc_sorted & ~matched_free
    # Each alloc ends at the next event at its address (its free, or defensively a
    # re-allocation if the free is missing); otherwise it is alive at the end.
    same_next = np.zeros(len(order), dtype=bool)
    same_next[:-1] = a_sorted[:-1] == a_sorted[1:]
    end = np.full(len(order), n, dtype=np.int64)
    end[:-1] = np.where(same_next[:-1], order[1:], n)
    a_pos = np.flatnonzero(alloc_sorted)
    alloc_idx = order[a_pos]
    free_idx = end[a_pos]

    def _t(ix):
        out = np.full(len(ix), np.nan)
        ok = ix < n
        out[ok] = t_us[ix[ok]]
        return out

    traced = pd.DataFrame({
        "addr": addr[alloc_idx], "size": size[alloc_idx], "stack_id": stack[alloc_idx],
        "alloc_seq": alloc_idx.astype(np.int64), "free_seq": free_idx,
        "alloc_time_us": t_us[alloc_idx], "free_time_us": _t(free_idx),
        "preexisting": False,
    })
    uf = order[np.flatnonzero(unmatched_free)]
    early_freed = pd.DataFrame({
        "addr": addr[uf], "size": size[uf], "stack_id": np.full(len(uf), -1, np.int64),
        "alloc_seq": np.full(len(uf), -1, np.int64), "free_seq": uf.astype(np.int64),
        "alloc_time_us": np.full(len(uf), np.nan), "free_time_us": t_us[uf], "preexisting": True,
    })
    # Blocks alive at snapshot time that the trace does not account for.
    blk = snap.blocks[(snap.blocks["device"] == device) & (snap.blocks["state"] != "inactive")]
    alive_traced = traced.loc[traced["free_seq"] >= n]
    known = set(alive_traced["addr"].tolist())
    blk_stack = dict(zip(blk["address"].tolist(), blk["stack_id"].tolist()))
    extra = blk[~blk["address"].isin(known)]
    req = extra["requested_size"].to_numpy(dtype=np.int64)
    early_alive = pd.DataFrame({
        "addr": extra["address"].to_numpy(dtype=np.int64),
        "size": np.where(req > 0, req, extra["size"].to_numpy(dtype=np.int64)),
        "stack_id": extra["stack_id"].to_numpy(dtype=np.int64),
        "alloc_seq": np.full(len(extra), -1, np.int64), "free_seq": np.full(len(extra), n, np.int64),
        "alloc_time_us": np.full(len(extra), np.nan), "free_time_us": np.full(len(extra), np.nan),
        "preexisting": True,
    })
    out = pd.concat([early_alive, early_freed, traced], ignore_index=True)
    # Allocations traced without a stack (context "state") get the block's, if alive.
    no_stack = (out["stack_id"] < 0) & (out["free_seq"] >= n) & ~out["preexisting"]
    if no_stack.any():
        out.loc[no_stack, "stack_id"] = [blk_stack.get(a, -1) for a in out.loc[no_stack, "addr"]]
    out["alive_at_end"] = out["free_seq"] >= n
    out["stack_id"] = out["stack_id"].astype(np.int64)
    return out.sort_values(["alloc_seq", "addr"], kind="stable").reset_index(drop=True)


def allocation_sites(allocs: pd.DataFrame, sites: list[str]) -> np.ndarray:
    """The site label of each allocation (PREEXISTING for early ones without a stack)."""
    lab = np.asarray(list(sites) + [NO_STACK], dtype=object)
    sid = allocs["stack_id"].to_numpy(dtype=np.int64)
    out = lab[np.where(sid >= 0, sid, len(sites))]
    early = allocs["preexisting"].to_numpy(dtype=bool) & (sid < 0)
    out[early] = PREEXISTING
    return out


# ---------------------------------------------------------------------------- timeline
def _trace_times(snap, device: int):
    ev = device_events(snap, device)
    t = ev["time_us"].to_numpy(dtype=np.float64)
    return t if len(t) and np.isfinite(t).all() else None


def compute_active_timeline(snap, device: int = 0, *, sites: list[str], allocs=None,
                            top_k: int = 12, max_points: int = 800) -> pd.DataFrame:
    """Active memory over the trace, stacked by allocation site.

    At most ``max_points`` moments are kept: in each of ``max_points`` equal slices of
    the trace, the event after which the total is highest (so every peak survives).

    Returns
    -------
    DataFrame (long form) with columns ``seq`` (event index), ``time_s`` (seconds since
    the trace's first event; NaN without timestamps), ``wall_time`` (seconds since the
    epoch; NaN without timestamps), ``site`` (categorical: the ``top_k`` sites by their
    own peak, then :data:`OTHER`), ``bytes``. Empty when the device has no trace.
    """
    if allocs is None:
        allocs = compute_allocations(snap, device)
    n = int((snap.events["device"] == device).sum())
    cols = ["seq", "time_s", "wall_time", "site", "bytes"]
    if n == 0:
        return pd.DataFrame({c: [] for c in cols})
    labels = allocation_sites(allocs, sites)
    codes, uniq = pd.factorize(labels)
    size = allocs["size"].to_numpy(dtype=np.int64)
    a_seq = allocs["alloc_seq"].to_numpy(dtype=np.int64)
    f_seq = allocs["free_seq"].to_numpy(dtype=np.int64)
    base = np.bincount(codes[a_seq < 0], weights=size[a_seq < 0], minlength=len(uniq))
    pos = np.concatenate([a_seq[a_seq >= 0], f_seq[f_seq < n]])
    delta = np.concatenate([size[a_seq >= 0], -size[f_seq < n]]).astype(np.float64)
    code = np.concatenate([codes[a_seq >= 0], codes[f_seq < n]])
    step_delta = np.bincount(pos, weights=delta, minlength=n)
    total = base.sum() + np.cumsum(step_delta)
    samples = _peak_samples(total, max_points)

    # Per site: its running total, read at the sample moments.
    order = np.lexsort((pos, code))
    pos_o, delta_o, code_o = pos[order], delta[order], code[order]
    bounds = np.searchsorted(code_o, np.arange(len(uniq) + 1))
    values = np.zeros((len(uniq), len(samples)))
    peaks = base.copy()
    for c in range(len(uniq)):
        lo, hi = bounds[c], bounds[c + 1]
        if hi > lo:
            cs = base[c] + np.cumsum(delta_o[lo:hi])
            peaks[c] = max(base[c], cs.max())
            k = np.searchsorted(pos_o[lo:hi], samples, side="right") - 1
            values[c] = np.where(k >= 0, cs[np.maximum(k, 0)], base[c])
        else:
            values[c] = base[c]
    rank = np.argsort(-peaks, kind="stable")
    top = [c for c in rank[:top_k]]
    rest = [c for c in rank[top_k:]]
    names = [str(uniq[c]) for c in top]
    rows = [values[c] for c in top]
    if rest:
        names.append(OTHER)
        rows.append(values[rest].sum(axis=0))
    t = _trace_times(snap, device)
    time_s = (t[samples] - t[0]) / 1e6 if t is not None else np.full(len(samples), np.nan)
    wall = t[samples] / 1e6 if t is not None else np.full(len(samples), np.nan)
    k = len(names)
    return pd.DataFrame({
        "seq": np.tile(samples, k),
        "time_s": np.tile(time_s, k),
        "wall_time": np.tile(wall, k),
        "site": pd.Categorical(np.repeat(names, len(samples)), categories=names),
        "bytes": np.round(np.concatenate(rows)).astype(np.int64),
    })


def _peak_samples(total: np.ndarray, max_points: int) -> np.ndarray:
    n = len(total)
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    edges = np.linspace(0, n, max(2, int(max_points)) + 1).astype(np.int64)
    starts = np.unique(edges[:-1])
    maxs = np.maximum.reduceat(total, starts)
    bucket = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    hit = np.flatnonzero(total == maxs[bucket])
    first = np.ones(len(hit), dtype=bool)
    first[1:] = bucket[hit[1:]] != bucket[hit[:-1]]
    keep = np.concatenate([[0], hit[first], [n - 1]])
    return np.unique(keep).astype(np.int64)


def compute_total_active(snap, device: int = 0, allocs=None) -> np.ndarray:
    """Active bytes after each trace event of the device (length: the trace's)."""
    if allocs is None:
        allocs = compute_allocations(snap, device)
    n = int((snap.events["device"] == device).sum())
    size = allocs["size"].to_numpy(dtype=np.float64)
    a_seq = allocs["alloc_seq"].to_numpy(dtype=np.int64)
    f_seq = allocs["free_seq"].to_numpy(dtype=np.int64)
    base = size[a_seq < 0].sum()
    d = (np.bincount(a_seq[a_seq >= 0], weights=size[a_seq >= 0], minlength=n)
         - np.bincount(f_seq[f_seq < n], weights=size[f_seq < n], minlength=n))
    return base + np.cumsum(d[:n])


def find_peak(snap, device: int = 0, allocs=None) -> dict | None:
    """``{seq, bytes, time_s, wall_time}`` of the moment of highest active memory (the
    first such moment), or None without a trace."""
    total = compute_total_active(snap, device, allocs)
    if not len(total):
        return None
    i = int(np.argmax(total))
    t = _trace_times(snap, device)
    return {"seq": i, "bytes": int(round(total[i])),
            "time_s": float((t[i] - t[0]) / 1e6) if t is not None else None,
            "wall_time": float(t[i] / 1e6) if t is not None else None}


# ---------------------------------------------------------------------------- at a moment
def live_at(allocs: pd.DataFrame, seq: int) -> pd.DataFrame:
    """Allocations alive just after event ``seq``."""
    m = (allocs["alloc_seq"] <= seq) & (allocs["free_seq"] > seq)
    return allocs[m]


def compute_largest_at_peak(snap, device: int = 0, *, sites: list[str], allocs=None,
                            n: int = 20) -> tuple[dict | None, pd.DataFrame]:
    """The largest allocations alive at the peak of active memory.

    Without a trace the snapshot's own moment is used (its live blocks).

    Returns
    -------
    (peak, table)
        ``peak`` as :func:`find_peak` (None without a trace); ``table`` with columns
        ``size``, ``share`` (of the active bytes at that moment), ``site``, ``addr``,
        ``alloc_seq``, ``age_s`` (seconds alive at that moment; NaN when unknown),
        ``preexisting``, ``stack`` (text), ``stack_id``, largest first.
    """
    if allocs is None:
        allocs = compute_allocations(snap, device)
    peak = find_peak(snap, device, allocs)
    if peak is None:
        live = allocs[allocs["alive_at_end"]]
        at_us = np.nan
    else:
        live = live_at(allocs, peak["seq"])
        at_us = peak["wall_time"] * 1e6 if peak["wall_time"] is not None else np.nan
    live = live.sort_values(["size", "alloc_seq"], ascending=[False, True], kind="stable")
    total = float(live["size"].sum()) or 1.0
    top = live.head(int(n))
    labels = allocation_sites(top, sites)
    table = pd.DataFrame({
        "size": top["size"].to_numpy(dtype=np.int64),
        "share": top["size"].to_numpy(dtype=np.float64) / total,
        "site": labels,
        "addr": top["addr"].to_numpy(dtype=np.int64),
        "alloc_seq": top["alloc_seq"].to_numpy(dtype=np.int64),
        "age_s": (at_us - top["alloc_time_us"].to_numpy(dtype=np.float64)) / 1e6,
        "preexisting": top["preexisting"].to_numpy(dtype=bool),
        "stack": [format_stack(snap.stacks[s]) if s >= 0 else
                  (PREEXISTING if p else NO_STACK)
                  for s, p in zip(top["stack_id"].tolist(), top["preexisting"].tolist())],
        "stack_id": top["stack_id"].to_numpy(dtype=np.int64),
    })
    return peak, table


def compute_leaked_by_site(snap, device: int = 0, *, sites: list[str], allocs=None) -> pd.DataFrame:
    """Allocations still alive at the end, grouped by site: where to hunt a leak.

    A leak looks like a site whose allocations pile up: many still alive, made all
    along the trace (``span_share`` near 1), a high ``still_alive_share``.

    Returns
    -------
    DataFrame with columns ``site``, ``live_count``, ``live_bytes``,
    ``allocated_in_trace`` (allocations from this site in the trace),
    ``still_alive_share`` (live / allocated in the trace; NaN when none were traced),
    ``first_alloc_s``, ``last_alloc_s`` (seconds into the trace of the oldest and newest
    live allocation; NaN when unknown), ``span_share`` (their distance as a share of the
    trace's duration), ``preexisting`` (how many were made before the trace),
    ``accumulating`` (at least 3 alive, spread over half the trace or more),
    ``stack`` (text of one representative stack). Largest ``live_bytes`` first.
    """
    if allocs is None:
        allocs = compute_allocations(snap, device)
    labels = allocation_sites(allocs, sites)
    t = _trace_times(snap, device)
    t0 = t[0] if t is not None else np.nan
    dur = (t[-1] - t[0]) if t is not None and len(t) > 1 else np.nan
    df = allocs.assign(site=labels)
    traced = df[~df["preexisting"]].groupby("site").size()
    live = df[df["alive_at_end"]]
    cols = ["site", "live_count", "live_bytes", "allocated_in_trace", "still_alive_share",
            "first_alloc_s", "last_alloc_s", "span_share", "preexisting", "accumulating", "stack"]
    if not len(live):
        return pd.DataFrame({c: [] for c in cols})
    g = live.groupby("site", sort=False)
    out = pd.DataFrame({
        "live_count": g.size(),
        "live_bytes": g["size"].sum(),
        "first_us": g["alloc_time_us"].min(),
        "last_us": g["alloc_time_us"].max(),
        "preexisting": g["preexisting"].sum(),
        "stack_id": g["stack_id"].max(),
    }).reset_index()
    out["allocated_in_trace"] = out["site"].map(traced).fillna(0).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        live_traced = out["live_count"] - out["preexisting"]
        out["still_alive_share"] = np.where(out["allocated_in_trace"] > 0,
                                            live_traced / out["allocated_in_trace"], np.nan)
        out["first_alloc_s"] = (out["first_us"] - t0) / 1e6
        out["last_alloc_s"] = (out["last_us"] - t0) / 1e6
        out["span_share"] = (out["last_us"] - out["first_us"]) / dur if dur and dur > 0 else np.nan
    out["accumulating"] = (out["live_count"] >= 3) & (out["span_share"].fillna(0) >= 0.5)
    out["stack"] = [format_stack(snap.stacks[s], limit=12) if s >= 0 else NO_STACK
                    for s in out["stack_id"].tolist()]
    out["live_bytes"] = out["live_bytes"].astype(np.int64)
    out["preexisting"] = out["preexisting"].astype(np.int64)
    out = out.sort_values(["live_bytes", "site"], ascending=[False, True], kind="stable")
    return out[cols].reset_index(drop=True)


# ---------------------------------------------------------------------------- segments
def _ranges_at(snap, device: int, seq: int):
    """(start, size, stream, segment_type) of reserved ranges just after event ``seq``."""
    seg = snap.segments[snap.segments["device"] == device]
    ranges = {int(a): [int(s), int(st), str(ty)] for a, s, st, ty in zip(
        seg["address"], seg["total_size"], seg["stream"], seg["segment_type"].astype(str))}
    ev = device_events(snap, device)
    later = ev[(ev["seq"] > seq) & ev["action"].isin(
        ["segment_alloc", "segment_free", "segment_map", "segment_unmap"])]
    for act, a, s, st in zip(later["action"].astype(str).tolist()[::-1],
                             later["addr"].tolist()[::-1], later["size"].tolist()[::-1],
                             later["stream"].tolist()[::-1]):
        a, s = int(a), int(s)
        if act in ("segment_alloc", "segment_map"):  # did not exist yet: take it away
            if act == "segment_alloc" or a in ranges and ranges[a][0] == s:
                ranges.pop(a, None)
            else:
                for start, r in list(ranges.items()):
                    if start <= a and a + s <= start + r[0]:
                        del ranges[start]
                        if a > start:
                            ranges[start] = [a - start, r[1], r[2]]
                        if a + s < start + r[0]:
                            ranges[a + s] = [start + r[0] - a - s, r[1], r[2]]
                        break
        else:  # freed later: it was there
            ranges[a] = [s, int(st), "small" if s <= (2 << 20) else "large"]
    starts = np.array(sorted(ranges), dtype=np.int64)
    return pd.DataFrame({
        "address": starts,
        "total_size": np.array([ranges[a][0] for a in starts.tolist()], dtype=np.int64),
        "stream": np.array([ranges[a][1] for a in starts.tolist()], dtype=np.int64),
        "segment_type": [ranges[a][2] for a in starts.tolist()],
    })


def compute_segments_at(snap, device: int = 0, seq: int | None = None, *, sites: list[str],
                        allocs=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The allocator's segments and what fills them, at the end or just after event ``seq``.

    At the end (``seq`` None) the snapshot's own blocks are used, with their exact
    states; at an earlier moment the segments are rebuilt by undoing the later
    ``segment_alloc``/``segment_free`` events, and filled with the allocations alive then
    (their requested sizes; the allocator's rounding shows as free space).

    Returns
    -------
    (segments, blocks)
        ``segments``: ``segment`` (row id), ``address``, ``total_size``, ``stream``,
        ``segment_type``, ``allocated_bytes``, ``pending_free_bytes``, ``free_bytes``,
        ``largest_free_bytes`` (the largest contiguous free range), ``allocations``,
        ``free_share`` (free / total). ``blocks``: ``segment``, ``offset``, ``size``,
        ``state``, ``site``, ``addr``; free space is implied by the gaps.
    """
    if seq is None:
        seg = snap.segments[snap.segments["device"] == device].reset_index(drop=True)
        segs = seg[["address", "total_size", "stream", "segment_type"]].copy()
        segs["segment_type"] = segs["segment_type"].astype(str)
        b = snap.blocks[(snap.blocks["device"] == device) & (snap.blocks["state"] != "inactive")]
        seg_row = {s: i for i, s in enumerate(seg["segment"].tolist())}
        rows = b["segment"].map(seg_row).to_numpy(dtype=np.int64)
        lab = np.asarray(list(sites) + [NO_STACK], dtype=object)
        sid = b["stack_id"].to_numpy(dtype=np.int64)
        blocks = pd.DataFrame({
            "segment": rows,
            "offset": b["address"].to_numpy(dtype=np.int64) - segs["address"].to_numpy()[rows],
            "size": b["size"].to_numpy(dtype=np.int64),
            "state": b["state"].astype(str).to_numpy(),
            "site": lab[np.where(sid >= 0, sid, len(sites))],
            "addr": b["address"].to_numpy(dtype=np.int64),
        })
    else:
        if allocs is None:
            allocs = compute_allocations(snap, device)
        segs = _ranges_at(snap, device, int(seq))
        live = live_at(allocs, int(seq))
        starts = segs["address"].to_numpy(dtype=np.int64)
        a = live["addr"].to_numpy(dtype=np.int64)
        row = np.searchsorted(starts, a, side="right") - 1
        ok = row >= 0
        ok[ok] = a[ok] < starts[row[ok]] + segs["total_size"].to_numpy()[row[ok]]
        live, row = live[ok], row[ok]
        blocks = pd.DataFrame({
            "segment": row.astype(np.int64),
            "offset": live["addr"].to_numpy(dtype=np.int64) - starts[row],
            "size": live["size"].to_numpy(dtype=np.int64),
            "state": "active_allocated",
            "site": allocation_sites(live, sites),
            "addr": live["addr"].to_numpy(dtype=np.int64),
        })
    blocks = blocks.sort_values(["segment", "offset"], kind="stable").reset_index(drop=True)
    segs = segs.reset_index(drop=True)
    segs.insert(0, "segment", np.arange(len(segs), dtype=np.int64))
    nseg = len(segs)
    seg_of = blocks["segment"].to_numpy(dtype=np.int64)
    sizes = blocks["size"].to_numpy(dtype=np.int64)
    alloc_mask = blocks["state"].to_numpy() == "active_allocated"
    segs["allocated_bytes"] = np.bincount(seg_of[alloc_mask], weights=sizes[alloc_mask],
                                          minlength=nseg).astype(np.int64)
    segs["pending_free_bytes"] = np.bincount(seg_of[~alloc_mask], weights=sizes[~alloc_mask],
                                             minlength=nseg).astype(np.int64)
    segs["allocations"] = np.bincount(seg_of, minlength=nseg).astype(np.int64)
    segs["free_bytes"] = segs["total_size"] - segs["allocated_bytes"] - segs["pending_free_bytes"]
    segs["largest_free_bytes"] = _largest_gaps(segs, blocks)
    segs["free_share"] = np.where(segs["total_size"] > 0,
                                  segs["free_bytes"] / segs["total_size"].clip(lower=1), 0.0)
    return segs, blocks


def _largest_gaps(segs: pd.DataFrame, blocks: pd.DataFrame) -> np.ndarray:
    nseg = len(segs)
    out = segs["total_size"].to_numpy(dtype=np.int64).copy()
    if not len(blocks):
        return out
    seg_of = blocks["segment"].to_numpy(dtype=np.int64)
    off = blocks["offset"].to_numpy(dtype=np.int64)
    end = off + blocks["size"].to_numpy(dtype=np.int64)
    first = np.ones(len(blocks), dtype=bool)
    first[1:] = seg_of[1:] != seg_of[:-1]
    prev_end = np.zeros(len(blocks), dtype=np.int64)
    prev_end[1:] = end[:-1]
    gap_before = np.where(first, off, off - prev_end)
    largest = np.zeros(nseg, dtype=np.int64)
    np.maximum.at(largest, seg_of, gap_before)
    last = np.ones(len(blocks), dtype=bool)
    last[:-1] = seg_of[:-1] != seg_of[1:]
    tail = segs["total_size"].to_numpy(dtype=np.int64)[seg_of[last]] - end[last]
    np.maximum.at(largest, seg_of[last], tail)
    has = np.bincount(seg_of, minlength=nseg) > 0
    out[has] = largest[has]
    return np.maximum(out, 0)


def compute_segment_occupancy(segs: pd.DataFrame, blocks: pd.DataFrame, *, bins: int = 160,
                              max_segments: int = 48) -> tuple[pd.DataFrame, np.ndarray]:
    """How full each part of each segment is, for a heat map of the allocator's layout.

    Each of the ``max_segments`` largest segments is cut into ``bins`` equal slices;
    a cell holds the share of its slice covered by allocated (or pending-free) blocks.

    Returns
    -------
    (rows, z)
        ``rows``: the chosen segments (the ``segments`` columns), in address order;
        ``z``: float array of shape (len(rows), bins) in [0, 1].
    """
    bins = max(1, int(bins))
    chosen = segs.nlargest(int(max_segments), ["total_size", "address"]).sort_values("address")
    z = np.zeros((len(chosen), bins))
    for r, (sid, total) in enumerate(zip(chosen["segment"].tolist(), chosen["total_size"].tolist())):
        b = blocks[blocks["segment"] == sid]
        if not len(b) or total <= 0:
            continue
        s = b["offset"].to_numpy(dtype=np.float64)
        e = s + b["size"].to_numpy(dtype=np.float64)
        edges = np.linspace(0.0, float(total), bins + 1)
        ss, es = np.sort(s), np.sort(e)
        cs, ce = np.concatenate([[0.0], np.cumsum(ss)]), np.concatenate([[0.0], np.cumsum(es)])
        ks = np.searchsorted(ss, edges, side="right")
        ke = np.searchsorted(es, edges, side="right")
        covered = (ks * edges - cs[ks]) - (ke * edges - ce[ke])  # bytes covered below each edge
        z[r] = np.diff(covered) / np.diff(edges)
    return chosen.reset_index(drop=True), np.clip(z, 0.0, 1.0)


def compute_oom_events(snap, device: int = 0, *, sites: list[str]) -> pd.DataFrame:
    """The allocator's out-of-memory events: ``seq``, ``time_s``, ``requested_bytes``,
    ``device_free_bytes``, ``site``."""
    ev = device_events(snap, device)
    o = ev[ev["action"] == "oom"]
    t = _trace_times(snap, device)
    lab = np.asarray(list(sites) + [NO_STACK], dtype=object)
    sid = o["stack_id"].to_numpy(dtype=np.int64)
    return pd.DataFrame({
        "seq": o["seq"].to_numpy(dtype=np.int64),
        "time_s": (o["time_us"].to_numpy(dtype=np.float64) - t[0]) / 1e6 if t is not None
        else np.full(len(o), np.nan),
        "requested_bytes": o["size"].to_numpy(dtype=np.int64),
        "device_free_bytes": o["device_free"].astype("float64").to_numpy(),
        "site": lab[np.where(sid >= 0, sid, len(sites))],
    })


def assign_steps(wall_time, steps: pd.DataFrame) -> np.ndarray:
    """The training step running at each wall time (float, NaN outside the recorded steps).

    ``steps`` is one rank's :meth:`debugkit.Run.steps` table (``step``, ``wall_time``
    at the step's start, ``step_time_s``).
    """
    w = np.asarray(wall_time, dtype=np.float64)
    out = np.full(len(w), np.nan)
    if steps is None or not len(steps):
        return out
    st = steps.sort_values("wall_time")
    start = st["wall_time"].to_numpy(dtype=np.float64)
    end = start + st["step_time_s"].fillna(0).to_numpy(dtype=np.float64)
    k = np.searchsorted(start, w, side="right") - 1
    ok = (k >= 0) & np.isfinite(w)
    # between the end of a step and the next start counts as the earlier step's tail
    nxt = np.append(start[1:], end[-1] if len(end) else np.inf)
    ok[ok] = w[ok] <= np.maximum(nxt[k[ok]], end[k[ok]])
    out[ok] = st["step"].to_numpy(dtype=np.float64)[k[ok]]
    return out
