"""Findings from the layer statistics (``Run.layer_stats()``): ``dead_units``,
``saturation``, ``activation_growth`` and ``update_ratio``.

Pure functions: the layer-statistics frame (and the run's scalars, for the learning rate)
in, findings out. docs/layers.md explains each finding and its thresholds; ``config``
keys and defaults are :data:`DEFAULTS`.
"""

from __future__ import annotations

import math

from .findings import Finding

DEFAULTS = {
    # dead_units: share of a ReLU-family module's units that are zero for the whole batch...
    "dead_frac": 0.9,
    # ...on at least this many consecutive sampled steps.
    "dead_samples": 3,
    # saturation: share of a bounded activation's outputs within 1 % of a bound...
    "saturated_frac": 0.5,
    # ...on at least this many consecutive sampled steps.
    "saturated_samples": 3,
    # activation_growth: max-abs this many times its start (along the forward pass, or of
    # one module over sampled steps)...
    "growth_factor": 1e3,
    # ...and at least this large in absolute terms.
    "growth_floor": 1e3,
    # update_ratio: median ||lr * update|| / ||w|| over the later half of the sampled steps.
    "update_high": 1e-1,
    "update_low": 1e-5,
}

SATURATING = ("Tanh", "Sigmoid", "Hardtanh", "Hardsigmoid", "Softsign")


def _runs_above(steps, values, threshold):
    """The longest run of consecutive samples with value > threshold: (first step, length,
    values in it)."""
    best, cur = (None, 0, []), (None, 0, [])
    for s, v in zip(steps, values):
        if v > threshold:
            cur = (cur[0] if cur[1] else s, cur[1] + 1, cur[2] + [v])
            if cur[1] > best[1]:
                best = cur
        else:
            cur = (None, 0, [])
    return best


def _series(out, module, stat):
    s = out[(out["module"] == module) & (out["stat"] == stat)].sort_values("step")
    return s["step"].tolist(), s["value"].tolist()


def _share_range(run) -> str:
    lo, hi = f"{min(run):.0%}", f"{max(run):.0%}"
    return lo if lo == hi else f"{lo}-{hi}"


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def detect_layer_findings(stats, scalars=None, config: dict | None = None) -> list[Finding]:
    """All layer-health findings of one run.

    Parameters
    ----------
    stats : DataFrame
        ``Run.layer_stats()`` (columns ``step, rank, order, module, module_type, stat,
        value``).
    scalars : DataFrame, optional
        ``Run.scalars()``; the learning rate (``lr`` or ``lr/<group>``) named by
        ``update_ratio``.
    config : dict, optional
        Thresholds overriding :data:`DEFAULTS`.
    """
    cfg = {**DEFAULTS, **(config or {})}
    if stats is None or not len(stats):
        return []
    out: list[Finding] = []
    for rank in sorted(stats["rank"].unique()):
        df = stats[stats["rank"] == rank]
        r = int(rank)
        out += _dead_units(df, r, cfg)
        out += _saturation(df, r, cfg)
        out += _activation_growth(df, r, cfg)
        nd = df[df["stat"] == "ndim"].groupby("module")["value"].max().to_dict()
        out += _update_ratio(df, r, cfg, scalars, nd)
    return out


def _module_order(df):
    mods = df[df["module_type"] != "param"].groupby("module", sort=False)["order"].min()
    return list(mods.sort_values().index)


def _dead_units(df, rank, cfg):
    found = []
    sub = df[df["stat"] == "frac_dead_units"]
    for module in _module_order(sub):
        steps, vals = _series(sub, module, "frac_dead_units")
        first, n, run = _runs_above(steps, vals, cfg["dead_frac"])
        if n < cfg["dead_samples"]:
            continue
        cls = sub[sub["module"] == module]["module_type"].iloc[0]
        found.append(Finding(
            kind="dead_units", step=int(first), rank=rank, layer=module, severity="warning",
            message=(f"{module} ({cls}): {_share_range(run)} of its units output zero "
                     f"for every sample of the batch on {n} sampled steps in a row from step "
                     f"{first}: dead units pass no gradient and stop learning. Check the "
                     "initialisation (Kaiming for ReLU) and the learning rate, or use a "
                     "LeakyReLU/GELU."),
            evidence={"module_type": cls, "frac_dead_units": [round(v, 4) for v in run],
                      "samples": n, "threshold": cfg["dead_frac"]}))
    return found


def _params_of(df, module):
    names = df[(df["module_type"] == "param") & df["module"].str.startswith(module + ".")]
    return list(dict.fromkeys(names["module"]))


def _grad_scale(df, param, step):
    g = df[(df["module"] == param) & (df["step"] == step) & df["stat"].isin(["g_q05", "g_q95"])]
    return float(g["value"].abs().max()) if len(g) else None


