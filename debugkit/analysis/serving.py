"""Inference runs: leaks across requests, memory that follows input size, latency change
points, failing signatures and fallbacks (pure functions over :meth:`Run.requests`).

Inputs are the requests table (:meth:`debugkit.Run.requests`), the ranks' capacities
(:meth:`debugkit.Run.memory_capacity`) and the failure records (:meth:`debugkit.Run.failures`);
outputs are :class:`Finding` lists. Thresholds live in :data:`DEFAULTS`; ``debugkit
diagnose`` passes ``config["serving"]`` over them, and the run's own thresholds (the
manifest's ``serve`` object) over the two memory shares. docs/serving.md explains each.

Memory, in brief: a request's ``mem_after_bytes`` is ordered by start time and judged by
:func:`debugkit.analysis.memory.detect_leak` against the request count (warm-up skipped,
window minima, Theil-Sen slope that must hold in the second half and exceed the noise).
A rise is then attributed by a robust (Huber) regression of memory on both the request
count and the largest input seen so far: a caching allocator keeps the working set of the
largest request it served, so memory that steps up when a larger input arrives and then
stays flat follows input size, not the request count, and is not a leak.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .findings import Finding
from .memory import MiB, detect_leak, fmt_bytes

DEFAULTS = {
    "gpu_threshold": 0.80,           # share of GPU memory the service must stay under
    "host_threshold": 0.75,          # share of host memory (the run's serve object overrides both)
    "warmup_frac": 0.10,             # share of requests skipped as warm-up
    "min_warmup_requests": 20,
    "min_requests": 60,              # requests needed after warm-up to judge a memory trend
    "windows": 20,                   # windows whose minima the leak slope is fitted to
    "min_growth_bytes": 8 * MiB,     # growth over the judged span to call it a leak
    "min_growth_frac": 0.02,         # ... and as a share of the starting level
    "noise_factor": 3.0,             # ... and as a multiple of the scatter (MAD)
    "late_ratio": 0.5,               # second-half slope / whole slope, to keep growing
    "count_share": 0.5,              # share of the rise the request count must explain for a leak
    "culprit_t": 3.0,                # a route's bytes kept per request: this many standard errors
                                     # above zero and above the next route's ...
    "culprit_ratio": 1.5,            # ... this many times what the next one keeps ...
    "culprit_share": 0.5,            # ... and its requests' keeping is this share of the growth
    "latency_min_requests": 60,      # ok requests needed to look for a latency change point
    "latency_min_segment": 30,       # requests on each side of a change point (and 10 % of them)
    "latency_ratio": 1.5,            # median after / median before to call it a regression
    "latency_min_shift_ms": 0.5,     # ... and at least this many milliseconds slower
    "correlation": 0.5,              # |Spearman rho| above which latency "tracks" memory / input size
    "fallback_warn_rate": 0.05,      # fallback share above which a fallback_rate is a warning
    "max_signatures": 10,            # failing-signature findings per outcome, most frequent first
    "max_failure_ids": 5,            # capture ids listed per finding
}


def config_with_defaults(config: dict | None) -> dict:
    """``DEFAULTS`` updated with ``config`` (unknown keys are refused)."""
    from ..errors import InvalidInputError

    cfg = dict(DEFAULTS)
    for k, v in (config or {}).items():
        if k not in DEFAULTS:
            raise InvalidInputError(f"serving config key {k!r}: expected one of {sorted(DEFAULTS)}")
        cfg[k] = v
    return cfg


def _ordered(requests: pd.DataFrame) -> pd.DataFrame:
    """One rank's requests in start order, with ``n``: the 0-based position (a process's
    ``request`` numbers restart when it restarts; ``n`` counts across segments)."""
    g = requests.sort_values(["wall_time", "request"], kind="stable").reset_index(drop=True)
    g["n"] = np.arange(len(g), dtype=np.int64)
    return g


# ---------------------------------------------------------------------------- memory
def huber_fit(X: np.ndarray, y: np.ndarray, iters: int = 20) -> np.ndarray:
    """Huber regression by iteratively reweighted least squares (k = 1.345 x MAD scale):
    the coefficients of ``y ~ X``; outliers (a request that briefly held a large buffer)
    get less weight than in least squares."""
    w = np.ones(len(y))
    beta = np.zeros(X.shape[1])
    for _ in range(iters):
        sw = np.sqrt(w)
        beta, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
        r = y - X @ beta
        scale = 1.4826 * float(np.median(np.abs(r - np.median(r)))) or float(np.std(r)) or 1.0
        k = 1.345 * scale
        a = np.abs(r)
        w_new = np.where(a <= k, 1.0, k / np.maximum(a, 1e-300))
        if np.allclose(w_new, w):
            break
        w = w_new
    return beta


def attribute_growth(n, mem, numel) -> dict:
    """Split a memory rise between the request count and the largest input seen so far.

    Fits ``mem ~ a + b * n + c * cummax(numel)`` (:func:`huber_fit`, columns scaled to
    [0, 1]) and returns ``by_requests_bytes`` (b over the span of ``n``),
    ``by_input_size_bytes`` (c over the range of the running maximum), their
    ``count_share`` (by_requests / the sum of both's positive parts) and
    ``bytes_per_request`` / ``bytes_per_input_element``.
    """
    n = np.asarray(n, dtype=np.float64)
    mem = np.asarray(mem, dtype=np.float64)
    size = np.maximum.accumulate(np.asarray(numel, dtype=np.float64))
    n_span = float(n.max() - n.min()) or 1.0
    s_span = float(size.max() - size.min())
    cols = [np.ones_like(n), (n - n.min()) / n_span]
    if s_span > 0:
        cols.append((size - size.min()) / s_span)
    beta = huber_fit(np.column_stack(cols), mem)
    by_n = float(beta[1])
    by_size = float(beta[2]) if s_span > 0 else 0.0
    pos = max(by_n, 0.0) + max(by_size, 0.0)
    return {"by_requests_bytes": by_n, "by_input_size_bytes": by_size,
            "count_share": max(by_n, 0.0) / pos if pos > 0 else 0.0,
            "bytes_per_request": by_n / n_span,
            "bytes_per_input_element": by_size / s_span if s_span > 0 else 0.0,
            "largest_input_numel": int(size.max()) if len(size) else 0}


def input_names(signature: str) -> str:
    """A signature without its dtypes and shapes: ``input_ids;temperature``."""
    return ";".join(part.split(":", 1)[0] for part in str(signature or "").split(";"))


def isolated(requests: pd.DataFrame) -> np.ndarray:
    """Which requests ran alone: no other request of the frame (one process) overlapped
    ``[wall_time, wall_time + latency_ms]``. Their memory change is their own; a request
    that overlapped others also sees what those kept."""
    order = np.argsort(requests["wall_time"].to_numpy(dtype=np.float64), kind="stable")
    s = requests["wall_time"].to_numpy(dtype=np.float64)[order]
    e = s + np.nan_to_num(requests["latency_ms"].to_numpy(dtype=np.float64)[order]) / 1e3
    prev_end = np.r_[-np.inf, np.maximum.accumulate(e)[:-1]]
    next_start = np.r_[s[1:], np.inf]
    out = np.zeros(len(s), dtype=bool)
    out[order] = (prev_end < s) & (e < next_start)
    return out


def own_changes_by_group(requests: pd.DataFrame, keys: pd.Series, min_isolated: int = 30) -> dict[str, float]:
    """Mean memory change over each group's own requests (``mem_after_bytes -
    mem_before_bytes``), largest first; only requests that ran alone (:func:`isolated`)
    count when every group has ``min_isolated`` of them. Biased where the heap grows in
    steps (the request that touches the new pages is charged for what another kept): the
    fallback of :func:`retained_by_group` when the traffic's mix cannot tell groups apart."""
    d, k = _own_changes(requests, keys, min_isolated)
    means = d.groupby(k).mean().sort_values(ascending=False)
    return {str(g): float(v) for g, v in means.items()}


