"""Group metrics are fairlearn's; the vectorised bootstrap equals MetricFrame replicate by
replicate; judgements of ratios and differences."""

from __future__ import annotations

import numpy as np
import pytest
from fairlearn.metrics import (
    MetricFrame,
    count,
    demographic_parity_difference,
    demographic_parity_ratio,
    equal_opportunity_difference,
    equalized_odds_difference,
    false_negative_rate,
    false_positive_rate,
    selection_rate,
    true_positive_rate,
)
from sklearn.metrics import accuracy_score, precision_score

from debugkit.audit import fairness as fx
from debugkit.audit.groups import resolve_sensitive


@pytest.fixture(scope="module")
def preds(credit):
    X, y = credit["X_test"], credit["y_test"]
    yt = (y == "good").to_numpy(dtype=int)
    yp = (credit["gbm"].predict(X) == "good").astype(int)
    attrs = resolve_sensitive(["age_in_years", "sex", "foreign_worker"], X, len(X), list(X.columns))
    return yt, yp, {a.name: a for a in attrs}


FL = {"count": count, "selection_rate": selection_rate, "tpr": true_positive_rate,
      "fpr": false_positive_rate, "fnr": false_negative_rate,
      "precision": lambda a, b: precision_score(a, b, zero_division=np.nan), "accuracy": accuracy_score}


@pytest.mark.parametrize("attr", ["age_in_years", "sex", "foreign_worker"])
def test_group_metrics_equal_metricframe(preds, attr):
    yt, yp, attrs = preds
    a = attrs[attr]
    ours = fx.compute_group_metrics(yt, yp, a.groups, a.order)
    mf = MetricFrame(metrics=FL, y_true=yt, y_pred=yp, sensitive_features=a.groups).by_group
    for g in a.order:
        for m in FL:
            assert ours.loc[g, m] == pytest.approx(float(mf.loc[g, m]), abs=1e-12), (g, m)
        assert ours.loc[g, "base_rate"] == pytest.approx(yt[a.groups == g].mean(), abs=1e-12)
    assert list(ours.index) == a.order


def test_exact_numbers_for_foreign_worker(preds):
    yt, yp, attrs = preds
    t = fx.compute_group_metrics(yt, yp, attrs["foreign_worker"].groups, ["no", "yes"])
    assert t.loc["no", "count"] == 17 and t.loc["yes", "count"] == 383
    assert t.loc["no", "base_rate"] == pytest.approx(15 / 17)
    assert t.loc["yes", "base_rate"] == pytest.approx(265 / 383)


@pytest.mark.parametrize("attr", ["age_in_years", "sex", "foreign_worker"])
def test_summary_equals_fairlearn(preds, attr):
    yt, yp, attrs = preds
    g = attrs[attr].groups
    s = fx.compute_summary(yt, yp, g)
    assert s["demographic_parity_difference"] == demographic_parity_difference(yt, yp, sensitive_features=g)
    assert s["demographic_parity_ratio"] == demographic_parity_ratio(yt, yp, sensitive_features=g)
    assert s["equalized_odds_difference"] == equalized_odds_difference(yt, yp, sensitive_features=g)
    assert s["equal_opportunity_difference"] == equal_opportunity_difference(yt, yp, sensitive_features=g)
    # and the same four from confusion counts (what the bootstrap uses)
    c = fx.confusion_by_group(yt, yp, g, attrs[attr].order)
    mine = fx.summary_from_rates(fx.rates_from_counts(c, fairlearn_zero=True))
    for k in fx.SUMMARY:
        assert float(mine[k]) == pytest.approx(s[k], abs=1e-12), k


def test_bootstrap_replicates_equal_metricframe_on_the_same_rows(preds):
    yt, yp, attrs = preds
    a = attrs["age_in_years"]
    boot = fx.bootstrap(yt, yp, a.groups, a.order, n_boot=40, seed=7)
    idx = np.concatenate(list(fx.resample_indices(len(yt), 40, 7)))
    for b in (0, 13, 39):
        rows = idx[b]
        mf = MetricFrame(metrics=FL, y_true=yt[rows], y_pred=yp[rows],
                         sensitive_features=a.groups[rows]).by_group
        for gi, g in enumerate(a.order):
            if g not in mf.index:
                assert boot.rates["count"][b, gi] == 0
                continue
            for m in ("count", "selection_rate", "precision", "accuracy"):
                assert boot.rates[m][b, gi] == pytest.approx(float(mf.loc[g, m]), abs=1e-12, nan_ok=True)
            pos = (yt[rows][a.groups[rows] == g] == 1).sum()
            if pos:
                assert boot.rates["tpr"][b, gi] == pytest.approx(float(mf.loc[g, "tpr"]), abs=1e-12)
            else:
                assert np.isnan(boot.rates["tpr"][b, gi]) and mf.loc[g, "tpr"] == 0  # fairlearn's 0
        dpd = demographic_parity_difference(yt[rows], yp[rows], sensitive_features=a.groups[rows])
        assert boot.summary["demographic_parity_difference"][b] == pytest.approx(dpd, abs=1e-12)


