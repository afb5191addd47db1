"""Group fairness metrics: fairlearn's point estimates and a vectorised bootstrap.

Point estimates come from :class:`fairlearn.metrics.MetricFrame` with fairlearn's metric
functions (``count``, ``selection_rate``, ``true_positive_rate``, ...) and its summary
metrics (``demographic_parity_difference`` ...), so the numbers are fairlearn's. The
bootstrap confidence intervals resample rows with replacement (as ``MetricFrame(n_boot=)``
does) but compute every replicate from per-group confusion counts in one vectorised
pass, which is hundreds of times faster than building a MetricFrame per replicate
(``bench/audit.py``); ``tests/audit/test_fairness.py`` checks that each replicate equals
MetricFrame on the same resampled rows.

Undefined rates: fairlearn's ``true_positive_rate`` of a group without actual positives
is 0 (and likewise FPR/FNR), and its summary metrics use those zeros. The group table
keeps fairlearn's value but records the rate as undefined in ``undefined``, and a
disparity ratio against an undefined or zero rate is undefined, never infinite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import MissingDependencyError

METRICS = ("count", "base_rate", "selection_rate", "tpr", "fpr", "fnr", "precision", "accuracy")
RATE_METRICS = METRICS[1:]
SUMMARY = ("demographic_parity_difference", "demographic_parity_ratio",
           "equalized_odds_difference", "equal_opportunity_difference")
# Which confusion counts make each rate's denominator (TN, FP, FN, TP order).
_DENOM = {"base_rate": "n", "selection_rate": "n", "tpr": "pos", "fpr": "neg", "fnr": "pos",
          "precision": "pred_pos", "accuracy": "n"}


def _fairlearn():
    try:
        import fairlearn.metrics as fm
    except ImportError as exc:
        raise MissingDependencyError("fairlearn", "The bias audit's fairness metrics") from exc
    return fm


def base_rate(y_true, y_pred) -> float:
    """Share of actual positives (a property of the data, not of the model)."""
    y_true = np.asarray(y_true)
    return float(np.mean(y_true == 1)) if len(y_true) else float("nan")


def _precision(y_true, y_pred) -> float:
    from sklearn.metrics import precision_score

    return float(precision_score(y_true, y_pred, zero_division=np.nan))


def metric_functions() -> dict:
    """The metric callables given to MetricFrame, by debugkit's metric name."""
    fm = _fairlearn()
    from sklearn.metrics import accuracy_score

    return {"count": fm.count, "base_rate": base_rate, "selection_rate": fm.selection_rate,
            "tpr": fm.true_positive_rate, "fpr": fm.false_positive_rate,
            "fnr": fm.false_negative_rate, "precision": _precision, "accuracy": accuracy_score}


def compute_group_metrics(y_true, y_pred, groups, order=None):
    """Per-group metrics with fairlearn's MetricFrame.

    Parameters
    ----------
    y_true, y_pred : array of 0/1
        Actual and predicted positive (favourable) outcome.
    groups : array of str
        Group label per row.
    order : list of str, optional
        Row order of the result (default: sorted labels).

    Returns
    -------
    DataFrame indexed by group with columns ``count`` (rows), ``base_rate`` (share of
    actual positives), ``selection_rate`` (share predicted positive), ``tpr``, ``fpr``,
    ``fnr``, ``precision`` (NaN without predicted positives) and ``accuracy``.
    """
    fm = _fairlearn()
    y_true = np.asarray(y_true, dtype=int)
    y_pred = np.asarray(y_pred, dtype=int)
    groups = np.asarray(groups, dtype=object)
    mf = fm.MetricFrame(metrics=metric_functions(), y_true=y_true, y_pred=y_pred,
                        sensitive_features=groups)
    df = mf.by_group
    df.index = [str(i) for i in df.index]
    df.index.name = "group"
    if order is not None:
        df = df.loc[[g for g in order if g in df.index]]
    df["count"] = df["count"].astype(int)
    return df[list(METRICS)].astype({m: float for m in RATE_METRICS})


def undefined_rates(y_true, y_pred, groups, order) -> dict[str, list[str]]:
    """``{group: [metric, ...]}`` of rates whose denominator is zero in that group."""
    c = confusion_by_group(y_true, y_pred, groups, order)
    out = {}
    for gi, g in enumerate(order):
        tn, fp, fn, tp = c[gi]
        dens = {"n": tn + fp + fn + tp, "pos": tp + fn, "neg": tn + fp, "pred_pos": tp + fp}
        bad = [m for m, d in _DENOM.items() if dens[d] == 0]
        if bad:
            out[g] = bad
    return out


def compute_summary(y_true, y_pred, groups) -> dict[str, float]:
    """fairlearn's demographic parity difference and ratio, equalized odds difference
    (worst case of the TPR and FPR differences) and equal opportunity difference (TPR),
    all between groups."""
    fm = _fairlearn()
    kw = {"y_true": np.asarray(y_true, dtype=int), "y_pred": np.asarray(y_pred, dtype=int),
          "sensitive_features": np.asarray(groups, dtype=object)}
    return {
        "demographic_parity_difference": float(fm.demographic_parity_difference(**kw)),
        "demographic_parity_ratio": float(fm.demographic_parity_ratio(**kw)),
        "equalized_odds_difference": float(fm.equalized_odds_difference(**kw)),
        "equal_opportunity_difference": float(fm.equal_opportunity_difference(**kw)),
    }