def _own_changes(requests: pd.DataFrame, keys: pd.Series, min_isolated: int = 30) -> tuple[pd.Series, pd.Series]:
    """The memory changes :func:`own_changes_by_group` averages, and their groups."""
    d = (requests["mem_after_bytes"].astype("float64") - requests["mem_before_bytes"].astype("float64"))
    ok = d.notna()
    alone = ok & pd.Series(isolated(requests), index=requests.index)
    if alone.any() and keys[alone].value_counts().reindex(keys[ok].unique()).fillna(0).min() >= min_isolated:
        ok = alone
    return d[ok], keys[ok]


def _own_change_stats(requests: pd.DataFrame, keys: pd.Series, kept: dict[str, float], stats: dict) -> None:
    """The standard errors of the own changes' means (None for a group with fewer than two
    readings; at least one byte, the readings' resolution), and ``t_top`` / ``t_gap`` as
    the regression gives them (the top group's mean over its standard error; the gap to
    the second over the standard error of that gap), so that a group is named by either
    method only when the readings tell it apart (``culprit_t``)."""
    d, k = _own_changes(requests, keys)
    grouped = d.groupby(k)
    se = grouped.std(ddof=1) / np.sqrt(grouped.count())
    stats["se"] = {str(g): (max(float(v), 1.0) if np.isfinite(v) else None) for g, v in se.items()}
    stats["t_top"] = stats["t_gap"] = stats["se_gap"] = None
    names = list(kept)
    if not names or stats["se"].get(names[0]) is None:
        return
    top, se_top = names[0], stats["se"][names[0]]
    stats["t_top"] = kept[top] / se_top
    if len(names) > 1:
        se_sec = stats["se"].get(names[1])
        if se_sec is not None:
            stats["se_gap"] = math.sqrt(se_top ** 2 + se_sec ** 2)
            stats["t_gap"] = (kept[top] - kept[names[1]]) / stats["se_gap"]