def test_bootstrap_draws_do_not_depend_on_chunking():
    a = np.concatenate(list(fx.resample_indices(50, 30, 3, chunk=7)))
    b = np.concatenate(list(fx.resample_indices(50, 30, 3, chunk=30)))
    assert np.array_equal(a, b)
    assert a.shape == (30, 50) and a.min() >= 0 and a.max() < 50


def test_undefined_rates_and_nan_precision():
    yt = np.array([0, 0, 1, 1, 0, 0])
    yp = np.array([0, 1, 1, 0, 0, 0])
    g = np.array(["a", "a", "a", "a", "b", "b"], dtype=object)
    assert fx.undefined_rates(yt, yp, g, ["a", "b"]) == {"b": ["tpr", "fnr", "precision"]}
    r = fx.rates_from_counts(fx.confusion_by_group(yt, yp, g, ["a", "b"]), fairlearn_zero=False)
    assert np.isnan(r["tpr"][1]) and np.isnan(r["precision"][1]) and r["fpr"][1] == 0.0
    z = fx.rates_from_counts(fx.confusion_by_group(yt, yp, g, ["a", "b"]), fairlearn_zero=True)
    assert z["tpr"][1] == 0.0


def test_percentile_ci():
    s = np.arange(1000, dtype=float)
    lo, hi = fx.percentile_ci(s, 0.95)
    assert lo == pytest.approx(np.quantile(s, 0.025)) and hi == pytest.approx(np.quantile(s, 0.975))
    s[:600] = np.nan
    lo, hi = fx.percentile_ci(s, 0.95)
    assert np.isnan(lo) and np.isnan(hi)


@pytest.mark.parametrize("ratio, ci, expected", [
    (1.0, (0.9, 1.1), fx.WITHIN), (0.8, (0.5, 1.0), fx.WITHIN), (1.25, (1.0, 1.6), fx.WITHIN),
    (0.6, (0.5, 0.7), fx.OUTSIDE), (1.5, (1.3, 1.8), fx.OUTSIDE),
    (0.7, (0.5, 0.9), fx.OUTSIDE_UNCERTAIN), (1.4, (1.1, 1.9), fx.OUTSIDE_UNCERTAIN),
    (0.7, (None, None), fx.OUTSIDE_UNCERTAIN), (None, (None, None), fx.UNDEFINED),
    (float("nan"), (0.1, 0.2), fx.UNDEFINED),
])
def test_judge_ratio(ratio, ci, expected):
    assert fx.judge_ratio(ratio, ci, (0.8, 1.25)) == expected


def test_judge_limits_and_support_cap():
    assert fx.judge_at_most(0.05, (0.0, 0.2), 0.1) == fx.WITHIN
    assert fx.judge_at_most(0.2, (0.12, 0.3), 0.1) == fx.OUTSIDE
    assert fx.judge_at_most(0.2, (0.05, 0.3), 0.1) == fx.OUTSIDE_UNCERTAIN
    assert fx.judge_at_least(0.7, (0.6, 0.75), 0.8) == fx.OUTSIDE
    assert fx.judge_at_least(0.7, (0.6, 0.9), 0.8) == fx.OUTSIDE_UNCERTAIN
    assert fx.cap_for_support(fx.OUTSIDE, [2, 300], 30) == fx.OUTSIDE_TOO_FEW
    assert fx.cap_for_support(fx.OUTSIDE, [30, 300], 30) == fx.OUTSIDE
    assert fx.cap_for_support(fx.OUTSIDE_UNCERTAIN, [2, 300], 30) == fx.OUTSIDE_UNCERTAIN


def test_summary_extremes_names_the_compared_groups():
    r = {"selection_rate": np.array([0.5, 0.9, 0.7]), "tpr": np.array([0.8, 0.9, 0.6]),
         "fpr": np.array([0.1, 0.2, 0.15])}
    e = fx.summary_extremes(r, ["a", "b", "c"])
    assert e["demographic_parity_difference"] == ("selection_rate", "b", "a")
    assert e["equal_opportunity_difference"] == ("tpr", "b", "c")
    assert e["equalized_odds_difference"] == ("tpr", "b", "c")  # 0.3 > 0.1