# ----------------------------------------------------------------------------- bootstrap
def confusion_by_group(y_true, y_pred, groups, order) -> np.ndarray:
    """``(len(order), 4)`` counts of TN, FP, FN, TP per group."""
    codes = _codes(groups, order)
    cell = codes * 4 + np.asarray(y_true, dtype=int) * 2 + np.asarray(y_pred, dtype=int)
    return np.bincount(cell, minlength=4 * len(order)).reshape(len(order), 4)


def _codes(groups, order) -> np.ndarray:
    index = {g: i for i, g in enumerate(order)}
    return np.fromiter((index[g] for g in np.asarray(groups, dtype=object)), dtype=np.int64,
                       count=len(groups))


def rates_from_counts(c: np.ndarray, *, fairlearn_zero: bool) -> dict[str, np.ndarray]:
    """Metrics from confusion counts ``[..., 4]`` (TN, FP, FN, TP).

    ``fairlearn_zero``: a rate with a zero denominator is 0, as fairlearn's
    ``true_positive_rate`` & co. return (used for the summary metrics); otherwise NaN.
    A group with no rows is NaN either way (it is absent from that resample).
    Precision is NaN without predicted positives in both modes.
    """
    tn, fp, fn, tp = (c[..., i].astype(float) for i in range(4))
    n = tn + fp + fn + tp
    pos, neg, pp = tp + fn, tn + fp, tp + fp
    fill = 0.0 if fairlearn_zero else np.nan

    def div(a, b, fill_value):
        with np.errstate(invalid="ignore", divide="ignore"):
            r = a / b
        r = np.where(b > 0, r, fill_value)
        return np.where(n > 0, r, np.nan)

    return {"count": n,
            "base_rate": div(pos, n, np.nan), "selection_rate": div(pp, n, np.nan),
            "tpr": div(tp, pos, fill), "fpr": div(fp, neg, fill), "fnr": div(fn, pos, fill),
            "precision": div(tp, pp, np.nan), "accuracy": div(tp + tn, n, np.nan)}