def _reading_points(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The memory readings of a frame (one process) in time order: ``(times, bytes)``;
    ``mem_before_bytes`` is read at a request's start, ``mem_after_bytes`` at its end."""
    start = requests["wall_time"].to_numpy(dtype=np.float64)
    end = start + np.nan_to_num(requests["latency_ms"].to_numpy(dtype=np.float64)) / 1e3
    before = requests["mem_before_bytes"].astype("float64").to_numpy(na_value=np.nan)
    after = requests["mem_after_bytes"].astype("float64").to_numpy(na_value=np.nan)
    t = np.concatenate([start[~np.isnan(before)], end[~np.isnan(after)]])
    v = np.concatenate([before[~np.isnan(before)], after[~np.isnan(after)]])
    order = np.argsort(t, kind="stable")
    return t[order], v[order]


def group_keys(requests: pd.DataFrame) -> tuple[str, pd.Series]:
    """``("route", routes)``, or ``("inputs", input names)`` when the service named no route."""
    if requests["route"].notna().any():
        return "route", requests["route"].fillna("(no route)")
    return "inputs", requests["signature"].map(input_names)


def regress_retained(requests: pd.DataFrame, keys: pd.Series, min_window: int = 16,
                     windows: int = 150) -> tuple[dict[str, float], dict]:
    """Memory a request of each group keeps, by regression: ``({group: bytes per request},
    stats)``, largest first (``{}`` when there is too little to fit).

    The readings are cut into windows of at least ``min_window`` requests (about
    ``windows`` of them), and the memory change over each window is fitted by least
    squares to the number of requests of each group that ended in it and in the window
    before (what a request keeps may show a window later), with no intercept: ``delta =
    sum_g a_g * count_g + b_g * count_g(previous window)``; ``a_g + b_g`` is what a request
    of each group keeps. A window's change counts every step of RSS in it whichever
    request touched the new pages (glibc grows the heap in steps, often in a clean
    request's temporary buffer once a leaking one has used the free space: that is what
    makes the mean change of each group's own requests blame clean routes); the windows'
    different mixes of groups tell the groups apart. ``stats``: ``se`` (standard errors
    per group), ``windows``, ``t_top`` (the top coefficient over its standard error),
    ``t_gap`` and ``se_gap`` (the top minus the second, over / the standard error of that
    difference).
    """
    stats: dict = {"se": {}, "windows": 0, "t_top": None, "t_gap": None, "se_gap": None}
    groups = sorted(keys.unique().tolist())
    t, v = _reading_points(requests)
    if len(t) < 3 or not groups:
        return {}, stats
    end = (requests["wall_time"].to_numpy(dtype=np.float64)
           + np.nan_to_num(requests["latency_ms"].to_numpy(dtype=np.float64)) / 1e3)
    gidx = pd.Categorical(keys, categories=groups).codes
    # requests ended up to each reading (a request ends at its own after-reading: counted)
    order = np.argsort(end, kind="stable")
    end_sorted, g_sorted = end[order], gidx[order]
    done = np.searchsorted(end_sorted, t, side="right")
    per_window = max(min_window, len(requests) // windows)
    cuts = [0]
    for k in range(1, len(t)):
        if done[k] - done[cuts[-1]] >= per_window:
            cuts.append(k)
    G = len(groups)
    if len(cuts) < 2 * G + 4:
        return {}, stats
    cuts_a = np.asarray(cuts)
    C = np.zeros((len(cuts_a) - 1, G))
    for w in range(len(cuts_a) - 1):
        lo, hi = done[cuts_a[w]], done[cuts_a[w + 1]]
        C[w] = np.bincount(g_sorted[lo:hi], minlength=G)
    y = np.diff(v[cuts_a])[1:]
    X = np.hstack([C[1:], C[:-1]])
    beta2, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = max(len(y) - np.linalg.matrix_rank(X), 1)
    s2 = float(((y - X @ beta2) ** 2).sum()) / dof
    L = np.hstack([np.eye(G), np.eye(G)])
    beta = L @ beta2
    cov = s2 * (L @ np.linalg.pinv(X.T @ X) @ L.T)
    se = np.sqrt(np.maximum(np.diag(cov), 0.0))
    rank_ = np.argsort(-beta, kind="stable")
    coef = {str(groups[i]): float(beta[i]) for i in rank_}
    stats.update(se={str(groups[i]): float(se[i]) for i in rank_}, windows=int(len(y)))
    top = rank_[0]
    if se[top] > 0:
        stats["t_top"] = float(beta[top] / se[top])
    var = float(cov[top, top])
    if G > 1:
        sec = rank_[1]
        var = float(cov[top, top] + cov[sec, sec] - 2 * cov[top, sec])
        if var > 0:
            stats["t_gap"] = float((beta[top] - beta[sec]) / math.sqrt(var))
    else:
        stats["t_gap"] = stats["t_top"]
    stats["se_gap"] = math.sqrt(var) if var > 0 else None
    return coef, stats


def retained_by_group(requests: pd.DataFrame, rate: float | None = None) -> tuple[str, dict[str, float], dict]:
    """Memory a request of each group keeps: ``(by, {group: bytes per request}, stats)``,
    largest first; ``by`` is ``"route"`` or ``"inputs"`` (:func:`group_keys`).

    By :func:`regress_retained` where the traffic tells the groups apart: the standard
    error of the gap between the top two groups is at most ``rate`` (the leak's bytes per
    request), so the fit could see one group keep it all. Where it cannot (a strictly
    alternating mix of routes gives every window the same counts), by the mean change of
    each group's own requests (:func:`own_changes_by_group`). ``stats`` is the
    regression's, with ``method`` (``"regression"`` or ``"own_changes"``) and ``counts``
    (requests per group).
    """
    by, keys = group_keys(requests)
    coef, stats = regress_retained(requests, keys)
    stats["counts"] = {str(g): int(n) for g, n in keys.value_counts().items()}
    if coef and stats["se_gap"] is not None and (rate is None or stats["se_gap"] <= abs(rate)):
        stats["method"] = "regression"
        return by, coef, stats
    stats["method"] = "own_changes"
    kept = own_changes_by_group(requests, keys)
    _own_change_stats(requests, keys, kept, stats)
    return by, kept, stats


def _culprit(kept: dict[str, float], stats: dict, growth: float, cfg: dict) -> str | None:
    """The group that keeps the memory: its bytes per request are ``culprit_t`` standard
    errors above zero and above the next group's (by regression, or by the spread of each
    group's own changes), it keeps ``culprit_ratio`` times what the next group keeps, and its requests account for
    ``culprit_share`` of the growth."""
    if len(kept) < 2:
        return None
    (top, v0), (_, v1) = list(kept.items())[:2]
    if not (stats["t_top"] is not None and stats["t_top"] >= cfg["culprit_t"]
            and stats["t_gap"] is not None and stats["t_gap"] >= cfg["culprit_t"]):
        return None
    if v0 > 0 and v0 >= cfg["culprit_ratio"] * max(v1, 0.0) and \
            v0 * stats["counts"].get(top, 0) >= cfg["culprit_share"] * growth:
        return top
    return None


def _capacity(capacity: pd.DataFrame | None, rank: int, gpu: bool) -> float | None:
    if capacity is None or not len(capacity):
        return None
    rows = capacity[capacity["rank"] == rank]
    if not len(rows):
        return None
    v = rows.iloc[0]["device_capacity_bytes" if gpu else "host_capacity_bytes"]
    return None if v is None or pd.isna(v) else float(v)


def detect_request_memory(requests: pd.DataFrame, capacity: pd.DataFrame | None = None,
                          config: dict | None = None) -> list[Finding]:
    """``request_memory_leak`` and ``memory_grows_with_input`` findings, per rank.

    Parameters
    ----------
    requests : DataFrame
        :meth:`Run.requests` (``request, rank, wall_time, input_numel, mem_after_bytes,
        mem_kind, ...``).
    capacity : DataFrame, optional
        :meth:`Run.memory_capacity`: the threshold's base (GPU total or host memory).
    """
    cfg = config_with_defaults(config)
    leak_cfg = {"warmup_frac": cfg["warmup_frac"], "min_warmup_steps": cfg["min_warmup_requests"],
                "min_steps": cfg["min_requests"], "windows": cfg["windows"],
                "min_growth_bytes": cfg["min_growth_bytes"], "min_growth_frac": cfg["min_growth_frac"],
                "noise_factor": cfg["noise_factor"], "late_ratio": cfg["late_ratio"]}
    out: list[Finding] = []
    for rank, g in requests.groupby("rank", sort=True):
        g = full = _ordered(g)
        mem = g["mem_after_bytes"].astype("float64")
        ok = mem.notna().to_numpy()
        if ok.sum() < cfg["min_requests"]:
            continue
        g = g[ok]
        mem_v = mem[ok].to_numpy()
        gpu = str(g["mem_kind"].iloc[-1]) == "cuda_allocated"
        share = cfg["gpu_threshold"] if gpu else cfg["host_threshold"]
        cap = _capacity(capacity, int(rank), gpu)
        limit = cap * share if cap else None
        res = detect_leak(g["n"].to_numpy(), mem_v, capacity=limit, config=leak_cfg)
        if res is None:
            continue
        post = g["n"].to_numpy() >= res["judged_from_step"]
        attr = attribute_growth(g["n"].to_numpy()[post], mem_v[post], g["input_numel"].to_numpy()[post])
        # every request after warm-up counts, read or not (memory is read on a timer)
        judged = full[full["n"].to_numpy() >= res["judged_from_step"]]
        by, kept, kstats = retained_by_group(judged, rate=res["bytes_per_step"])
        culprit = _culprit(kept, kstats, res["growth_bytes"], cfg)
        what = "GPU memory allocated" if gpu else "host RSS"
        where = "GPU" if gpu else "host"
        n_req = int(res["last_step"] - res["first_step"] + 1)
        ev = {"metric": "mem_after_bytes", "mem_kind": str(g["mem_kind"].iloc[-1]),
              "bytes_per_1000_requests": res["bytes_per_step"] * 1000, "growth_bytes": res["growth_bytes"],
              "start_request": res["start_step"], "judged_from_request": res["judged_from_step"],
              "requests": n_req, "level_bytes": res["level_bytes"], "noise_bytes": res["noise_bytes"],
              "threshold": share, "capacity_bytes": cap, "threshold_bytes": limit,
              "requests_to_threshold": res["steps_to_capacity"], **attr,
              "retained_by": by, "retained_bytes_per_request": kept,
              "retained_method": kstats["method"],
              "retained_se_bytes": kstats["se"], "retained_windows": kstats["windows"],
              "retained_t": kstats["t_top"], "retained_t_gap": kstats["t_gap"], "leaking_group": culprit}
        if attr["count_share"] >= cfg["count_share"]:
            msg = (f"Rank {rank}: {what} grows by {fmt_bytes(res['bytes_per_step'] * 1000)} per 1,000 "
                   f"requests from request {res['start_step']:,} (+{fmt_bytes(res['growth_bytes'])} "
                   f"over {n_req - res['judged_from_step']:,} requests after warm-up, on each window's "
                   f"minimum), with the request count, not the input size "
                   f"({attr['count_share']:.0%} of the rise)")
            if culprit is not None:
                others = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in list(kept.items())[1:4])
                what_group = f"requests to {culprit}" if by == "route" else f"requests with inputs {culprit}"
                if kstats["method"] == "regression":
                    msg += (f"; {what_group} keep {fmt_bytes(kept[culprit])} each "
                            f"(+-{fmt_bytes(kstats['se'][culprit])}; the others: {others}; a "
                            f"regression of the memory change over {kstats['windows']:,} windows on "
                            f"their requests per {'route' if by == 'route' else 'input names'})")
                else:
                    msg += (f"; {what_group} keep {fmt_bytes(kept[culprit])} each on average "
                            f"(the others: {others}; by each request's own change: the traffic's "
                            f"mix is too even to tell them apart by regression)")
            severity = "warning"
            if res["steps_to_capacity"] is not None:
                msg += (f"; at this rate it reaches the {share:.0%} {where} threshold "
                        f"({fmt_bytes(limit)}) in {res['steps_to_capacity']:,} more requests")
                if res["steps_to_capacity"] <= max(n_req, 1):
                    severity = "error"
            msg += (". Look for references kept across requests: outputs or inputs appended to a "
                    "cache or list, tensors kept with their graph (a forgotten torch.no_grad()).")
            out.append(Finding(kind="request_memory_leak", step=res["start_step"], rank=int(rank),
                               layer=None, severity=severity, message=msg, evidence=ev))
        else:
            msg = (f"Rank {rank}: {what} rose by {fmt_bytes(res['growth_bytes'])} with the largest "
                   f"input seen (up to {attr['largest_input_numel']:,} elements; "
                   f"{fmt_bytes(attr['bytes_per_input_element'])} per element), not with the request "
                   f"count ({attr['count_share']:.0%} of the rise): the allocator keeps the largest "
                   f"request's working set. Not a leak; bound the input size, or budget memory for "
                   f"the largest input allowed.")
            out.append(Finding(kind="memory_grows_with_input", step=res["start_step"], rank=int(rank),
                               layer=None, severity="info", message=msg, evidence=ev))
    return out


# ---------------------------------------------------------------------------- latency
def change_point(values, min_segment: int) -> tuple[int, float] | None:
    """The single split of ``values`` that most reduces the sum of absolute deviations
    from each side's median (a robust one-change-point fit): ``(index of the first value
    after the change, cost reduction)``, or None when the series is too short."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    if n < 2 * min_segment:
        return None
    total = float(np.abs(v - np.median(v)).sum())
    best, best_k = math.inf, None
    cands: list[int] = list(range(min_segment, n - min_segment + 1))
    if len(cands) > 400:  # a coarse grid, then refined around the best
        cands = [int(k) for k in np.unique(np.linspace(min_segment, n - min_segment, 400).astype(int))]
    for k in cands:
        a, b = v[:k], v[k:]
        cost = float(np.abs(a - np.median(a)).sum() + np.abs(b - np.median(b)).sum())
        if cost < best:
            best, best_k = cost, int(k)
    if best_k is None:
        return None
    step = max(1, n // 400)
    for k in range(max(min_segment, best_k - step), min(n - min_segment, best_k + step) + 1):
        a, b = v[:k], v[k:]
        cost = float(np.abs(a - np.median(a)).sum() + np.abs(b - np.median(b)).sum())
        if cost < best:
            best, best_k = cost, k
    return best_k, total - best


def _spearman(a, b) -> float | None:
    a = pd.Series(np.asarray(a, dtype=np.float64))
    b = pd.Series(np.asarray(b, dtype=np.float64))
    ok = a.notna() & b.notna()
    if ok.sum() < 10 or a[ok].nunique() < 2 or b[ok].nunique() < 2:
        return None
    r = a[ok].rank().corr(b[ok].rank())
    return None if pd.isna(r) else float(r)


def _pcts(v) -> dict:
    v = np.asarray(v, dtype=np.float64)
    return {f"p{q}_ms": float(np.percentile(v, q)) for q in (50, 95, 99)}


def detect_latency_regression(requests: pd.DataFrame, config: dict | None = None) -> list[Finding]:
    """``latency_regression`` findings: per rank and per route (the ``route`` column; the
    whole rank when the service named none), the change point of the successful requests'
    latency (:func:`change_point` on log latency) when the median after it is
    ``latency_ratio`` times the median before and the two sides barely overlap (the after
    side's 25th percentile above the before side's 75th); with Spearman correlations of
    latency with memory and input size, and both medians of input size.

    Routes are judged apart because their latencies differ by nature: a slow route mixed
    with a fast one hides its own slow-down under the fast one's median, and traffic that
    shifts from a fast route to a slow one looks like a change of the rank's latency when
    neither route changed.
    """
    cfg = config_with_defaults(config)
    out: list[Finding] = []
    for rank, g in requests.groupby("rank", sort=True):
        g = _ordered(g)
        g = g[(g["outcome"] == "ok") & g["latency_ms"].notna() & (g["latency_ms"] > 0)]
        parts: list[tuple[str | None, pd.DataFrame]]
        if g["route"].notna().any():
            parts = [(str(r), h) for r, h in g.groupby(g["route"].fillna("(no route)"), sort=True)]
        else:
            parts = [(None, g)]
        for route, h in parts:
            f = _latency_change(h, int(rank), route, cfg)
            if f is not None:
                out.append(f)
    return out


def _latency_change(g: pd.DataFrame, rank: int, route: str | None, cfg: dict) -> Finding | None:
    """The ``latency_regression`` of one rank's (one route's) successful requests, or None."""
    if len(g) < cfg["latency_min_requests"]:
        return None
    lat = g["latency_ms"].to_numpy(dtype=np.float64)
    seg = max(int(cfg["latency_min_segment"]), int(0.1 * len(lat)))
    cp = change_point(np.log(lat), seg)
    if cp is None:
        return None
    k = cp[0]
    before, after = lat[:k], lat[k:]
    m0, m1 = float(np.median(before)), float(np.median(after))
    if not (m1 >= cfg["latency_ratio"] * m0 and m1 - m0 >= cfg["latency_min_shift_ms"]
            and np.percentile(after, 25) > np.percentile(before, 75)):
        return None
    at = int(g["n"].iloc[k])
    rho_mem = _spearman(lat, g["mem_after_bytes"].astype("float64"))
    rho_in = _spearman(lat, g["input_numel"])
    numel = g["input_numel"].to_numpy(dtype=np.float64)
    in0, in1 = float(np.median(numel[:k])), float(np.median(numel[k:]))
    tracks = [name for name, r in (("memory", rho_mem), ("input size", rho_in))
              if r is not None and abs(r) >= cfg["correlation"]]
    who = f"Rank {rank}" + (f", route {route}" if route is not None else "")
    msg = (f"{who}: latency of successful requests rose from a median of {m0:.2f} ms to "
           f"{m1:.2f} ms ({m1 / m0:.1f}x; p99 {np.percentile(before, 99):.2f} -> "
           f"{np.percentile(after, 99):.2f} ms) at request {at:,}")
    if tracks:
        msg += "; it tracks " + " and ".join(
            f"{t} (Spearman {rho_mem if t == 'memory' else rho_in:+.2f})" for t in tracks)
        if "input size" in tracks and in1 > in0:
            msg += f" (median input {in0:,.0f} -> {in1:,.0f} elements: the traffic changed)"
    else:
        msg += "; neither memory nor input size tracks it (look at the host: load, throttling, a lock)"
    msg += "."
    return Finding(kind="latency_regression", step=at, rank=rank, layer=None,
                   severity="warning", message=msg, evidence={
                       "route": route, "change_request": at, "before": _pcts(before),
                       "after": _pcts(after), "ratio": m1 / m0, "requests_before": int(k),
                       "requests_after": int(len(lat) - k),
                       "spearman_memory": rho_mem, "spearman_input_size": rho_in,
                       "median_input_numel_before": in0, "median_input_numel_after": in1})


# ---------------------------------------------------------------------------- outcomes
def detect_failing_signatures(requests: pd.DataFrame, failures: list[dict] | None = None,
                              config: dict | None = None) -> list[Finding]:
    """``request_error`` and ``request_nonfinite`` findings: one per (input signature, error
    type) that failed, most frequent first, with its rate among that signature's requests,
    the first request, the capture ids and the captured error message."""
    cfg = config_with_defaults(config)
    msgs = {f["id"]: (f.get("message") or "").strip().splitlines()[:1] for f in failures or []}
    out: list[Finding] = []
    if not len(requests):
        return out
    per_sig = requests.groupby("signature", dropna=False).size()
    for outcome, kind in (("error", "request_error"), ("nonfinite", "request_nonfinite")):
        bad = requests[requests["outcome"] == outcome]
        if not len(bad):
            continue
        keys = bad["error_type"].fillna("")
        groups = sorted(bad.groupby([bad["signature"], keys], sort=False),
                        key=lambda kv: (-len(kv[1]), float(kv[1]["wall_time"].min())))
        for (sig, etype), g in groups[: int(cfg["max_signatures"])]:
            g = g.sort_values("wall_time", kind="stable")
            total = int(per_sig.get(sig, len(g)))
            ids = [str(x) for x in g["failure_id"].dropna().tolist()[: int(cfg["max_failure_ids"])]]
            first_msg = next((msgs[i][0] for i in ids if msgs.get(i)), None)
            what = etype or "non-finite output"
            msg = (f"{len(g):,} of {total:,} requests with input signature {sig or '(none)'} "
                   f"{'failed with ' + what if outcome == 'error' else 'returned NaN/Inf'} "
                   f"({len(g) / total:.1%})")
            if first_msg:
                msg += f": {first_msg}"
            msg += (f" (capture {ids[0]}; replay it with `debugkit replay`)." if ids
                    else " (none captured: over the capture budget).")
            first = g.iloc[0]
            out.append(Finding(kind=kind, step=int(first["request"]), rank=int(first["rank"]), layer=None,
                               severity="error", message=msg, evidence={
                                   "signature": sig, "error_type": etype or None, "outcome": outcome,
                                   "count": int(len(g)), "requests_with_signature": total,
                                   "rate": len(g) / total, "share_of_all": len(g) / len(requests),
                                   "failure": ids[0] if ids else None, "failure_ids": ids,
                                   "first_request": int(first["request"]), "message": first_msg}))
    return out


def detect_fallbacks(requests: pd.DataFrame, config: dict | None = None) -> list[Finding]:
    """``fallback_rate`` findings: one per fallback name, with its share of all requests,
    and the error types and input signatures most often behind it (a warning above
    ``fallback_warn_rate``, else info)."""
    cfg = config_with_defaults(config)
    out: list[Finding] = []
    fb = requests[requests["outcome"] == "fallback"]
    if not len(fb) or not len(requests):
        return out
    for name, g in sorted(fb.groupby(fb["fallback"].fillna("?")), key=lambda kv: -len(kv[1])):
        rate = len(g) / len(requests)
        etypes = g["error_type"].dropna().value_counts()
        sigs = g["signature"].value_counts()
        top_sig, top_n = str(sigs.index[0]), int(sigs.iloc[0])
        sig_total = int((requests["signature"] == top_sig).sum())
        msg = (f"Fallback {name!r} answered {len(g):,} of {len(requests):,} requests ({rate:.1%})")
        if len(etypes):
            msg += "; caused by " + ", ".join(f"{k} ({v:,})" for k, v in etypes.head(3).items())
        else:
            msg += "; no error was given as its cause (r.fallback(name, error=e) records one)"
        msg += (f"; most often for input signature {top_sig} ({top_n:,} of its {sig_total:,} "
                f"requests fell back).")
        out.append(Finding(kind="fallback_rate", step=int(g["request"].iloc[0]), rank=int(g["rank"].iloc[0]),
                           layer=None, severity="warning" if rate >= cfg["fallback_warn_rate"] else "info",
                           message=msg, evidence={
                               "fallback": name, "count": int(len(g)), "rate": rate,
                               "error_types": {str(k): int(v) for k, v in etypes.items()},
                               "top_signature": top_sig, "top_signature_rate": top_n / max(sig_total, 1)}))
    return out


def summarize_requests(requests: pd.DataFrame) -> dict:
    """Counts and latency percentiles of an inference run: ``requests``, ``by_outcome``
    (``{outcome: count}``), ``latency_ms`` (``p50, p95, p99`` of all requests, null when
    none), ``signatures`` (distinct input signatures), ``captured`` (rows with a capture)."""
    n = int(len(requests))
    lat = requests["latency_ms"].dropna().to_numpy(dtype=np.float64) if n else np.zeros(0)
    return {"requests": n,
            "by_outcome": {str(k): int(v) for k, v in requests["outcome"].value_counts().items()} if n else {},
            "latency_ms": ({f"p{q}": float(np.percentile(lat, q)) for q in (50, 95, 99)}
                           if len(lat) else None),
            "signatures": int(requests["signature"].nunique()) if n else 0,
            "captured": int(requests["failure_id"].notna().sum()) if n else 0}
