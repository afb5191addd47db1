"""Detectors on synthetic frames with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from hypothesis.extra import numpy as hnp

from debugkit.analysis.gradients._window import _trailing_jumps
from debugkit.analysis.gradients.clipping import compute_clip_whatif
from debugkit.analysis.gradients.config import resolve_config
from debugkit.analysis.gradients.detectors import (
    detect_dead_layers,
    detect_exploding_grad,
    detect_gradient_findings,
    detect_nonfinite_grad,
    detect_vanishing_grad,
)
from debugkit.analysis.gradients.heatmap import compute_heatmap_bins
from debugkit.analysis.gradients.layers import group_rows, module_prefixes, select_layers
from debugkit.analysis.gradients.losses import detect_loss_spikes, detect_nonfinite_loss, loss_keys
from debugkit.analysis.gradients.matrix import TOTAL, pivot_grad_norms
from debugkit.analysis.gradients.steps import compute_step_details, nearest_failure, scalars_at_step
from debugkit.errors import InvalidInputError

LAYERS = ["enc.0.weight", "enc.0.bias", "enc.1.weight", "enc.1.bias", "head.weight", "head.bias"]


def grads_frame(values: dict[str, np.ndarray], rank: int = 0, steps=None, total=True) -> pd.DataFrame:
    """Rows like Run.grad_norms(): layer categorical in the dict's order, total last."""
    names = list(values)
    n = len(next(iter(values.values())))
    steps = np.arange(n) if steps is None else np.asarray(steps)
    cols = dict(values)
    if total:
        with np.errstate(over="ignore", invalid="ignore"):
            cols[TOTAL] = np.sqrt(sum(np.square(np.asarray(v, float)) for v in values.values()))
    cats = names + ([TOTAL] if total else [])
    rows = {"step": [], "rank": [], "layer": [], "grad_norm": []}
    for i in range(n):
        for name in cats:
            rows["step"].append(int(steps[i]))
            rows["rank"].append(rank)
            rows["layer"].append(name)
            rows["grad_norm"].append(float(cols[name][i]))
    df = pd.DataFrame(rows)
    df["layer"] = pd.Categorical(df["layer"], categories=cats)
    df["rank"] = df["rank"].astype(np.int32)
    return df


def scalars_frame(loss: np.ndarray, rank: int = 0, key: str = "loss", steps=None) -> pd.DataFrame:
    steps = np.arange(len(loss)) if steps is None else np.asarray(steps)
    return pd.DataFrame({"step": steps.astype(np.int64), "rank": np.full(len(loss), rank, np.int32),
                         "key": key, "value": np.asarray(loss, float), "wall_time": 0.0})


def healthy(n=120, seed=0, scale=1.0):
    """Noisy but healthy norms: lognormal noise (sigma 0.3) around per-layer levels."""
    rng = np.random.default_rng(seed)
    levels = [1.0, 0.2, 0.7, 0.15, 0.9, 0.1]
    return {name: scale * lv * np.exp(0.3 * rng.standard_normal(n)) for name, lv in zip(LAYERS, levels)}


def healthy_loss(n=120, seed=1):
    rng = np.random.default_rng(seed)
    return 2.3 * np.exp(-np.arange(n) / 40) + 0.1 + 0.05 * np.abs(rng.standard_normal(n))


def kinds(findings, severities=("error", "warning")):
    return [f.kind for f in findings if f.severity in severities]


# ------------------------------------------------------------------------------ healthy
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_noisy_but_healthy_run_has_no_warning(seed):
    g = grads_frame(healthy(seed=seed))
    s = scalars_frame(healthy_loss(seed=seed + 10))
    assert kinds(detect_gradient_findings(g, s)) == []