def _saturation(df, rank, cfg):
    found = []
    sub = df[df["stat"] == "frac_saturated"]
    order = _module_order(df)
    for module in _module_order(sub):
        cls = sub[sub["module"] == module]["module_type"].iloc[0]
        if cls not in SATURATING or module == order[-1]:
            continue  # the model's own output layer at its bounds is a confident prediction
        steps, vals = _series(sub, module, "frac_saturated")
        first, n, run = _runs_above(steps, vals, cfg["saturated_frac"])
        if n < cfg["saturated_samples"]:
            continue
        # The parameters that feed the activation: those of the module just before it.
        before = order[:order.index(module)]
        feed = next((p for m in reversed(before) for p in _params_of(df, m)), None)
        ev = {"module_type": cls, "frac_saturated": [round(v, 4) for v in run], "samples": n,
              "threshold": cfg["saturated_frac"]}
        extra = ""
        if feed is not None:
            last = steps[steps.index(first) + n - 1]
            g0, g1 = _grad_scale(df, feed, steps[0]), _grad_scale(df, feed, last)
            ev.update(feeding_param=feed, grad_scale_first=g0, grad_scale_saturated=g1)
            if g0 is not None and g1 is not None:
                extra = (f" The gradient reaching {feed} is {_fmt(g1)} (5-95 % quantile scale) "
                         f"where it was {_fmt(g0)} at step {steps[0]}.")
        found.append(Finding(
            kind="saturation", step=int(first), rank=rank, layer=module, severity="warning",
            message=(f"{module} ({cls}): {_share_range(run)} of its outputs sit at the "
                     f"bounds on {n} sampled steps in a row from step {first}; saturated units "
                     f"have a near-zero derivative, so little gradient flows back.{extra} Scale "
                     "the inputs or the initialisation down, add normalisation before it, or "
                     "lower the learning rate."),
            evidence=ev))
    return found


def _activation_growth(df, rank, cfg):
    out = df[(df["module_type"] != "param") & (df["stat"] == "max_abs")]
    if not len(out):
        return []
    nonfin = df[(df["stat"] == "frac_nonfinite") & (df["value"] > 0)]
    first_bad = int(nonfin["step"].min()) if len(nonfin) else None
    first_bad_module = (nonfin[nonfin["step"] == first_bad].sort_values("order")["module"].iloc[0]
                        if first_bad is not None else None)
    f, floor = cfg["growth_factor"], cfg["growth_floor"]
    cands = []
    # Along the forward pass, at each sampled step (the earliest one that shows it).
    for step, g in out.sort_values(["step", "order"]).groupby("step", sort=True):
        v = [x for x in g["value"].tolist()]
        mods = g["module"].tolist()
        fin = [x if math.isfinite(x) else math.inf for x in v]
        peak = max(range(len(fin)), key=lambda i: fin[i])
        start = min(range(peak + 1), key=lambda i: fin[i])
        if fin[start] > 0 and fin[peak] >= floor and fin[peak] / fin[start] >= f:
            first = next(i for i in range(start + 1, peak + 1) if fin[i] > 2 * fin[start])
            chain = [(mods[i], round(v[i], 4)) for i in range(start, peak + 1)]
            cands.append(_growth_finding(rank, int(step), mods[first], "depth", chain, first_bad,
                                         first_bad_module, fin[peak] / fin[start]))
            break
    # Over sampled steps, per module (the first module in forward order that shows it).
    for module in _module_order(out):
        steps, vals = _series(out, module, "max_abs")
        fin = [x for x in vals if math.isfinite(x)]
        if len(fin) < 3 or fin[0] <= 0:
            continue
        peak = max(fin)
        ups = sum(b > a for a, b in zip(fin, fin[1:]))
        if peak >= floor and peak / fin[0] >= f and ups >= 0.75 * (len(fin) - 1):
            at = next(s for s, x in zip(steps, vals) if not math.isfinite(x) or x >= 10 * fin[0])
            chain = [(int(s), round(x, 4)) for s, x in zip(steps, vals)][:50]
            cands.append(_growth_finding(rank, int(at), module, "steps", chain, first_bad,
                                         first_bad_module, peak / fin[0]))
            break
    # One finding: the way that shows the growth first (along the pass on a tie).
    return [min(cands, key=lambda f: f.step)] if cands else []


def _growth_finding(rank, step, module, along, chain, first_bad, bad_module, factor):
    where = ("along the forward pass (module, max |output|): starting at " + module
             if along == "depth" else "over the sampled steps (step, max |output|)")
    tail = (f" The first non-finite output follows at step {first_bad} in {bad_module}."
            if first_bad is not None else "")
    return Finding(
        kind="activation_growth", step=step, rank=rank, layer=module, severity="warning",
        message=(f"Activations grow geometrically {where}: max |output| rose {factor:.3g}x, "
                 f"first in {module} at step {step}.{tail} Check that module's initialisation "
                 "and scale, add normalisation or residual scaling, or lower the learning rate."),
        evidence={"along": along, "chain": chain, "factor": factor,
                  "first_nonfinite_step": first_bad, "first_nonfinite_module": bad_module})


