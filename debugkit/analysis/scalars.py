"""Logged scalars: TensorBoard-style smoothing, and what the learning rate did.

Pure functions on :meth:`debugkit.Run.scalars` frames (``step, rank, key, value,
wall_time``).
"""

from __future__ import annotations

import math

import numpy as np

#: Keys the Recorder writes for the optimizer's learning rate (one group: ``lr``;
#: several: ``lr/0``, ``lr/1``, ...).
LR_KEYS = ("lr",)
#: A learning rate that changed by less than this factor is reported as unchanged.
LR_CHANGE_MIN = 1.5


def is_lr_key(key: str) -> bool:
    """Whether ``key`` is a learning rate the Recorder logged (``lr`` or ``lr/<group>``)."""
    return key in LR_KEYS or (key.startswith("lr/") and key[3:].isdigit())


def smooth_ema(values, weight: float) -> np.ndarray:
    """TensorBoard's scalar smoothing: an exponential moving average with debiasing.

    ``s_t = weight * s_{t-1} + (1 - weight) * v_t``, started from 0 and divided by
    ``1 - weight ** n`` (``n``: finite points so far), so the first points are not
    pulled toward zero. Non-finite values are passed through unchanged and do not enter
    the average (TensorBoard does the same).

    Parameters
    ----------
    values : array-like of float
        The series, in step order.
    weight : float
        In ``[0, 1)``; 0 returns the values unchanged.

    Returns
    -------
    numpy.ndarray of float64, the same length as ``values``.
    """
    v = np.asarray(values, dtype=np.float64)
    if not 0 <= weight < 1:
        raise ValueError(f"smoothing weight {weight!r}: expected a number in [0, 1)")
    if weight == 0 or not len(v):
        return v.copy()
    out = np.empty_like(v)
    last, n = 0.0, 0
    for i, x in enumerate(v):
        if not math.isfinite(x):
            out[i] = x
            continue
        last = last * weight + (1 - weight) * x
        n += 1
        out[i] = last / (1 - weight ** n)
    return out


def smooth_scalars(scalars, weight: float, *, unsmoothed=is_lr_key):
    """``scalars`` with a ``smoothed`` column: :func:`smooth_ema` per (key, rank), in step
    order.

    Parameters
    ----------
    unsmoothed : callable(str) -> bool
        Keys whose ``smoothed`` column is the raw value. By default the learning rate:
        it is a setting, not a noisy measurement, and an average of a step schedule
        draws values it never had (a jump to 1.0 drawn as 0.8056).

    Returns
    -------
    DataFrame with the columns of ``scalars`` plus ``smoothed`` (float64), sorted by
    ``key, rank, step``.
    """
    df = scalars.sort_values(["key", "rank", "step"], kind="stable").reset_index(drop=True)
    sm = np.empty(len(df), dtype=np.float64)
    values = df["value"].to_numpy(dtype=np.float64)
    for (key, _rank), idx in df.groupby(["key", "rank"], sort=False, observed=True).indices.items():
        sm[idx] = values[idx] if unsmoothed(str(key)) else smooth_ema(values[idx], weight)
    df["smoothed"] = sm
    return df


#: Positive values spanning at least this factor are easier to read on a log axis (an
#: exploding loss: 2.3 for 90 steps, then 2e9, is a flat line and a wall on a linear one).
LOG_SCALE_SPAN = 1e3


def suggest_log_scale(scalars, keys) -> bool:
    """Whether the series ``keys`` of ``scalars`` (``key, value``) want a log y axis by
    default: their finite values are all positive and span :data:`LOG_SCALE_SPAN` or more.
    """
    v = scalars.loc[scalars["key"].isin(list(keys)), "value"].to_numpy(dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v) or (v <= 0).any():
        return False
    return float(v.max()) / float(v.min()) >= LOG_SCALE_SPAN