# ------------------------------------------------------------------------------ explosion
@pytest.mark.parametrize("step,layer", [(10, "enc.1.weight"), (37, "head.bias"), (80, "enc.0.weight")])
def test_jump_at_step_s_in_layer_l(step, layer):
    vals = healthy()
    med = float(np.median(vals[layer][max(0, step - 20):step]))
    vals[layer][step] = 40 * med
    found = detect_exploding_grad(pivot_grad_norms(grads_frame(vals))[0])
    assert len(found) == 1
    f = found[0]
    assert (f.kind, f.step, f.layer, f.severity) == ("exploding_grad", step, layer, "warning")
    assert f.evidence["reason"] == "jump"
    assert f.evidence["factor"] == pytest.approx(40.0)
    assert f.evidence["trailing_median"] == pytest.approx(med)
    assert "clip_grad_norm_" in f.message


def test_jump_needs_enough_history():
    vals = healthy()
    vals["enc.0.weight"][3] = 100.0  # only 3 earlier steps: fewer than explode_min_history
    assert detect_exploding_grad(pivot_grad_norms(grads_frame(vals))[0]) == []
    cfg = {"explode_min_history": 3}
    f = detect_exploding_grad(pivot_grad_norms(grads_frame(vals))[0], cfg)
    assert [(x.step, x.layer) for x in f] == [(3, "enc.0.weight")]


def test_geometric_growth_reports_its_start():
    n = 60
    vals = {name: np.full(n, 1.0) for name in LAYERS}
    vals["head.weight"][30:] = 1.6 ** np.minimum(np.arange(n - 30), 12)
    f = detect_exploding_grad(pivot_grad_norms(grads_frame(vals))[0])
    assert len(f) == 1
    assert (f[0].step, f[0].layer, f[0].evidence["reason"]) == (30, "head.weight", "geometric")
    assert f[0].evidence["end_step"] == 35
    assert f[0].evidence["factor"] == pytest.approx(1.6 ** 5)


def test_only_the_total_jumping_names_the_total():
    n = 50
    vals = {name: np.full(n, 1.0) for name in LAYERS}
    g = grads_frame(vals)
    g.loc[(g["step"] == 40) & (g["layer"] == TOTAL), "grad_norm"] = 30.0
    f = detect_exploding_grad(pivot_grad_norms(g)[0])
    assert [(x.step, x.layer) for x in f] == [(40, TOTAL)]
    assert f[0].evidence["factor"] == pytest.approx(30 / math.sqrt(6))


def test_a_negligible_layer_growing_is_not_an_explosion():
    vals = healthy()
    vals["enc.0.bias"] = np.full(120, 1e-9)
    vals["enc.0.bias"][60] = 1e-7  # 100x, but still 1e-7 of the largest layer
    assert detect_exploding_grad(pivot_grad_norms(grads_frame(vals))[0]) == []


# ------------------------------------------------------------------------------ NaN / Inf
@pytest.mark.parametrize("step,layers,first", [
    (5, ["head.bias"], "head.bias"),
    (42, ["head.weight", "enc.1.bias"], "enc.1.bias"),   # first in model order
    (99, LAYERS, "enc.0.weight"),
])
def test_nan_at_step_s_in_layer_l(step, layers, first):
    vals = healthy()
    for name in layers:
        vals[name][step:] = np.nan
    loss = healthy_loss()
    f = detect_nonfinite_grad(pivot_grad_norms(grads_frame(vals))[0], scalars_frame(loss))
    assert len(f) == 1
    f = f[0]
    assert (f.kind, f.step, f.layer, f.severity) == ("nonfinite_grad", step, first, "error")
    assert f.evidence["layers"] == [n for n in LAYERS if n in layers]
    assert f.evidence["loss_finite"] is True
    assert f.evidence["loss"] == pytest.approx(loss[step])
    assert f.evidence["last_finite_step"] == step - 1
    assert f.evidence["nonfinite_steps"] == 120 - step
    assert "backward pass" in f.message


