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