def format_value(x) -> str:
    """A scalar as a table shows it: ``NaN``, ``inf`` and ``-inf`` spelled out (a table of
    floats would show a missing value), others with 6 significant digits."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.6g}"


def last_values(smoothed, keys):
    """The last logged value of each series, for a table.

    Returns
    -------
    DataFrame ``key, rank, last step, last value, last smoothed``; the two value
    columns are text (:func:`format_value`), so NaN reads ``NaN``.
    """
    df = smoothed[smoothed["key"].isin(list(keys))].sort_values("step", kind="stable")
    last = df.groupby(["key", "rank"], observed=True).tail(1)
    out = last[["key", "rank", "step"]].rename(columns={"step": "last step"}).reset_index(drop=True)
    out["last value"] = [format_value(v) for v in last["value"]]
    out["last smoothed"] = [format_value(v) for v in last["smoothed"]]
    return out


def describe_lr_before(scalars, step: int, rank: int | None = None) -> dict | None:
    """What the learning rate did from the first logged step up to ``step``.

    Returns
    -------
    dict or None
        ``key``, ``first_step``, ``first``, ``at_step`` (the last logged step <= ``step``),
        ``at``, ``ratio`` (``at / first``), ``max`` and ``text``: "lr grew 17x since step
        0, from 0.1 to 1.7", "lr fell ...", or "lr was 0.1 throughout". None when no learning
        rate was logged up to ``step``. With several parameter groups, the one that
        changed most is described.
    """
    df = scalars[scalars["key"].map(is_lr_key)]
    if rank is not None and "rank" in df and (df["rank"] == rank).any():
        df = df[df["rank"] == rank]
    df = df[df["step"] <= step]
    best = None
    for key, g in df.groupby("key", sort=True, observed=True):
        g = g[np.isfinite(g["value"].to_numpy(dtype=np.float64))].sort_values("step")
        if g.empty:
            continue
        first, at = float(g["value"].iloc[0]), float(g["value"].iloc[-1])
        ratio = at / first if first > 0 else (math.inf if at > 0 else 1.0)
        change = max(ratio, 1 / ratio) if ratio > 0 else math.inf
        if best is None or change > best[0]:
            best = (change, key, g, first, at, ratio)
    if best is None:
        return None
    _, key, g, first, at, ratio = best
    s0, s1 = int(g["step"].iloc[0]), int(g["step"].iloc[-1])
    if ratio >= LR_CHANGE_MIN:
        text = f"{key} grew {_x(ratio)}x since step {s0}, from {first:.3g} to {at:.3g}"
    elif ratio > 0 and 1 / ratio >= LR_CHANGE_MIN:
        text = f"{key} fell {_x(1 / ratio)}x since step {s0}, from {first:.3g} to {at:.3g}"
    elif float(g["value"].max()) == float(g["value"].min()):
        text = f"{key} was {first:.3g} throughout (steps {s0}-{s1})"
    else:
        text = f"{key} stayed within {LR_CHANGE_MIN:g}x of {first:.3g} since step {s0} (now {at:.3g})"
    return {"key": key, "first_step": s0, "first": first, "at_step": s1, "at": at,
            "ratio": ratio, "max": float(g["value"].max()), "text": text}


def _x(r: float) -> str:
    return f"{r:.0f}" if r >= 10 else f"{r:.2g}"


#: Between a series' key and the run it comes from, when several runs share a chart.
RUN_SEP = " · "


def overlay_runs(main, others: dict, keys) -> tuple:
    """Several runs' series on one chart: ``main``'s ``keys`` as they are, each other
    run's as ``"<key> · <run>"``.

    Parameters
    ----------
    main : DataFrame
        The shown run's (smoothed) scalars.
    others : dict
        ``{run id: DataFrame}`` of the runs drawn over it, in order.
    keys : sequence of str

    Returns
    -------
    (DataFrame, list of str)
        The frames concatenated, and the keys to draw (the other runs' only where they
        logged that key).
    """
    import pandas as pd

    frames, out_keys = [main[main["key"].isin(list(keys))]], list(keys)
    for rid, df in others.items():
        part = df[df["key"].isin(list(keys))]
        if not len(part):
            continue
        part = part.assign(key=part["key"].astype(str) + RUN_SEP + str(rid))
        frames.append(part)
        out_keys += [f"{k}{RUN_SEP}{rid}" for k in keys if f"{k}{RUN_SEP}{rid}" in set(part["key"])]
    return pd.concat(frames, ignore_index=True), out_keys


def base_key(key: str) -> str:
    """The logged key of a series drawn by :func:`overlay_runs` (``"lr · run-b"`` -> ``"lr"``)."""
    return str(key).split(RUN_SEP, 1)[0]
