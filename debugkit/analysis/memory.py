"""Memory over a run: leak, pressure and fragmentation detectors (pure functions).

Inputs are the run's memory table (:meth:`debugkit.Run.memory`) and capacities
(:meth:`debugkit.Run.memory_capacity`); outputs are :class:`Finding` lists or small
DataFrames. Thresholds live in :data:`DEFAULTS`; ``debugkit diagnose`` passes
``config["memory"]`` over them.

Leak detection, in brief (docs/memory.md has the reasoning):

1. Skip the warm-up (the first ``warmup_frac`` of the steps, at least
   ``min_warmup_steps``): optimizer state, the caching allocator and data loader
   workers take memory in the first steps and then stop.
2. Cut the rest into ``windows`` equal windows and keep each window's minimum: the
   floor under per-step sawtooths (activations freed at the end of each step,
   gradient accumulation, evaluation bursts).
3. Fit a Theil-Sen line (median of pairwise slopes, robust to outliers) through the
   minima. A leak must grow over the whole span *and* over its second half (at least
   ``late_ratio`` of the slope): a series that rises and then plateaus fails the second
   test. The growth must exceed ``min_growth_bytes``, ``min_growth_frac`` of the
   starting level and ``noise_factor`` times the residual scatter (MAD).
4. The start is the corner of the best hinge (flat, then the fitted slope) through
   all windows' minima; the run-out step extrapolates the fitted level to capacity.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from .findings import Finding

MiB = 1 << 20
GiB = 1 << 30

DEFAULTS = {
    "gpu_threshold": 0.80,            # warn above this share of GPU memory
    "host_threshold": 0.75,           # warn above this share of host memory
    "warmup_frac": 0.10,              # share of steps skipped as warm-up
    "min_warmup_steps": 5,
    "min_steps": 20,                  # steps needed after warm-up to judge a trend
    "windows": 20,                    # windows whose minima the slope is fitted to
    "min_growth_bytes": 32 * MiB,     # total growth over the judged span
    "min_growth_frac": 0.02,          # ... and as a share of the starting level
    "noise_factor": 3.0,              # ... and as a multiple of the scatter
    "late_ratio": 0.5,                # second-half slope / whole slope, to keep growing
    "fragmentation_share": 0.5,       # (reserved - used) / reserved
    "fragmentation_steps_share": 0.9, # ... on at least this share of the steps
    "fragmentation_min_reserved_frac": 0.25,  # only when reserved is this share of the GPU
    "fragmentation_min_reserved_bytes": 1 * GiB,  # (without a known capacity)
}

# metric -> (human name, capacity column)
METRICS = {
    "allocated_bytes": ("GPU memory allocated", "device_capacity_bytes"),
    "reserved_bytes": ("GPU memory reserved", "device_capacity_bytes"),
    "peak_bytes": ("GPU peak allocated", "device_capacity_bytes"),
    "rss_bytes": ("host RSS", "host_capacity_bytes"),
}

OOM_TYPES = ("OutOfMemoryError", "MemoryError")
_OOM_TEXT = re.compile(r"out of memory|not enough memory|can't allocate memory|"
                       r"cannot allocate memory|CUBLAS_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY",
                       re.IGNORECASE)


def config_with_defaults(config: dict | None) -> dict:
    """``DEFAULTS`` updated with ``config`` (unknown keys are refused)."""
    from ..errors import InvalidInputError

    cfg = dict(DEFAULTS)
    for k, v in (config or {}).items():
        if k not in DEFAULTS:
            raise InvalidInputError(f"memory config key {k!r}: expected one of {sorted(DEFAULTS)}")
        cfg[k] = v
    return cfg


def fmt_bytes(n: float | None) -> str:
    """``1.5 GiB``-style sizes (binary units)."""
    if n is None or not math.isfinite(n):
        return "?"
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} TiB"


# ---------------------------------------------------------------------------- statistics
def theil_sen(x, y) -> tuple[float, float]:
    """Theil-Sen line: the median of pairwise slopes and the median intercept.

    Returns ``(nan, nan)`` for fewer than two distinct x values.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    ok = dx != 0
    if not ok.any():
        return float("nan"), float("nan")
    slope = float(np.median((y[j] - y[i])[ok] / dx[ok]))
    intercept = float(np.median(y - slope * x))
    return slope, intercept


