"""Overlay charts of several runs: one colour per run on every chart, the base's band."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis.run_diff import series_band
from debugkit.charts.run_overlay import (
    PALETTE,
    build_grad_overlay_figure,
    build_scalar_overlay_figure,
    log_ticks,
    run_colours,
)
from debugkit.io.run import open_run

NAMES = ["digits-compare-lr", "digits-compare-base", "digits-compare-unlabelled"]


def _runs(sample_runs):
    return {n: open_run(sample_runs / n) for n in NAMES}


def test_three_runs_keep_their_colour_on_the_loss_and_gradient_charts(sample_runs):
    runs = _runs(sample_runs)
    colours = run_colours(NAMES)
    assert colours == dict(zip(NAMES, PALETTE[:3]))
    base = runs["digits-compare-base"]
    loss = build_scalar_overlay_figure({n: r.scalars() for n, r in runs.items()}, "loss",
                                       colours=colours, band=series_band(base.scalars(), "loss", "loss"),
                                       divergence_step=12)
    grad = build_grad_overlay_figure({n: r.grad_norms() for n, r in runs.items()}, "0.weight",
                                     colours=colours,
                                     band=series_band(base.grad_norms(), "grad_norm", "0.weight"))
    for fig in (loss, grad):
        lines = {t.name: t.line.color for t in fig.data if t.name in colours}
        assert lines == colours
        assert [t.name for t in fig.data][:2] == ["base band (upper)", "base band"]
        assert all(len(t.x) == 60 for t in fig.data if t.name in colours)
    assert grad.layout.yaxis.type == "log"
    assert [s.x0 for s in loss.layout.shapes] == [12]
    # the band is drawn around the base's own values
    band = loss.data[1]
    base_y = np.asarray(loss.data[3].y)
    assert (np.asarray(band.y) < base_y).all() and (np.asarray(loss.data[0].y) > base_y).all()


def test_nan_points_and_failures_are_drawn_in_the_runs_colour():
    df = {"a": pd.DataFrame({"step": [0, 1, 2, 3], "rank": 0, "key": "loss",
                             "value": [2.0, 1.5, np.nan, np.nan], "wall_time": 0.0}),
          "b": pd.DataFrame({"step": [0, 1, 2, 3], "rank": 0, "key": "loss",
                             "value": [2.0, 1.4, 1.2, 1.1], "wall_time": 0.0})}
    fig = build_scalar_overlay_figure(df, "loss", failure_steps={"a": [2]})
    names = [t.name for t in fig.data]
    assert names == ["a", "a: NaN/Inf", "b", "a: failure"]
    nan = fig.data[1]
    assert list(nan.x) == [2, 3] and nan.marker.line.color == fig.data[0].line.color
    assert fig.data[3].marker.color == fig.data[0].line.color and list(fig.data[3].x) == [2]


def test_exactly_zero_gradients_stay_visible_on_the_log_axis(sample_runs):
    """0.weight of digits-compare-lr is 0 at steps 53-55 and 57-59: on a log axis its line
    would end at 52; the zeros are open markers on the axis floor instead."""
    runs = _runs(sample_runs)
    fig = build_grad_overlay_figure({n: r.grad_norms() for n, r in runs.items()}, "0.weight")
    zeros = next(t for t in fig.data if t.name == "digits-compare-lr: 0")
    assert list(zeros.x) == [53, 54, 55, 57, 58, 59]
    assert set(zeros.customdata) == {"0"}
    line = next(t for t in fig.data if t.name == "digits-compare-lr")
    assert zeros.marker.color == line.line.color
    assert 0 < zeros.y[0] <= min(v for t in fig.data if t.name in NAMES for v in t.y if v > 0)


def test_log_ticks_are_written_in_full():
    fig = build_grad_overlay_figure({"a": pd.DataFrame({"step": [0, 1, 2], "rank": 0, "layer": "w",
                                                        "grad_norm": [0.3, 0.5, 0.9]})}, "w")
    y = fig.layout.yaxis
    assert y.type == "log"
    assert "0.5" in y.ticktext and "5" not in y.ticktext
    assert all(float(t) == pytest.approx(v) for t, v in zip(y.ticktext, y.tickvals))
    wide = log_ticks({"a": ([0, 1], [1e-7, 3e2])})
    assert wide["ticktext"][0] == "1e-07" and wide["ticktext"][-1] == "100"