def test_inf_grad_with_nan_loss_blames_the_forward_pass():
    vals = healthy()
    vals["enc.1.weight"][70] = np.inf
    loss = healthy_loss()
    loss[70] = np.nan
    g, s = grads_frame(vals), scalars_frame(loss)
    found = detect_gradient_findings(g, s)
    by_kind = {f.kind: f for f in found}
    assert by_kind["nonfinite_grad"].step == 70
    assert by_kind["nonfinite_grad"].evidence["values"] == {"enc.1.weight": "inf"}
    assert by_kind["nonfinite_grad"].evidence["loss_finite"] is False
    assert "forward pass" in by_kind["nonfinite_grad"].message
    nl = by_kind["nonfinite_loss"]
    assert (nl.step, nl.severity, nl.evidence["value"]) == (70, "error", "nan")
    assert nl.evidence["last_finite_step"] == 69
    assert nl.evidence["last_finite_value"] == pytest.approx(loss[69])


def test_nonfinite_loss_is_per_rank():
    loss0, loss1 = healthy_loss(), healthy_loss()
    loss0[30] = np.inf
    loss1[12] = np.nan
    s = pd.concat([scalars_frame(loss0, rank=0), scalars_frame(loss1, rank=1)])
    f = detect_nonfinite_loss(s)
    assert [(x.rank, x.step, x.evidence["value"]) for x in f] == [(0, 30, "inf"), (1, 12, "nan")]


def test_total_only_overflow():
    vals = {name: np.full(20, 1.0) for name in LAYERS}
    g = grads_frame(vals)
    g.loc[(g["step"] == 7) & (g["layer"] == TOTAL), "grad_norm"] = np.inf
    f = detect_nonfinite_grad(pivot_grad_norms(g)[0])
    assert (f[0].step, f[0].layer, f[0].evidence["layers"]) == (7, TOTAL, [TOTAL])
    assert "overflowed" in f[0].message


# ------------------------------------------------------------------------------ vanishing / dead
def test_vanishing_layers_are_named_earliest_first():
    vals = healthy()
    vals["enc.0.weight"] = vals["enc.0.weight"] * 1e-8
    vals["enc.0.bias"] = vals["enc.0.bias"] * 1e-8
    found = detect_gradient_findings(grads_frame(vals), scalars_frame(healthy_loss()))
    assert kinds(found) == ["vanishing_grad"]
    f = found[0]
    assert (f.step, f.layer, f.rank) == (0, "enc.0.weight", 0)
    assert f.evidence["layers"] == ["enc.0.weight", "enc.0.bias"]
    assert f.evidence["largest_layer"] == "head.weight"


def test_vanishing_by_absolute_floor_and_late_start():
    vals = healthy()
    vals["enc.1.bias"][40:] = 5e-8  # below the 1e-7 floor from step 40 on (80 steps)
    f = detect_vanishing_grad(pivot_grad_norms(grads_frame(vals))[0])
    assert [(x.step, x.layer, x.evidence["layers"]) for x in f] == [(40, "enc.1.bias", ["enc.1.bias"])]
    assert f[0].evidence["per_layer"]["enc.1.bias"]["median_norm"] == pytest.approx(5e-8)


def test_brief_dip_is_not_vanishing():
    vals = healthy()
    vals["enc.1.bias"][40:60] = 1e-9  # 20 steps: shorter than the 50-step window
    assert detect_vanishing_grad(pivot_grad_norms(grads_frame(vals))[0]) == []


def test_dead_layer_is_not_also_vanishing():
    vals = healthy()
    vals["head.bias"] = np.zeros(120)
    found = detect_gradient_findings(grads_frame(vals), scalars_frame(healthy_loss()))
    assert kinds(found) == ["dead_layer"]
    f = found[0]
    assert (f.step, f.layer, f.evidence["layers"]) == (0, "head.bias", ["head.bias"])
    assert f.evidence["zero_in_every_logged_step"] == ["head.bias"]


def test_layer_frozen_midway_is_dead_from_that_step():
    vals = healthy()
    vals["enc.1.weight"][70:] = 0.0
    f = detect_dead_layers(pivot_grad_norms(grads_frame(vals))[0])
    assert [(x.step, x.layer) for x in f] == [(70, "enc.1.weight")]
    assert f[0].evidence["zero_in_every_logged_step"] == []


