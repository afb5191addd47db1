"""Scalar smoothing (TensorBoard's debiased EMA) and the learning-rate context of
exploding-gradient findings (issue 17, item 7)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis import scalars as sa

ROOT_SAMPLES = __import__("pathlib").Path(__file__).resolve().parents[2] / "sample_runs"


def test_ema_matches_tensorboards_debiased_formula():
    v = [1.0, 2.0, 3.0, 4.0]
    w = 0.6
    # by hand: last = 0.4, 0.4*0.6+0.8=1.04, 1.04*0.6+1.2=1.824, 1.824*0.6+1.6=2.6944
    expect = [0.4 / (1 - 0.6), 1.04 / (1 - 0.36), 1.824 / (1 - 0.216), 2.6944 / (1 - 0.1296)]
    np.testing.assert_allclose(sa.smooth_ema(v, w), expect)
    assert sa.smooth_ema(v, w)[0] == 1.0  # debiased: the first point is not pulled to 0


def test_ema_passes_non_finite_values_through():
    out = sa.smooth_ema([1.0, math.nan, 3.0, math.inf], 0.5)
    assert out[0] == 1.0 and math.isnan(out[1]) and out[3] == math.inf
    # the NaN did not enter the average: 1 then 3 with weight 0.5, debiased
    assert out[2] == pytest.approx((0.5 * 0.5 + 1.5) / (1 - 0.25))


def test_zero_weight_is_the_raw_series_and_bad_weights_are_refused():
    np.testing.assert_array_equal(sa.smooth_ema([3.0, 1.0], 0.0), [3.0, 1.0])
    with pytest.raises(ValueError, match=r"smoothing weight 1: expected a number in \[0, 1\)"):
        sa.smooth_ema([1.0], 1)


def test_smooth_scalars_per_key_and_rank():
    df = pd.DataFrame({"step": [0, 1, 0, 1], "rank": [0, 0, 1, 1], "key": ["loss"] * 4,
                       "value": [1.0, 3.0, 10.0, 30.0], "wall_time": [0.0] * 4})
    out = sa.smooth_scalars(df, 0.5)
    r1 = out[out["rank"] == 1]["smoothed"].tolist()
    assert r1[0] == 10.0 and r1[1] == pytest.approx((0.5 * 5 + 15) / 0.75)


def lr_frame(values):
    return pd.DataFrame({"step": range(len(values)), "rank": 0, "key": "lr", "value": values,
                         "wall_time": 0.0})


@pytest.mark.parametrize("values,step,text", [
    ([0.1] * 5 + [1.7] * 5, 9, "lr grew 17x since step 0, from 0.1 to 1.7"),
    ([1.0, 0.5, 0.1], 2, "lr fell 10x since step 0, from 1 to 0.1"),
    ([0.1] * 4, 3, "lr was 0.1 throughout (steps 0-3)"),
    ([0.1, 0.12], 1, "lr stayed within 1.5x of 0.1 since step 0 (now 0.12)"),
])
def test_describe_lr_before(values, step, text):
    assert sa.describe_lr_before(lr_frame(values), step)["text"] == text


def test_describe_lr_before_looks_only_up_to_the_step():
    d = sa.describe_lr_before(lr_frame([0.1, 0.1, 10.0]), 1)
    assert d["text"] == "lr was 0.1 throughout (steps 0-1)" and d["at_step"] == 1
    no_lr = pd.DataFrame({"step": [0, 1], "rank": 0, "key": "loss", "value": [1.0, 0.5], "wall_time": 0.0})
    assert sa.describe_lr_before(no_lr, 3) is None


def test_exploding_gradient_finding_says_what_the_lr_did():
    """digits-exploding's warmup takes the lr from 0.1 to 10 before the gradient explodes."""
    from debugkit import open_run
    from debugkit.diagnose import diagnose

    (f,) = [f for f in diagnose(open_run(ROOT_SAMPLES / "digits-exploding")) if f.kind == "exploding_grad"]
    assert f.step == 91
    assert "(lr grew 100x since step 0, from 0.1 to 10); lower the learning rate" in f.message
    assert f.evidence["lr"]["ratio"] == pytest.approx(100.0)
    assert f.evidence["lr"]["at_step"] == 91