def _lr_at(scalars, step):
    if scalars is None or not len(scalars):
        return None
    lr = scalars[(scalars["key"] == "lr") | scalars["key"].str.startswith("lr/")]
    lr = lr[lr["step"] <= step]
    return float(lr.sort_values("step")["value"].iloc[-1]) if len(lr) else None


def _is_matrix(param: str, ndims: dict) -> bool:
    """Whether ``param`` is a weight matrix or kernel (biases and normalisation gains start
    at 0 or 1 and have ratios of their own; they are not judged)."""
    if param in ndims:
        return ndims[param] >= 2
    leaf = param.rsplit(".", 1)[-1]
    return leaf not in ("bias", "beta", "gamma") and not leaf.endswith("_bias")


def _update_ratio(df, rank, cfg, scalars, ndims=None):
    sub = df[df["stat"] == "update_ratio"]
    if not len(sub):
        return []
    grads = df[df["stat"].str.startswith("g_q")]
    trained = {(m, s) for (m, s), g in grads.groupby(["module", "step"]) if (g["value"] != 0).any()}
    found = []
    dims = {} if ndims is None else ndims
    for param in list(dict.fromkeys(sub.sort_values("order")["module"])):
        if not _is_matrix(param, dims):
            continue
        steps, vals = _series(sub, param, "update_ratio")
        pairs = [(s, v) for s, v in zip(steps, vals) if (param, s) in trained and v > 0
                 and math.isfinite(v)]
        pairs = pairs[len(pairs) // 2:]  # the later half: past any warmup
        if len(pairs) < 2:
            continue
        ratios = sorted(v for _, v in pairs)
        med = ratios[len(ratios) // 2]
        if cfg["update_low"] <= med <= cfg["update_high"]:
            continue
        high = med > cfg["update_high"]
        step = next(s for s, v in pairs if (v > cfg["update_high"] if high else v < cfg["update_low"]))
        lr = _lr_at(scalars, step)
        lr_txt = f" at learning rate {lr:.3g}" if lr is not None else ""
        advice = ("the update rewrites a large part of the weight each step: lower the learning "
                  "rate or clip, or check the weight is not near zero" if high else
                  "the weight barely moves: raise the learning rate (or check the scheduler, "
                  "the weight decay, or that this parameter is meant to train)")
        found.append(Finding(
            kind="update_ratio", step=int(step), rank=rank, layer=param, severity="warning",
            message=(f"{param}: update-to-weight ratio ||lr*update||/||w|| is {_fmt(med)} "
                     f"(median of the later {len(pairs)} sampled steps){lr_txt}, "
                     f"{'above' if high else 'below'} the usual band "
                     f"{_fmt(cfg['update_low'])}-{_fmt(cfg['update_high'])}: {advice}."),
            evidence={"median_ratio": med, "ratios": [(int(s), v) for s, v in pairs][:50],
                      "lr": lr, "band": [cfg["update_low"], cfg["update_high"]]}))
    return found


# ------------------------------------------------------------------ for the charts
def layer_stat_matrix(stats, stat: str, rank: int = 0):
    """One statistic as a module x step matrix: ``(modules, steps, values)`` with modules
    in forward order (then parameters in model order), steps ascending and ``values`` a
    float array of shape (modules, steps), NaN where a module has no value at a step."""
    import numpy as np

    df = stats[(stats["rank"] == rank) & (stats["stat"] == stat)]
    if not len(df):
        return [], [], np.zeros((0, 0))
    order = df.groupby("module", sort=False)["order"].min().sort_values()
    wide = df.pivot_table(index="module", columns="step", values="value", aggfunc="first")
    wide = wide.reindex(list(order.index))
    return list(wide.index), [int(s) for s in wide.columns], wide.to_numpy(dtype=float)


def quantile_bands(stats, param: str, which: str = "w", rank: int = 0):
    """The quantiles of one parameter's weights (``which="w"``) or gradients (``"g"``) over
    the sampled steps: a DataFrame indexed by step with columns ``q01 ... q99``."""
    df = stats[(stats["rank"] == rank) & (stats["module"] == param)
               & stats["stat"].str.startswith(which + "_q")]
    wide = df.pivot_table(index="step", columns="stat", values="value", aggfunc="first")
    wide.columns = [c.split("_", 1)[1] for c in wide.columns]
    return wide.sort_index()[sorted(wide.columns)]