def test_short_zero_run_is_not_dead():
    vals = healthy()
    vals["enc.1.weight"][70:80] = 0.0
    assert detect_dead_layers(pivot_grad_norms(grads_frame(vals))[0]) == []


# ------------------------------------------------------------------------------ loss spikes
@pytest.mark.parametrize("step", [15, 64, 100])
def test_loss_spike_at_step_s(step):
    loss = healthy_loss()
    med = float(np.median(loss[max(0, step - 50):step]))
    loss[step] = 3 * med
    found = detect_loss_spikes(scalars_frame(loss))
    assert [(f.kind, f.step, f.severity) for f in found] == [("loss_spike", step, "warning")]
    ev = found[0].evidence
    assert ev["median"] == pytest.approx(med)
    assert ev["ratio"] == pytest.approx(3.0)
    assert ev["peak_step"] == step and ev["steps"] == 1
    assert ev["recovered_after_steps"] == 1


def test_short_series_shorter_than_the_windows():
    loss = np.full(30, 1.0) + 0.01 * np.sin(np.arange(30))
    loss[20] = 5.0
    vals = {name: np.ones(30) for name in LAYERS}
    vals["head.weight"][25] = 50.0
    found = detect_gradient_findings(grads_frame(vals), scalars_frame(loss))
    assert [(f.kind, f.step) for f in found] == [("loss_spike", 20), ("exploding_grad", 25)]


def test_consecutive_spike_steps_are_one_finding():
    loss = np.full(100, 1.0) + 0.01 * np.sin(np.arange(100))
    loss[50:53] = [4.0, 6.0, 5.0]
    f = detect_loss_spikes(scalars_frame(loss))
    assert len(f) == 1
    assert (f[0].step, f[0].evidence["peak_step"], f[0].evidence["steps"]) == (50, 51, 3)
    assert f[0].evidence["value"] == 6.0


def test_small_relative_rise_is_not_a_spike():
    loss = np.full(100, 1.0) + 0.001 * np.sin(np.arange(100))
    loss[60] = 1.3  # many MADs, but only 30 % above the median
    assert detect_loss_spikes(scalars_frame(loss)) == []
    assert len(detect_loss_spikes(scalars_frame(loss), {"spike_min_rise": 0.2})) == 1


def test_loss_keys_auto_and_configured():
    s = pd.concat([scalars_frame(np.ones(5), key="train/loss"), scalars_frame(np.ones(5), key="lr"),
                   scalars_frame(np.ones(5), key="val_loss")])
    assert loss_keys(s) == ["train/loss", "val_loss"]
    assert loss_keys(s, ["lr", "missing"]) == ["lr"]


# ------------------------------------------------------------------------------ config
@pytest.mark.parametrize("config,match", [
    ({"explode_factr": 3}, "unknown key 'explode_factr'"),
    ({"explode_factor": 0.5}, r"explode_factor=0.5: expected a number > 1"),
    ({"explode_factor": "10"}, r"explode_factor='10': expected a finite number > 0"),
    ({"explode_window": 1}, r"explode_window=1: expected an integer >= 2"),
    ({"vanish_window": 2.5}, r"vanish_window=2.5: expected an integer >= 2"),
    ({"vanish_rel": -1}, r"vanish_rel=-1: expected a finite number > 0"),
    ({"spike_mads": float("nan")}, r"spike_mads=nan: expected a finite number > 0"),
    ({"growth_ratio": 1.0}, r"growth_ratio=1.0: expected a number > 1"),
    ({"loss_keys": "loss"}, r"loss_keys='loss': expected null or a list"),
    ({"max_findings": True}, r"max_findings=True: expected an integer >= 1"),
])
def test_bad_config_is_refused(config, match):
    with pytest.raises(InvalidInputError, match=match):
        resolve_config(config)