def window_minima(steps, values, windows: int) -> tuple[np.ndarray, np.ndarray]:
    """Split the series into ``windows`` contiguous, equal windows; each window's minimum
    and the step where it occurs (the first such step)."""
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    xs, ys = [], []
    for part in np.array_split(np.arange(len(values)), max(1, int(windows))):
        if len(part):
            k = part[int(np.argmin(values[part]))]
            xs.append(steps[k])
            ys.append(values[k])
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def _lower_envelope(steps, values, max_points: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    """The running minimum from the end (the floor the series never goes below again),
    at most ``max_points`` of it."""
    env = np.minimum.accumulate(np.asarray(values, dtype=np.float64)[::-1])[::-1]
    steps = np.asarray(steps, dtype=np.float64)
    if len(env) > max_points:
        keep = np.unique(np.linspace(0, len(env) - 1, max_points).astype(np.int64))
        return steps[keep], env[keep]
    return steps, env


def _hinge_start(x: np.ndarray, y: np.ndarray, slope: float) -> int:
    """Index of the corner of the best L1 hinge fit ``a + slope * max(0, x - x_k)``."""
    best, best_k = math.inf, 0
    scale = max(1.0, float(np.abs(y).max()))
    for k in range(len(x)):
        ramp = slope * np.maximum(0.0, x - x[k])
        a = float(np.median(y - ramp))
        cost = float(np.abs(y - a - ramp).sum())
        if cost < best - 1e-9 * scale:
            best, best_k = cost, k
    return best_k


# ---------------------------------------------------------------------------- leak
def detect_leak(steps, values, *, capacity: float | None = None, config: dict | None = None) -> dict | None:
    """Judge one series (one rank, one metric) for a leak.

    Parameters
    ----------
    steps, values : array-like
        The series (steps ascending or not; NaN values are dropped).
    capacity : float, optional
        Bytes available to this series (the device's or the host's), for the run-out step.
    config : dict, optional
        Overrides of :data:`DEFAULTS`.

    Returns
    -------
    dict or None
        None when there is no leak; else ``bytes_per_step``, ``start_step``,
        ``first_step``, ``last_step``, ``judged_from_step`` (after warm-up),
        ``growth_bytes`` (over the judged span), ``level_bytes`` (fitted level at the last
        step), ``late_bytes_per_step``, ``noise_bytes``, ``capacity_bytes``,
        ``steps_to_capacity`` and ``oom_step`` (None without a capacity).
    """
    cfg = config_with_defaults(config)
    s = pd.Series(np.asarray(values, dtype=np.float64), index=np.asarray(steps))
    s = s[np.isfinite(s.to_numpy())].sort_index(kind="stable")
    s = s[~s.index.duplicated(keep="last")]
    n = len(s)
    warm = max(int(cfg["min_warmup_steps"]), int(math.ceil(cfg["warmup_frac"] * n)))
    post = s.iloc[warm:]
    if len(post) < max(int(cfg["min_steps"]), 8):
        return None
    k = int(min(cfg["windows"], len(post) // 3))
    x, y = window_minima(post.index.to_numpy(), post.to_numpy(), k)
    slope, intercept = theil_sen(x, y)
    if not math.isfinite(slope) or slope <= 0:
        return None
    half = len(x) // 2
    late, _ = theil_sen(x[half:], y[half:])
    if not math.isfinite(late) or late < cfg["late_ratio"] * slope:
        return None
    span = float(x[-1] - x[0])
    growth = slope * span
    resid = y - (intercept + slope * x)
    noise = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    start_level = intercept + slope * x[0]
    if (growth < cfg["min_growth_bytes"] or growth < cfg["min_growth_frac"] * max(start_level, 1.0)
            or growth < cfg["noise_factor"] * noise):
        return None
    # Where it started: the corner of the best hinge through the series' lower envelope
    # (warm-up included); then the rate is refitted on the windows after the corner, so a
    # leak that starts late is reported at its own rate, and the corner found again.
    ex, ey = _lower_envelope(s.index.to_numpy(), s.to_numpy())
    start = float(ex[_hinge_start(ex, ey, slope)])
    for _ in range(2):
        sel = x >= start
        if sel.sum() < 4:
            break
        refit, intercept2 = theil_sen(x[sel], y[sel])
        if not math.isfinite(refit) or refit <= 0 or refit == slope:
            break
        slope, intercept = refit, intercept2
        start = float(ex[_hinge_start(ex, ey, slope)])
    start = int(start)
    last = int(s.index[-1])
    level = float(intercept + slope * last)
    steps_left = oom_step = None
    if capacity is not None and math.isfinite(capacity) and capacity > 0:
        remaining = capacity - level
        steps_left = 0 if remaining <= 0 else int(math.ceil(remaining / slope))
        oom_step = last + steps_left
    return {
        "bytes_per_step": slope,
        "start_step": start,
        "first_step": int(s.index[0]),
        "last_step": last,
        "judged_from_step": int(post.index[0]),
        "growth_bytes": growth,
        "level_bytes": level,
        "late_bytes_per_step": late,
        "noise_bytes": noise,
        "capacity_bytes": float(capacity) if capacity else None,
        "steps_to_capacity": steps_left,
        "oom_step": oom_step,
    }


def _capacities(capacity: pd.DataFrame | None) -> dict[int, dict]:
    """Each rank's first row of :meth:`Run.memory_capacity`, by rank: built once per
    detector, not a boolean scan of the frame per rank and metric (1,024 scans were
    0.8 s on a 256-rank run)."""
    if capacity is None or not len(capacity) or "rank" not in capacity:
        return {}
    first = capacity.drop_duplicates("rank", keep="first")
    return {int(row["rank"]): row for row in first.to_dict("records")}


def _capacity_of(caps: dict[int, dict], rank: int, column: str) -> float | None:
    v = caps.get(int(rank), {}).get(column)
    return None if v is None or pd.isna(v) else float(v)


def _where(metric: str) -> str:
    return "host" if metric == "rss_bytes" else "device"


def detect_memory_leaks(memory: pd.DataFrame, capacity: pd.DataFrame | None = None,
                        config: dict | None = None) -> list[Finding]:
    """``memory_leak`` findings: per rank, GPU allocated memory and host RSS.

    Parameters
    ----------
    memory : DataFrame
        :meth:`Run.memory` (``step, rank, allocated_bytes, rss_bytes, ...``).
    capacity : DataFrame, optional
        :meth:`Run.memory_capacity` (``rank, device_capacity_bytes, host_capacity_bytes``).
    """
    cfg = config_with_defaults(config)
    caps = _capacities(capacity)
    out = []
    for rank, g in memory.groupby("rank", sort=True):
        for metric in ("allocated_bytes", "rss_bytes"):
            vals = g[metric].astype("float64")
            if vals.notna().sum() == 0:
                continue
            name, cap_col = METRICS[metric]
            cap = _capacity_of(caps, int(rank), cap_col)
            res = detect_leak(g["step"].to_numpy(), vals.to_numpy(), capacity=cap, config=cfg)
            if res is None:
                continue
            span = res["last_step"] - res["judged_from_step"]
            msg = (f"Rank {rank}: {name} keeps growing by {fmt_bytes(res['bytes_per_step'])} per "
                   f"step from step {res['start_step']} (+{fmt_bytes(res['growth_bytes'])} over "
                   f"the {span} steps after warm-up, measured on each window's minimum)")
            severity = "warning"
            if res["oom_step"] is not None:
                msg += (f"; at this rate the {_where(metric)}'s {fmt_bytes(res['capacity_bytes'])} "
                        f"run out at step {res['oom_step']:,}")
                run_len = res["last_step"] - res["first_step"]
                if res["steps_to_capacity"] <= max(run_len, 1):
                    severity = "error"
            msg += ". Look for tensors kept across steps (a list of losses with their graphs, " \
                   "caches keyed by batch); a memory snapshot shows the allocation sites."
            out.append(Finding(kind="memory_leak", step=res["start_step"], rank=int(rank), layer=None,
                               severity=severity, message=msg, evidence={"metric": metric, **res}))
    return out


# ---------------------------------------------------------------------------- pressure
def detect_memory_pressure(memory: pd.DataFrame, capacity: pd.DataFrame | None = None,
                           config: dict | None = None) -> list[Finding]:
    """``memory_pressure`` findings: steps above the threshold bands.

    On CUDA the reserved bytes (what the caching allocator holds from the device) are
    compared with ``gpu_threshold`` of the device's memory; on every device the RSS with
    ``host_threshold`` of the host's (the smaller of physical memory and the cgroup limit).
    """
    cfg = config_with_defaults(config)
    caps = _capacities(capacity)
    out = []
    for rank, g in memory.groupby("rank", sort=True):
        g = g.sort_values("step")
        for metric, thr_key, cap_col in (("reserved_bytes", "gpu_threshold", "device_capacity_bytes"),
                                         ("rss_bytes", "host_threshold", "host_capacity_bytes")):
            vals = g[metric].astype("float64").to_numpy()
            if metric == "reserved_bytes" and not np.isfinite(vals).any():
                vals = g["allocated_bytes"].astype("float64").to_numpy()
            cap = _capacity_of(caps, int(rank), cap_col)
            if cap is None or not np.isfinite(vals).any():
                continue
            thr = float(cfg[thr_key])
            share = vals / cap
            above = np.flatnonzero(np.nan_to_num(share, nan=0.0) > thr)
            if not len(above):
                continue
            steps = g["step"].to_numpy()
            peak = int(np.nanargmax(share))
            name = METRICS[metric][0]
            severity = "error" if share[peak] >= 0.95 else "warning"
            msg = (f"Rank {rank}: {name} above {thr:.0%} of the {_where(metric)}'s "
                   f"{fmt_bytes(cap)} on {len(above)} of {len(steps)} steps (first at step "
                   f"{int(steps[above[0]])}; highest {share[peak]:.0%}, "
                   f"{fmt_bytes(vals[peak])}, at step {int(steps[peak])}). Less headroom means "
                   f"an out-of-memory error on the next larger batch or sequence.")
            out.append(Finding(kind="memory_pressure", step=int(steps[above[0]]), rank=int(rank),
                               layer=None, severity=severity, message=msg, evidence={
                                   "metric": metric, "threshold": thr, "capacity_bytes": cap,
                                   "steps_above": int(len(above)), "steps": int(len(steps)),
                                   "first_step": int(steps[above[0]]), "max_share": float(share[peak]),
                                   "max_bytes": float(vals[peak]), "max_step": int(steps[peak])}))
    return out


# ---------------------------------------------------------------------------- fragmentation
def detect_fragmentation(memory: pd.DataFrame, capacity: pd.DataFrame | None = None,
                         config: dict | None = None) -> list[Finding]:
    """``fragmentation`` findings: reserved memory that stays unused.

    The share is ``(reserved - used) / reserved`` after warm-up, where ``used`` is the
    allocator's peak allocated bytes (``peak_bytes``) when recorded, else the allocated
    bytes. The peak is used because memory measured at the end of a step leaves out the
    step's activations, which the cache rightly keeps for the next step; what is reserved
    beyond the highest demand is held by blocks split too small to reuse. A finding needs
    the share above ``fragmentation_share`` on ``fragmentation_steps_share`` of the
    steps, with reserved memory large enough to matter.
    """
    cfg = config_with_defaults(config)
    caps = _capacities(capacity)
    out = []
    for rank, g in memory.groupby("rank", sort=True):
        g = g.sort_values("step")
        res = g["reserved_bytes"].astype("float64").to_numpy()
        used_col = "peak_bytes" if g["peak_bytes"].notna().any() else "allocated_bytes"
        used = g[used_col].astype("float64").to_numpy()
        ok = np.isfinite(res) & np.isfinite(used) & (res > 0)
        if ok.sum() == 0:
            continue
        n = int(ok.sum())
        warm = max(int(cfg["min_warmup_steps"]), int(math.ceil(cfg["warmup_frac"] * n)))
        idx = np.flatnonzero(ok)[warm:]
        if len(idx) < 3:
            continue
        share = (res[idx] - used[idx]) / res[idx]
        cap = _capacity_of(caps, int(rank), "device_capacity_bytes")
        min_res = (cfg["fragmentation_min_reserved_frac"] * cap if cap
                   else cfg["fragmentation_min_reserved_bytes"])
        high = share >= cfg["fragmentation_share"]
        if high.mean() < cfg["fragmentation_steps_share"] or np.median(res[idx]) < min_res:
            continue
        steps = g["step"].to_numpy()[idx]
        med = float(np.median(share))
        wasted = float(np.median(res[idx] - used[idx]))
        msg = (f"Rank {rank}: {med:.0%} of the reserved GPU memory stays unused "
               f"(median {fmt_bytes(wasted)} of {fmt_bytes(float(np.median(res[idx])))} reserved, "
               f"above {cfg['fragmentation_share']:.0%} on {high.mean():.0%} of the steps after "
               f"warm-up). The caching allocator holds blocks it cannot reuse; try "
               f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or allocate the varying-size "
               f"tensors in fewer sizes.")
        out.append(Finding(kind="fragmentation", step=int(steps[0]), rank=int(rank), layer=None,
                           severity="warning", message=msg, evidence={
                               "median_unused_share": med, "median_unused_bytes": wasted,
                               "median_reserved_bytes": float(np.median(res[idx])),
                               "steps_share_above": float(high.mean()), "used": used_col,
                               "threshold": float(cfg["fragmentation_share"])}))
    return out


# ---------------------------------------------------------------------------- for charts
def compute_bands(capacity: pd.DataFrame | None, config: dict | None = None) -> pd.DataFrame:
    """Capacity lines and warning levels per rank.

    Returns
    -------
    DataFrame with columns ``rank``, ``kind`` (``device`` or ``host``),
    ``capacity_bytes``, ``warn_bytes``, ``threshold``; rows only where the capacity is known.
    """
    cfg = config_with_defaults(config)
    rows = []
    if capacity is not None:
        for _, r in capacity.iterrows():
            for kind, col, thr in (("device", "device_capacity_bytes", cfg["gpu_threshold"]),
                                   ("host", "host_capacity_bytes", cfg["host_threshold"])):
                v = r.get(col)
                if v is not None and not pd.isna(v):
                    rows.append({"rank": int(r["rank"]), "kind": kind, "capacity_bytes": float(v),
                                 "warn_bytes": float(v) * float(thr), "threshold": float(thr)})
    return pd.DataFrame(rows, columns=["rank", "kind", "capacity_bytes", "warn_bytes", "threshold"])


def is_oom_failure(record: dict) -> bool:
    """Whether a failure capture is an out-of-memory error (CUDA, CPU or Python)."""
    if record.get("error_type") in OOM_TYPES:
        return True
    return bool(_OOM_TEXT.search(str(record.get("message") or "")))


def oom_failures(failures: list[dict]) -> list[dict]:
    """The out-of-memory failure captures among a run's failures."""
    return [f for f in failures if f.get("kind") == "exception" and is_oom_failure(f)]