def summary_from_rates(r: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The four summary metrics over the last axis (groups), skipping absent groups."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sel = r["selection_rate"]
        smax, smin = np.nanmax(sel, axis=-1), np.nanmin(sel, axis=-1)
        tpr_d = np.nanmax(r["tpr"], axis=-1) - np.nanmin(r["tpr"], axis=-1)
        fpr_d = np.nanmax(r["fpr"], axis=-1) - np.nanmin(r["fpr"], axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(smax > 0, smin / smax, np.where(smax == 0, np.nan, np.nan))
    return {"demographic_parity_difference": smax - smin, "demographic_parity_ratio": ratio,
            "equalized_odds_difference": np.maximum(tpr_d, fpr_d),
            "equal_opportunity_difference": tpr_d}


@dataclass
class BootstrapResult:
    """Replicates of one attribute's metrics.

    Attributes
    ----------
    rates : dict of metric -> ndarray (n_boot, groups)
        Group metrics with undefined rates as NaN.
    summary : dict of name -> ndarray (n_boot,)
        The summary metrics of each replicate, over the groups whose rate is defined in
        that replicate (a group without actual negatives in a resample has no FPR, rather
        than fairlearn's 0, which would make every such resample look maximally unfair).
    """

    rates: dict[str, np.ndarray]
    summary: dict[str, np.ndarray]
    n_boot: int


def resample_indices(n: int, n_boot: int, seed: int, chunk: int | None = None):
    """Yield ``(b, n)`` arrays of row indices drawn with replacement, ``n_boot`` rows in all.

    The draws depend only on ``(n, n_boot, seed)`` (not on ``chunk``'s size), so a test can
    rebuild any replicate."""
    rng = np.random.default_rng(seed)
    chunk = chunk or max(1, min(n_boot, 4_000_000 // max(n, 1)))
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        yield rng.integers(0, n, size=(b, n))
        done += b


def bootstrap(y_true, y_pred, groups, order, *, n_boot: int, seed: int,
              progress=None) -> BootstrapResult:
    """Percentile-bootstrap replicates of every group metric and summary metric.

    Each replicate resamples all rows with replacement; per-group confusion counts are
    tallied with one ``bincount`` per chunk of replicates.
    """
    y_true = np.asarray(y_true, dtype=int)
    y_pred = np.asarray(y_pred, dtype=int)
    n, G = len(y_true), len(order)
    cell = _codes(groups, order) * 4 + y_true * 2 + y_pred
    parts = []
    done = 0
    for idx in resample_indices(n, n_boot, seed):
        b = idx.shape[0]
        flat = (cell[idx] + (np.arange(b)[:, None] * 4 * G)).ravel()
        parts.append(np.bincount(flat, minlength=b * 4 * G).reshape(b, G, 4))
        done += b
        if progress is not None:
            progress(done / max(n_boot, 1))
    counts = np.concatenate(parts) if parts else np.zeros((0, G, 4), dtype=np.int64)
    nan_rates = rates_from_counts(counts, fairlearn_zero=False)
    return BootstrapResult(rates=nan_rates, summary=summary_from_rates(nan_rates), n_boot=n_boot)


def percentile_ci(samples: np.ndarray, level: float, axis: int = 0, min_defined: float = 0.5):
    """``(low, high)`` percentile interval ignoring NaN replicates; NaN where fewer than
    ``min_defined`` of the replicates are defined."""
    import warnings

    a = (1 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo = np.nanquantile(samples, a, axis=axis)
        hi = np.nanquantile(samples, 1 - a, axis=axis)
    defined = np.mean(np.isfinite(samples), axis=axis) if samples.shape[axis] else np.zeros(np.shape(lo))
    lo = np.where(defined >= min_defined, lo, np.nan)
    hi = np.where(defined >= min_defined, hi, np.nan)
    return lo, hi


# ----------------------------------------------------------------------------- judgement
WITHIN = "within"
OUTSIDE = "outside"                   # outside the band, and so is the whole interval
OUTSIDE_UNCERTAIN = "outside_uncertain"  # outside the band, interval overlaps it
OUTSIDE_TOO_FEW = "outside_too_few"   # outside, but a denominator is below min_group_size
UNDEFINED = "undefined"
DENOMINATOR_NAMES = {"n": "rows", "pos": "actual positives", "neg": "actual negatives",
                     "pred_pos": "predicted positives"}


def support(conf_row) -> dict[str, int]:
    """``{"n", "pos", "neg", "pred_pos"}`` of one group's TN, FP, FN, TP counts."""
    tn, fp, fn, tp = (int(v) for v in conf_row)
    return {"n": tn + fp + fn + tp, "pos": tp + fn, "neg": tn + fp, "pred_pos": tp + fp}


def denominator(metric: str) -> str:
    return _DENOM[metric]


def summary_extremes(zero_rates: dict[str, np.ndarray], order: list[str]) -> dict[str, tuple]:
    """For each summary metric, ``(rate metric, group with the highest, group with the
    lowest)`` value in the point estimate (fairlearn's convention): the two groups the
    metric compares."""
    out = {}

    def ext(m):
        v = np.asarray(zero_rates[m], dtype=float)
        if not np.isfinite(v).any():
            return m, order[0], order[0], 0.0
        hi, lo = int(np.nanargmax(v)), int(np.nanargmin(v))
        return m, order[hi], order[lo], float(v[hi] - v[lo])

    sel = ext("selection_rate")
    out["demographic_parity_difference"] = sel[:3]
    out["demographic_parity_ratio"] = sel[:3]
    tpr, fpr = ext("tpr"), ext("fpr")
    out["equalized_odds_difference"] = (tpr if tpr[3] >= fpr[3] else fpr)[:3]
    out["equal_opportunity_difference"] = tpr[:3]
    return out


def cap_for_support(judgement: str, counts: list[int], minimum: int) -> str:
    """An ``outside`` judgement on fewer than ``minimum`` rows behind it becomes
    ``outside_too_few``: the bootstrap cannot show the uncertainty of a rate over a
    handful of rows (2 actual negatives give an FPR of 0, 0.5 or 1 and a degenerate
    interval), so such a disparity is for review, not a fail."""
    if judgement == OUTSIDE and min(counts) < minimum:
        return OUTSIDE_TOO_FEW
    return judgement


def judge_ratio(ratio: float, ci: tuple[float, float], band: tuple[float, float]) -> str:
    """Judge a disparity ratio against the band, with its confidence interval."""
    lo_b, hi_b = band
    if ratio is None or not math.isfinite(ratio):
        return UNDEFINED
    if lo_b <= ratio <= hi_b:
        return WITHIN
    lo, hi = ci
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi) and \
            (hi < lo_b or lo > hi_b):
        return OUTSIDE
    return OUTSIDE_UNCERTAIN


def judge_at_most(value: float, ci: tuple[float, float], limit: float) -> str:
    """Judge a difference that should not exceed ``limit``."""
    if value is None or not math.isfinite(value):
        return UNDEFINED
    if value <= limit:
        return WITHIN
    lo = ci[0]
    if lo is not None and math.isfinite(lo) and lo > limit:
        return OUTSIDE
    return OUTSIDE_UNCERTAIN


def judge_at_least(value: float, ci: tuple[float, float], limit: float) -> str:
    """Judge a ratio that should not fall below ``limit``."""
    if value is None or not math.isfinite(value):
        return UNDEFINED
    if value >= limit:
        return WITHIN
    hi = ci[1]
    if hi is not None and math.isfinite(hi) and hi < limit:
        return OUTSIDE
    return OUTSIDE_UNCERTAIN