def test_bad_frame_is_refused():
    with pytest.raises(InvalidInputError, match=r"missing column\(s\) \['grad_norm'\]"):
        pivot_grad_norms(pd.DataFrame({"step": [1], "rank": [0], "layer": ["a"]}))


# ------------------------------------------------------------------------------ the matrix
def test_pivot_keeps_last_duplicate_and_computes_a_missing_total():
    df = pd.DataFrame({"step": [0, 0, 1, 1, 1], "rank": [0] * 5, "layer": ["a", "b", "a", "b", "a"],
                       "grad_norm": [3.0, 4.0, 1.0, 2.0, 6.0]})
    m = pivot_grad_norms(df)[0]
    assert m.names == ["a", "b", TOTAL]
    assert m.steps.tolist() == [0, 1]
    np.testing.assert_allclose(m.values, [[3, 6], [4, 2], [5, math.sqrt(40)]])


def test_pivot_unsorted_steps_and_ranks():
    g0 = grads_frame({"a": np.array([1.0, 2.0, 3.0])}, rank=0, steps=[5, 6, 7])
    g1 = grads_frame({"a": np.array([7.0, 8.0])}, rank=1, steps=[6, 5])
    mats = pivot_grad_norms(pd.concat([g1, g0]).sample(frac=1, random_state=0))
    assert sorted(mats) == [0, 1]
    assert mats[1].steps.tolist() == [5, 6]
    assert mats[1].row("a").tolist() == [8.0, 7.0]
    assert mats[0].row(TOTAL).tolist() == [1.0, 2.0, 3.0]


def test_pivot_of_empty_frame():
    assert pivot_grad_norms(grads_frame({"a": np.zeros(0)})) == {}


# ------------------------------------------------------------------------------ heatmap bins
def test_heatmap_bins_keep_max_and_every_nonfinite_value():
    a = np.array([1, 5, 2, 0, 0, 0, 3, np.nan, 4, 9], float)
    b = np.array([1, 1, 1, 1, np.inf, 1, 1, 1, 1, 1], float)
    m = pivot_grad_norms(grads_frame({"a": a, "b": b}, steps=np.arange(10) * 10))[0]
    bins = compute_heatmap_bins(m, max_bins=3)
    assert bins.start_step.tolist() == [0, 30, 70]
    assert bins.end_step.tolist() == [20, 60, 90]
    assert bins.edges.tolist() == [0, 30, 70, 91]
    np.testing.assert_array_equal(bins.max_norm[0], [5, 3, 9])
    np.testing.assert_array_equal(bins.max_norm[1], [1, 1, 1])
    assert bins.n_nan[0].tolist() == [0, 0, 1]
    assert bins.n_inf[1].tolist() == [0, 1, 0]
    assert bins.nonfinite[2].tolist() == [False, True, True]  # the total inherits them
    assert bins.all_zero[0].tolist() == [False, False, False]
    assert bins.count[0].tolist() == [3, 4, 3]


def test_heatmap_bins_stay_bounded_and_keep_a_lone_spike():
    n = 1_000_000
    vals = np.full(n, 1.0)
    vals[123_457] = 1e6
    vals[999_999] = np.nan
    df = pd.DataFrame({"step": np.arange(n), "rank": np.zeros(n, np.int32),
                       "layer": pd.Categorical.from_codes(np.zeros(n, np.int64), ["w"]),
                       "grad_norm": vals})
    bins = compute_heatmap_bins(pivot_grad_norms(df)[0], max_bins=300, rows=["w"])
    assert bins.max_norm.shape == (1, 300)
    assert np.nanmax(bins.max_norm) == 1e6
    col = int(np.nanargmax(bins.max_norm[0]))
    assert bins.start_step[col] <= 123_457 <= bins.end_step[col]
    assert bins.n_nan[0].sum() == 1 and bins.nonfinite[0, -1]


def test_all_zero_bins():
    m = pivot_grad_norms(grads_frame({"a": np.array([0.0, 0, 0, 1])}, total=False))[0]
    bins = compute_heatmap_bins(m, max_bins=2)
    assert bins.all_zero[0].tolist() == [True, False]


