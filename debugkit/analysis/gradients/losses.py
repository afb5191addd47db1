"""Loss detectors: non-finite losses and loss spikes, over :meth:`Run.scalars` rows."""

from __future__ import annotations

import math

import numpy as np

from ..findings import Finding
from ._window import _fmt, _jsonable, _trailing_median
from .config import _check_columns, resolve_config


def loss_keys(scalars, chosen: list[str] | None = None) -> list[str]:
    """The scalar keys treated as losses: ``chosen`` (those present), or every key whose
    last ``/``-part contains "loss"."""
    keys = [str(k) for k in scalars["key"].unique()] if len(scalars) else []
    if chosen is not None:
        return [k for k in chosen if k in keys]
    return sorted(k for k in keys if "loss" in k.rsplit("/", 1)[-1].lower())


def _loss_series(scalars, keys) -> dict[tuple[int, str], tuple[np.ndarray, np.ndarray]]:
    """{(rank, key): (steps, values)} sorted by step, one value per step (the last)."""
    out = {}
    if not keys or not len(scalars):
        return out
    df = scalars[scalars["key"].isin(keys)]
    for (rank, key), g in df.groupby(["rank", "key"], sort=True, observed=True):
        g = g.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
        out[(int(rank), str(key))] = (g["step"].to_numpy(np.int64), g["value"].to_numpy(np.float64))
    return out


def detect_nonfinite_loss(scalars, config: dict | None = None) -> list[Finding]:
    """``nonfinite_loss``: the first step (per rank) whose loss is NaN or Inf.

    Parameters
    ----------
    scalars : DataFrame
        :meth:`Run.scalars` rows (``step``, ``rank``, ``key``, ``value``).
    """
    _check_columns(scalars, ["step", "rank", "key", "value"], "scalars", "scalars")
    cfg = resolve_config(config)
    by_rank: dict[int, list] = {}
    for (rank, key), (steps, values) in _loss_series(scalars, loss_keys(scalars, cfg["loss_keys"])).items():
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            by_rank.setdefault(rank, []).append((int(steps[i]), key, i, steps, values, bad))
    out = []
    for rank, hits in sorted(by_rank.items()):
        hits.sort()
        step, key, i, steps, values, bad = hits[0]
        prev = np.flatnonzero(~bad[:i])
        last = (int(steps[prev[-1]]), float(values[prev[-1]])) if len(prev) else (None, None)
        out.append(Finding(
            kind="nonfinite_loss", step=step, rank=rank, layer=None, severity="error",
            message=(f"Loss {key!r} became {values[i]} at step {step} on rank {rank}"
                     + (f" (it was {_fmt(last[1])} at step {last[0]})" if last[0] is not None else "")
                     + "; look at that step's gradients and batch, lower the learning rate or "
                       "clip gradients, and replay the captured step."),
            evidence={"key": key, "value": _jsonable(values[i]),
                      "keys": sorted({h[1] for h in hits if h[0] == step}),
                      "last_finite_step": last[0], "last_finite_value": last[1],
                      "nonfinite_steps": int(bad.sum())},
        ))
    return out


def detect_loss_spikes(scalars, config: dict | None = None) -> list[Finding]:
    """``loss_spike``: a loss above its trailing median by a robust multiple of the MAD.

    A step is a spike when ``loss - median > spike_mads * sigma`` and
    ``loss > median * (1 + spike_min_rise)``, over the previous ``spike_window`` finite
    values (at least ``spike_min_history``): ``median`` is their median and ``sigma`` the
    robust standard deviation of their noise, ``1.4826 * MAD(diff) / sqrt(2)`` (the
    median absolute step-to-step change, which a smooth downward trend does not inflate). Consecutive spike
    steps make one finding (its step is the first; evidence gives the peak).
    """
    _check_columns(scalars, ["step", "rank", "key", "value"], "scalars", "scalars")
    cfg = resolve_config(config)
    w, k, rise = cfg["spike_window"], cfg["spike_mads"], cfg["spike_min_rise"]
    out = []
    for (rank, key), (steps, values) in _loss_series(scalars, loss_keys(scalars, cfg["loss_keys"])).items():
        finite = np.isfinite(values)
        x, st = values[finite], steps[finite]
        if len(x) <= cfg["spike_min_history"]:
            continue
        med = _trailing_median(x, w, cfg["spike_min_history"])
        with np.errstate(invalid="ignore"):
            cand = np.flatnonzero(np.isfinite(med) & (x > med * (1 + rise)) & (x > med))
        if not len(cand):
            continue
        from numpy.lib.stride_tricks import sliding_window_view

        pad = np.concatenate([np.full(w, np.nan), x])
        win = sliding_window_view(pad, w)[cand]  # the w values before each candidate
        # The spread of the window's step-to-step changes: a smooth trend (a loss still
        # falling fast) does not inflate it the way the spread around the median would.
        mad = np.nanmedian(np.abs(np.diff(win, axis=1)), axis=1)
        scale = 1.4826 * mad / math.sqrt(2)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(scale > 0, (x[cand] - med[cand]) / scale, np.inf)
        hit = cand[z > k]
        zs = dict(zip(cand.tolist(), z.tolist()))
        if not len(hit):
            continue
        episodes = []
        start = prev = int(hit[0])
        for i in hit[1:].tolist() + [None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            idx = np.arange(start, prev + 1)
            peak = int(idx[np.argmax(x[idx])])
            after = np.flatnonzero(x[prev + 1:] <= med[start] * (1 + rise))
            episodes.append((start, prev, peak, int(st[prev + 1 + after[0]] - st[prev]) if len(after) else None))
            if i is not None:
                start = prev = i
        episodes.sort(key=lambda e: -zs[e[2]] if math.isfinite(zs[e[2]]) else -1e300)
        kept = sorted(episodes[:cfg["max_findings"]])
        for start, end, peak, recovered in kept:
            m0 = float(med[start])
            out.append(Finding(
                kind="loss_spike", step=int(st[start]), rank=rank, layer=None, severity="warning",
                # the finding's step (where the spike starts) is the step the message names first
                message=(f"Loss {key!r} spiked at step {st[start]} on rank {rank}"
                         + (f" ({end - start + 1} steps in a row, peaking at {_fmt(x[peak])} at step "
                            f"{st[peak]})" if end > start else f" to {_fmt(x[peak])}")
                         + f", {_fmt(x[peak] / m0)}x its recent median of {_fmt(m0)}"
                         + "; check that step's gradient norms and batch (an outlier or mislabelled "
                           "batch, or a learning rate too high for it)."),
                evidence={"key": key, "value": float(x[peak]), "peak_step": int(st[peak]),
                          "median": m0, "ratio": float(x[peak] / m0),
                          "robust_z": _jsonable(zs[peak]), "window": w,
                          "steps": int(end - start + 1), "recovered_after_steps": recovered,
                          "spikes_in_series": len(episodes)},
            ))
    return out


def _loss_lookup(scalars, cfg) -> dict[int, tuple[str, np.ndarray, np.ndarray]]:
    """{rank: (key, steps, values)} of the first loss key (sorted) of each rank."""
    out = {}
    for (rank, key), (steps, values) in _loss_series(scalars, loss_keys(scalars, cfg["loss_keys"])).items():
        out.setdefault(rank, (key, steps, values))
    return out
