"""The layer-statistics figures: module x step heatmap and quantile fan chart, drawn from a
real recorded run (tests/analysis/_layer_jobs.py)."""

from __future__ import annotations

import math

from debugkit import open_run
from debugkit.analysis.layer_health import layer_stat_matrix, quantile_bands
from debugkit.charts.layers import build_layer_stat_heatmap_figure, build_quantile_fan_figure

from ..analysis._layer_jobs import dead_relu


def test_heatmap_and_fan_chart_of_a_recorded_run(tmp_path):
    stats = open_run(dead_relu(tmp_path / "r")).layer_stats()
    modules, steps, values = layer_stat_matrix(stats, "frac_dead_units")
    assert modules == ["1", "3"] and steps == sorted(steps) and values.shape == (2, len(steps))
    assert (values[1] == 1.0).all() and (values[0] < 0.9).all()  # the planted dead layer
    fig = build_layer_stat_heatmap_figure(modules, steps, values, stat="frac_dead_units")
    (hm,) = fig.data
    assert list(hm.y) == modules and list(hm.x) == [str(s) for s in steps]
    assert fig.layout.yaxis.type == "category" and fig.layout.xaxis.type == "category"
    m2, s2, v2 = layer_stat_matrix(stats, "max_abs")
    assert m2[:5] == ["0", "1", "2", "3", "4"]  # forward order
    logfig = build_layer_stat_heatmap_figure(m2, s2, v2, stat="max_abs", log=True)
    assert math.isclose(logfig.data[0].z[0][0], math.log10(v2[0][0]))

    bands = quantile_bands(stats, "0.weight", "w")
    assert list(bands.columns) == ["q01", "q05", "q25", "q50", "q75", "q95", "q99"]
    assert (bands["q01"] <= bands["q50"]).all() and (bands["q50"] <= bands["q99"]).all()
    fan = build_quantile_fan_figure(bands, param="0.weight")
    names = [t.name for t in fan.data if t.showlegend is not False]
    assert names == ["01-99 %", "05-95 %", "25-75 %", "median"]
    assert list(fan.data[-1].y) == bands["q50"].tolist()


def test_a_dead_modules_zero_output_is_drawn_on_a_log_heatmap():
    """An exact zero (a dead ReLU's max_abs) was log10 -inf and left blank: the module the
    dead_units finding names showed no colour at all. It is the lowest cell now, and its
    hover reads the real value; a missing value stays empty."""
    import numpy as np

    values = np.array([[2.0, 3.0], [0.0, 0.0], [0.5, np.nan]])
    fig = build_layer_stat_heatmap_figure(["0", "1", "2"], [0, 10], values, stat="max_abs", log=True)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isfinite(z[1]).all() and (z[1] < np.nanmin(np.delete(z, 1, axis=0))).all()
    assert np.isnan(z[2, 1])
    assert np.asarray(fig.data[0].customdata, dtype=float)[1, 0] == 0.0
    assert "customdata" in fig.data[0].hovertemplate


def test_the_focus_cell_is_outlined_and_a_missing_one_is_not():
    import numpy as np

    from debugkit.charts.layers import build_layer_stat_heatmap_figure

    vals = np.arange(6, dtype=float).reshape(3, 2)
    fig = build_layer_stat_heatmap_figure(["0", "1", "2"], [0, 10], vals, stat="mean",
                                          focus=("2", 10))
    (shape,) = fig.layout.shapes
    assert (shape.x0, shape.x1, shape.y0, shape.y1) == (0.5, 1.5, 1.5, 2.5)
    fig = build_layer_stat_heatmap_figure(["0", "1", "2"], [0, 10], vals, stat="mean",
                                          focus=("2", 20))
    assert not fig.layout.shapes