# ------------------------------------------------------------------------------ clip what-if
def test_clip_whatif_matches_pytorch_formula():
    total = np.array([0.5, 1.0, 2.0, np.nan, 4.0, 0.9, 3.0])
    m = pivot_grad_norms(grads_frame({"a": total}))[0]
    c = compute_clip_whatif(m, 1.0)
    # A total equal to max_norm is scaled by 1 / (1 + 1e-6), as PyTorch does.
    assert c.clipped.tolist() == [False, True, True, False, True, False, True]
    np.testing.assert_allclose(c.scale[[0, 2, 4]], [1.0, 1 / (2 + 1e-6), 1 / (4 + 1e-6)])
    assert c.nonfinite.tolist() == [False, False, False, True, False, False, False]
    assert c.fraction == pytest.approx(4 / 7)
    assert c.intervals() == [(1, 2), (4, 4), (6, 6)]
    assert c.intervals(max_intervals=2) == [(0, 6)]


def test_clip_whatif_agrees_with_clip_grad_norm_():
    import torch

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn(5) * 3
    norms = [float(p.grad.norm()) for p in params]
    m = pivot_grad_norms(grads_frame({f"p{i}": np.array([n]) for i, n in enumerate(norms)}))[0]
    before = [p.grad.clone() for p in params]
    torch.nn.utils.clip_grad_norm_(params, max_norm=2.0)
    c = compute_clip_whatif(m, 2.0)
    assert bool(c.clipped[0]) is True
    assert float(params[0].grad[0] / before[0][0]) == pytest.approx(float(c.scale[0]), rel=1e-5)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "x", None])
def test_clip_whatif_refuses_bad_max_norm(bad):
    m = pivot_grad_norms(grads_frame({"a": np.ones(3)}))[0]
    with pytest.raises(InvalidInputError, match=r"max_norm=.*expected a positive number"):
        compute_clip_whatif(m, bad)


# ------------------------------------------------------------------------------ step details
def test_step_details_and_nearest_logged_step():
    vals = {"a": np.array([1.0, 1.0, 1.0, 10.0]), "b": np.array([2.0, 2.0, 2.0, np.nan])}
    m = pivot_grad_norms(grads_frame(vals, steps=[0, 10, 20, 30]))[0]
    shown, t = compute_step_details(m, 27)
    assert shown == 30
    assert t["layer"].tolist() == ["a", "b", TOTAL]
    assert t["grad_norm"].iloc[0] == 10.0 and t["ratio"].iloc[0] == 10.0
    assert t["status"].tolist() == ["ok", "nan", "nan"]
    assert compute_step_details(m, 15)[0] == 10  # a tie goes to the earlier step
    assert compute_step_details(m, 10**9)[0] == 30


def test_nearest_failure_prefers_same_rank_then_distance():
    fails = [{"id": "a", "step": 10, "rank": 1}, {"id": "b", "step": 50, "rank": 0},
             {"id": "c", "step": 12, "rank": 0}, {"id": "d", "step": None, "rank": 0}]
    assert nearest_failure(fails, 11, 0)["id"] == "c"
    assert nearest_failure(fails, 11, 1)["id"] == "a"
    assert nearest_failure(fails, 40, 2)["id"] == "b"
    assert nearest_failure([], 3) is None


def test_scalars_at_step():
    s = pd.concat([scalars_frame(np.array([1.0, 2.0])), scalars_frame(np.array([0.1, 0.2]), key="lr")])
    assert scalars_at_step(s, 1, 0) == {"loss": 2.0, "lr": 0.2}
    assert scalars_at_step(s, 1, 3) == {}


