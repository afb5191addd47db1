"""Straggler and communication/computation-overlap analysis of several ranks' traces,
as Holistic Trace Analysis (HTA) defines them.

Input: the stacked events of :func:`debugkit.io.rank_traces.stack_events` (columns
``rank, name, ts_us, dur_us, end_us, stream, kind, iteration``).

- **Late-start stragglers** (HTA ``get_potential_stragglers``): the collectives of a
  synchronous job end at about the same time on every rank, so the later a rank
  *starts* its last significant collective of an iteration, the longer the others
  waited for it. Significant: at least 1 % of the mean iteration time. Of the
  (stream, collective) pairs, the one whose duration varies most across ranks is
  used. Its start time is normalised by the mean iteration time; in each iteration
  the ``num_candidates`` latest ranks are potential stragglers, and ranks are ranked
  by how many iterations flag them. debugkit adds a significance test before it
  reports a finding: the rank must start later than the median rank by at least
  ``min_lag`` (5 % of an iteration) in most iterations.
- **Overlap** (HTA ``get_comm_comp_overlap``): per rank, the time communication and
  computation run at once divided by the time communication runs, over the merged
  intervals of each kind.

HTA's iteration numbers start at ``ProfilerStep#`` N; like HTA, iteration 0 (and
events outside any profiler step) are left out of the straggler metric.
"""

from __future__ import annotations

import math

from .findings import Finding

MIN_NORMALIZED_DURATION = 0.01
NUM_CANDIDATES = 2
MIN_LAG = 0.05


def merge_intervals(starts, ends):
    """Merge overlapping ``[start, end)`` intervals; returns two sorted numpy arrays."""
    import numpy as np

    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    if s.size == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    gid = np.cumsum(new) - 1
    ms = s[new]
    me = np.zeros(ms.size)
    np.maximum.at(me, gid, e)
    me = np.maximum(me, ms)
    return ms, me


def intersection_length(a_s, a_e, b_s, b_e) -> float:
    """Total length of the intersection of two sets of merged, sorted intervals."""
    i = j = 0
    total = 0.0
    while i < len(a_s) and j < len(b_s):
        lo = max(a_s[i], b_s[j])
        hi = min(a_e[i], b_e[j])
        if hi > lo:
            total += hi - lo
        if a_e[i] < b_e[j]:
            i += 1
        else:
            j += 1
    return total


def compute_comm_comp_overlap(events):
    """HTA's communication/computation overlap per rank.

    Returns
    -------
    DataFrame with columns ``rank``, ``comm_us`` (merged communication time),
    ``comp_us`` (merged computation time), ``overlap_us`` and ``overlap_pct``
    (``100 * overlap_us / comm_us``, NaN without communication).
    """
    import pandas as pd

    rows = []
    for r, g in events.groupby("rank", sort=True):
        cs, ce = merge_intervals(g.loc[g["kind"] == "comm", "ts_us"], g.loc[g["kind"] == "comm", "end_us"])
        ps, pe = merge_intervals(g.loc[g["kind"] == "compute", "ts_us"],
                                 g.loc[g["kind"] == "compute", "end_us"])
        comm = float((ce - cs).sum())
        comp = float((pe - ps).sum())
        ov = intersection_length(cs, ce, ps, pe)
        rows.append({"rank": int(r), "comm_us": comm, "comp_us": comp, "overlap_us": ov,
                     "overlap_pct": 100.0 * ov / comm if comm > 0 else math.nan})
    return pd.DataFrame(rows, columns=["rank", "comm_us", "comp_us", "overlap_us", "overlap_pct"])


