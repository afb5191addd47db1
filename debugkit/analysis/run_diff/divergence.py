"""Where two runs' curves part: the base's noise band per series and the first step the
run leaves it (see :mod:`debugkit.analysis.run_diff` for the band).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import format as fmt
from ..findings import Finding, sort_findings

#: Thresholds of :func:`compute_divergence` (override any through ``config``).
DEFAULTS: dict[str, Any] = {
    # Band half-width in robust standard deviations of the base's step-to-step noise.
    # 6 keeps two runs with different data orders (independent noise, so their
    # difference has sqrt(2) x the spread) inside the band ~all of the time.
    "band_sigmas": 6.0,
    # ... and never narrower than this fraction of the base's value (a bit-identical or
    # constant base has zero noise; float rounding of a re-run must not count).
    "rel_floor": 1e-6,
    # Outside the band at this many consecutive common logged steps (fewer when the
    # runs end sooner): one noisy point is not a divergence.
    "persist": 3,
    # The base needs this many logged points of a series to learn its noise.
    "min_points": 5,
    # Which scalars are losses: None means every key whose last '/'-part contains "loss".
    "loss_keys": None,
}


def _loss_keys(scalars, config: dict) -> list[str]:
    keys = config.get("loss_keys")
    present = sorted(set(scalars["key"])) if len(scalars) else []
    if keys is not None:
        return [k for k in keys if k in present]
    return [k for k in present if "loss" in k.rsplit("/", 1)[-1].lower()]


def _series_of(df, value_col: str, rank: int | None):
    """(steps, values) of one series, one value per step (the last one logged)."""
    if rank is not None and "rank" in df.columns:
        df = df[df["rank"] == rank]
    df = df.drop_duplicates("step", keep="last").sort_values("step")
    return df["step"].to_numpy(np.int64), df[value_col].to_numpy(np.float64)


def noise_sigma(values: np.ndarray) -> float | None:
    """Robust per-point noise of a series: 1.4826 x MAD of first differences / sqrt 2.

    Non-finite points are dropped first; None with fewer than 3 finite points.
    """
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size < 3:
        return None
    d = np.diff(v)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2.0))


def _transform(values: np.ndarray, log: bool) -> np.ndarray:
    if not log:
        return values
    # A zero norm becomes a very small one (log 1e-30); NaN and Inf stay non-finite.
    with np.errstate(invalid="ignore"):
        floor = np.where(np.isnan(values), np.nan, 1e-30)
        return np.log(np.where(values > 0, values, floor))


def compute_band(steps: np.ndarray, values: np.ndarray, *, log: bool,
                 config: dict | None = None):
    """The band learned from a base series: DataFrame ``step, value, lo, hi`` (in the
    series' own units) and the noise sigma (in compared units: log for ``log=True``).
    None when the base has fewer than ``min_points`` finite points."""
    import pandas as pd

    cfg = {**DEFAULTS, **(config or {})}
    x = _transform(np.asarray(values, np.float64), log)
    finite = np.isfinite(x)
    if finite.sum() < max(int(cfg["min_points"]), 3):
        return None, None
    sigma = noise_sigma(x)
    half = np.maximum(cfg["band_sigmas"] * sigma, cfg["rel_floor"] * np.abs(x))
    lo, hi = x - half, x + half
    if log:
        lo, hi = np.exp(lo), np.exp(hi)
    return pd.DataFrame({"step": steps, "value": values, "lo": lo, "hi": hi}), sigma


def series_band(base_frame, series: str, key: str, rank: int | None = None,
                config: dict | None = None):
    """The base's band for one series, to draw behind the curves: DataFrame ``step,
    value, lo, hi`` (see :func:`compute_band`), or None.

    ``series`` is ``loss`` (``base_frame`` a :meth:`Run.scalars` frame, ``key`` its key)
    or ``grad_norm`` (a :meth:`Run.grad_norms` frame, ``key`` a layer).
    """
    if not len(base_frame):
        return None
    if rank is None:
        rank = int(base_frame["rank"].min())
    if series == "loss":
        steps, values = _series_of(base_frame[base_frame["key"] == key], "value", rank)
    else:
        steps, values = _series_of(base_frame[base_frame["layer"] == key], "grad_norm", rank)
    band, _ = compute_band(steps, values, log=series != "loss", config=config)
    return band


def _first_divergence(steps_a, va, steps_b, vb, *, log: bool, cfg: dict):
    """(result dict) for one series: first step outside the base's band, sustained."""
    common, ia, ib = np.intersect1d(steps_a, steps_b, return_indices=True)
    out = {"common_steps": int(common.size), "step": None, "value_run": None,
           "value_base": None, "noise_sigma": None, "band_halfwidth": None, "excess": None}
    xb_all = _transform(vb, log)
    if np.isfinite(xb_all).sum() < max(int(cfg["min_points"]), 3) or common.size == 0:
        out["reason"] = "too few points to learn the base's noise"
        return out
    sigma = noise_sigma(xb_all)
    out["noise_sigma"] = sigma
    xa, xb = _transform(va[ia], log), xb_all[ib]
    half = np.maximum(cfg["band_sigmas"] * sigma, cfg["rel_floor"] * np.abs(np.nan_to_num(xb)))
    fa, fb = np.isfinite(xa), np.isfinite(xb)
    with np.errstate(invalid="ignore"):
        dist = np.abs(xa - xb)
    outside = np.where(fa & fb, dist > half, fa != fb)
    persist = max(int(cfg["persist"]), 1)
    for i in np.flatnonzero(outside):
        window = outside[i:i + persist]
        if window.all():  # sustained (or outside until the common steps end)
            out.update(step=int(common[i]), value_run=float(va[ia][i]), value_base=float(vb[ib][i]),
                       band_halfwidth=float(half[i]),
                       excess=float(dist[i] / half[i]) if fa[i] and fb[i] and half[i] > 0 else math.inf)
            break
    return out


def compute_divergence(scalars_run, grads_run, scalars_base, grads_base,
                       config: dict | None = None, layer_order: list[str] | None = None):
    """Where the run leaves the base's band: per loss key and per layer's gradient norm.

    Parameters
    ----------
    scalars_run, scalars_base : DataFrame
        :meth:`debugkit.Run.scalars` frames.
    grads_run, grads_base : DataFrame
        :meth:`debugkit.Run.grad_norms` frames.
    config : dict, optional
        Overrides of :data:`DEFAULTS`.
    layer_order : list of str, optional
        Model order of the layers (ties between layers diverging at the same step with
        the same excess go to the earlier one).

    Returns
    -------
    dict with ``rank`` (the rank compared: the lowest both have), ``series`` (DataFrame
    ``series`` (``loss`` | ``grad_norm``), ``key``, ``step`` (first divergent step or
    NA), ``value_run``, ``value_base``, ``band_halfwidth`` and ``noise_sigma`` (in
    compared units: log for gradient norms), ``excess`` (distance / band half-width at
    that step), ``common_steps``), ``step`` (the first divergent step over all series or
    None), ``first_layer`` (the layer whose gradient norm diverges first, or None),
    ``first_loss_step``, and ``status`` (``diverged`` | ``no divergence`` | ``unknown``
    when there are no common steps to compare).
    """
    import pandas as pd

    cfg = {**DEFAULTS, **(config or {})}
    ranks_a = set(scalars_run["rank"]) | set(grads_run["rank"])
    ranks_b = set(scalars_base["rank"]) | set(grads_base["rank"])
    common_ranks = sorted(int(r) for r in ranks_a & ranks_b)
    rank = common_ranks[0] if common_ranks else None
    rows = []
    if rank is not None:
        for key in _loss_keys(scalars_base, cfg):
            sa, sb = scalars_run[scalars_run["key"] == key], scalars_base[scalars_base["key"] == key]
            if not len(sa):
                continue
            res = _first_divergence(*_series_of(sa, "value", rank), *_series_of(sb, "value", rank),
                                    log=False, cfg=cfg)
            rows.append({"series": "loss", "key": key, **res})
        order = list(layer_order or [])
        layers_b = [str(x) for x in grads_base["layer"].unique()] if len(grads_base) else []
        layers_a = set(str(x) for x in grads_run["layer"].unique()) if len(grads_run) else set()
        for layer in layers_b:
            if layer not in layers_a:
                continue
            ga = grads_run[grads_run["layer"] == layer]
            gb = grads_base[grads_base["layer"] == layer]
            res = _first_divergence(*_series_of(ga, "grad_norm", rank),
                                    *_series_of(gb, "grad_norm", rank), log=True, cfg=cfg)
            rows.append({"series": "grad_norm", "key": layer, **res})
    cols = ["series", "key", "step", "value_run", "value_base", "band_halfwidth", "noise_sigma",
            "excess", "common_steps"]
    df = pd.DataFrame(rows, columns=cols)
    df["step"] = df["step"].astype("Int64")
    compared = df[df["common_steps"] > 0] if len(df) else df
    hit = compared[compared["step"].notna()] if len(compared) else compared
    out = {"rank": rank, "series": df, "step": None, "first_layer": None, "first_loss_step": None,
           "status": "unknown" if not len(compared) else "no divergence"}
    if len(hit):
        out["status"] = "diverged"
        out["step"] = int(hit["step"].min())
        losses = hit[hit["series"] == "loss"]
        if len(losses):
            out["first_loss_step"] = int(losses["step"].min())
        layers = hit[(hit["series"] == "grad_norm") & (hit["key"] != fmt.TOTAL_LAYER)]
        if len(layers):
            pos = {n: i for i, n in enumerate(order)}
            best = sorted(layers.itertuples(index=False),
                          key=lambda r: (int(r.step), -float(r.excess), pos.get(r.key, len(pos)), r.key))
            out["first_layer"] = best[0].key
            out["first_layer_step"] = int(best[0].step)
    return out


def divergence_finding(div: dict, following: Finding | dict | None = None) -> Finding | None:
    """The divergence as a Finding (kind ``runs_diverge``), or None without one."""
    if div.get("status") != "diverged":
        return None
    parts = [f"the run leaves the base run's band at step {div['step']}"]
    if div.get("first_layer"):
        parts.append(f"the first layer to diverge is {div['first_layer']!r} "
                     f"(step {div['first_layer_step']})")
    if div.get("first_loss_step") is not None:
        parts.append(f"the loss diverges at step {div['first_loss_step']}")
    msg = "; ".join(parts).capitalize() + "."
    follow = following.to_dict() if isinstance(following, Finding) else following
    if follow:
        msg += f" Then: {follow.get('kind')} at step {follow.get('step')}."
    return Finding(kind="runs_diverge", step=div["step"], rank=div.get("rank"),
                   layer=div.get("first_layer"), severity="warning", message=msg,
                   evidence={"first_loss_step": div.get("first_loss_step"),
                             "first_layer_step": div.get("first_layer_step"),
                             "following": follow})


def following_event(step: int | None, failures: list[dict], findings: list[Finding]):
    """The failure capture, else the finding, of the run at or after ``step`` (the first
    one): what the divergence led to. A dict ``kind, step, rank, layer, message, source``."""
    if step is None:
        return None
    fails = [f for f in failures if isinstance(f.get("step"), int) and f["step"] >= step]
    if fails:
        f = min(fails, key=lambda f: (f["step"], f.get("rank") or 0))
        return {"source": "failure", "id": f.get("id"), "kind": f.get("kind"), "step": f["step"],
                "rank": f.get("rank"), "layer": None,
                "message": f.get("message") or f.get("error_type")}
    later = [f for f in sort_findings(findings) if f.step is not None and f.step >= step]
    if later:
        f = later[0]
        return {"source": "finding", "kind": f.kind, "step": f.step, "rank": f.rank,
                "layer": f.layer, "message": f.message}
    return None