# ------------------------------------------------------------------------------ layer filter
def test_module_tree_and_selection():
    assert module_prefixes(LAYERS) == [("enc", 1, 4), ("enc.0", 2, 2), ("enc.1", 2, 2), ("head", 1, 2)]
    assert select_layers(LAYERS, ["enc.1", "head"]) == ["enc.1.weight", "enc.1.bias", "head.weight", "head.bias"]
    assert select_layers(LAYERS, [], r"\.bias$") == ["enc.0.bias", "enc.1.bias", "head.bias"]
    assert select_layers(LAYERS, ["enc"], "weight") == ["enc.0.weight", "enc.1.weight"]
    assert select_layers(LAYERS, ["en"]) == []  # a prefix is a whole module name


def test_bad_regex_is_a_clear_error():
    with pytest.raises(InvalidInputError, match=r"layer filter: 'enc\(' is not a valid regular expression"):
        select_layers(LAYERS, [], "enc(")


def test_group_rows_picks_the_deepest_readable_depth():
    assert group_rows(LAYERS) == [("enc.0", 0, 2), ("enc.1", 2, 2), ("head", 4, 2)]
    many = [f"blocks.{i}.{p}" for i in range(30) for p in ("w", "b")]
    assert group_rows(many) == [("blocks", 0, 60)]
    assert group_rows(["w", "b"]) == [("", 0, 2)]


@settings(max_examples=60, deadline=None)
@given(data=hnp.arrays(np.float64, hst.tuples(hst.integers(1, 4), hst.integers(1, 60)),
                       elements=hst.one_of(hst.floats(1e-3, 1e3), hst.just(np.nan), hst.just(0.0))),
       window=hst.integers(2, 25), min_count=hst.integers(1, 10), factor=hst.floats(1.5, 20))
def test_trailing_jumps_equal_the_brute_force_median(data, window, min_count, factor):
    sig = np.isfinite(data) & (data > 0)
    jump = _trailing_jumps(data, sig, window, min_count, factor)
    want = np.zeros_like(sig)
    for r in range(data.shape[0]):
        for c in range(data.shape[1]):
            prev = data[r, max(0, c - window):c]
            prev = prev[np.isfinite(prev)]
            if sig[r, c] and len(prev) >= min(min_count, window, data.shape[1]):
                med = np.median(prev)
                want[r, c] = med > 0 and data[r, c] / med >= factor
    np.testing.assert_array_equal(jump, want)


def test_dense_and_general_pivots_agree():
    vals = healthy(n=50)
    vals["enc.0.bias"][20] = np.nan
    g = grads_frame(vals)
    dense = pivot_grad_norms(g)[0]                                   # reshape path
    general = pivot_grad_norms(g.sample(frac=1, random_state=1))[0]  # scatter path
    assert dense.names == general.names == LAYERS + [TOTAL]
    np.testing.assert_array_equal(dense.steps, general.steps)
    np.testing.assert_array_equal(dense.values, general.values)
    np.testing.assert_array_equal(dense.present, general.present)
    no_total = pivot_grad_norms(grads_frame(vals, total=False))[0]
    np.testing.assert_allclose(no_total.values[-1], dense.values[-1])


def test_pivot_of_many_ranks_contiguous_or_interleaved_agree():
    # Rows rank by rank (as Run.grad_norms returns them) take one slice per rank; any
    # other order is grouped by a stable sort: both give every rank its own matrix.
    vals = healthy(n=30)
    frames = [grads_frame({k: v * (r + 1) for k, v in vals.items()}, rank=r) for r in (0, 3, 7)]
    by_rank = pivot_grad_norms(pd.concat(frames, ignore_index=True))
    mixed = pivot_grad_norms(pd.concat(frames[::-1], ignore_index=True).sample(frac=1, random_state=2))
    assert sorted(by_rank) == sorted(mixed) == [0, 3, 7]
    for r in (0, 3, 7):
        np.testing.assert_array_equal(by_rank[r].steps, mixed[r].steps)
        np.testing.assert_array_equal(by_rank[r].values, mixed[r].values)
        np.testing.assert_allclose(by_rank[r].row(LAYERS[0]), vals[LAYERS[0]] * (r + 1))