def compute_late_start_metric(events, *, min_normalized_duration: float = MIN_NORMALIZED_DURATION):
    """HTA's straggler metric: normalised start time of the last significant collective.

    Returns
    -------
    (DataFrame, dict)
        One row per (rank, iteration): ``rank``, ``iteration``, ``name``, ``stream``,
        ``ts_us``, ``dur_us``, ``normalized_start_time`` ((ts - t_min) / mean
        iteration time), ``duration`` (normalised) and ``lag`` (normalised start minus
        the median over ranks in that iteration). The dict holds ``mean_iter_us``,
        ``t_min_us``, ``iterations``, ``collective`` and ``stream`` (the pair used).
        Empty when the traces hold no significant collective.
    """
    import pandas as pd

    cols = ["rank", "iteration", "name", "stream", "ts_us", "dur_us", "normalized_start_time",
            "duration", "lag"]
    empty = pd.DataFrame(columns=cols), {}
    df = events[events["iteration"] > 0]
    if df.empty:
        return empty
    iterations = sorted(int(i) for i in df["iteration"].unique())
    t_min = float(df["ts_us"].min())
    mean_iter = (float(df["end_us"].max()) - t_min) / len(iterations)
    if mean_iter <= 0:
        return empty
    comm = df[(df["kind"] == "comm") & (df["dur_us"] >= mean_iter * min_normalized_duration)]
    if comm.empty:
        return empty
    comm = comm.sort_values("ts_us", kind="stable")
    last = comm.groupby(["rank", "stream", "iteration", "name"], as_index=False).last()
    last["normalized_start_time"] = (last["ts_us"] - t_min) / mean_iter
    last["duration"] = last["dur_us"] / mean_iter
    spread = last.groupby(["stream", "iteration", "name"])["duration"].std().fillna(0.0)
    avg = spread.groupby(level=["stream", "name"]).mean()
    stream, name = avg.idxmax()
    pick = last[(last["stream"] == stream) & (last["name"] == name)].copy()
    pick["lag"] = pick["normalized_start_time"] - pick.groupby("iteration")[
        "normalized_start_time"].transform("median")
    pick = pick.sort_values(["iteration", "rank"]).reset_index(drop=True)
    meta = {"mean_iter_us": mean_iter, "t_min_us": t_min, "iterations": iterations,
            "collective": str(name), "stream": int(stream)}
    return pick[cols], meta


def compute_potential_stragglers(metric, *, num_candidates: int = NUM_CANDIDATES):
    """HTA's candidate selection: per iteration the ``num_candidates`` latest ranks.

    Returns
    -------
    DataFrame with ``rank``, ``late_iterations`` (how many iterations flag it),
    ``median_lag`` (normalised), ``iterations`` and ``potential`` (among HTA's
    top ``num_candidates`` by ``late_iterations``), sorted by ``late_iterations``
    then ``median_lag`` (descending).
    """
    import pandas as pd

    cols = ["rank", "late_iterations", "median_lag", "iterations", "potential"]
    if metric.empty:
        return pd.DataFrame(columns=cols)
    k = max(1, int(num_candidates))
    flags = []
    for _, g in metric.groupby("iteration"):
        vals = sorted(g["normalized_start_time"], reverse=True)
        threshold = vals[min(k, len(vals)) - 1]
        flags.append(g.assign(flag=g["normalized_start_time"] >= threshold))
    f = pd.concat(flags)
    out = f.groupby("rank").agg(late_iterations=("flag", "sum"), median_lag=("lag", "median"),
                                iterations=("iteration", "nunique")).reset_index()
    out = out.sort_values(["late_iterations", "median_lag"], ascending=False).reset_index(drop=True)
    out["late_iterations"] = out["late_iterations"].astype(int)
    out["potential"] = out.index < k
    return out[cols]


def detect_trace_stragglers(events, *, num_candidates: int = NUM_CANDIDATES,
                            min_lag: float = MIN_LAG,
                            min_normalized_duration: float = MIN_NORMALIZED_DURATION) -> list[Finding]:
    """``straggler`` findings from the traces (evidence ``source: "profiler_trace"``).

    A rank is reported when it is one of HTA's potential stragglers *and* its
    collective starts at least ``min_lag`` iterations later than the median rank in
    more than half of the iterations.
    """
    metric, meta = compute_late_start_metric(events, min_normalized_duration=min_normalized_duration)
    if metric.empty or metric["rank"].nunique() < 2:
        return []
    cand = compute_potential_stragglers(metric, num_candidates=num_candidates)
    overlap = compute_comm_comp_overlap(events).set_index("rank")["overlap_pct"]
    out = []
    for row in cand[cand["potential"]].itertuples():
        lags = metric.loc[metric["rank"] == row.rank, "lag"]
        late = int((lags >= min_lag).sum())
        if late * 2 <= len(lags):
            continue
        ms = float(row.median_lag) * meta["mean_iter_us"] / 1000.0
        ov = overlap.get(row.rank, math.nan)
        out.append(Finding(
            kind="straggler", step=None, rank=int(row.rank), layer=None, severity="warning",
            message=(f"Rank {row.rank} starts its last {meta['collective']} of the iteration "
                     f"{float(row.median_lag):.2f} iterations ({ms:.1f} ms) later than the median "
                     f"rank in {late} of {len(lags)} profiled iterations (torch.profiler traces, "
                     f"HTA's late-start metric): the other ranks wait for it."),
            evidence={"source": "profiler_trace", "collective": meta["collective"],
                      "stream": meta["stream"], "median_lag": float(row.median_lag),
                      "median_lag_ms": ms, "late_iterations": late, "iterations": int(len(lags)),
                      "mean_iteration_ms": meta["mean_iter_us"] / 1000.0,
                      "potential_stragglers": [int(r) for r in cand.loc[cand["potential"], "rank"]],
                      "overlap_pct": None if math.isnan(ov) else float(ov)}))
    return out
