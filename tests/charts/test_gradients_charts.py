"""Gradient figures: traces, markers, payload bounds."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.io as pio

from debugkit.analysis.gradients.clipping import compute_clip_whatif
from debugkit.analysis.gradients.heatmap import compute_heatmap_bins
from debugkit.analysis.gradients.layers import group_rows
from debugkit.analysis.gradients.matrix import TOTAL, pivot_grad_norms
from debugkit.charts.gradients import (
    NONFINITE_COLOR,
    build_grad_heatmap_figure,
    build_grad_lines_figure,
    figure_payload_points,
)


def _matrix(n=1_000_000, spike=123_457, nan_at=(500_000,)):
    vals = np.full(n, 1.0) + 0.01 * np.sin(np.arange(n))
    vals[spike] = 1e4
    for k in nan_at:
        vals[k] = np.nan
    zeros = np.full(n, 0.5)
    zeros[10:20] = 0.0
    step = np.repeat(np.arange(n), 2)
    codes = np.tile([0, 1], n)
    g = pd.DataFrame({"step": step, "rank": np.zeros(2 * n, np.int32),
                      "layer": pd.Categorical.from_codes(codes, ["a.w", "b.w"]),
                      "grad_norm": np.column_stack([vals, zeros]).reshape(-1)})
    return pivot_grad_norms(g)[0]


def test_lines_keep_the_spike_every_nan_and_stay_bounded():
    m = _matrix()
    fig = build_grad_lines_figure(m, ["a.w", "b.w"], max_points=5000)
    by_name = {t.name: t for t in fig.data}
    line = by_name["a.w"]
    assert line.mode == "lines+markers"
    assert len(line.x) <= 5001
    xs = np.asarray(line.x)
    assert 123_457 in xs
    assert float(np.asarray(line.y)[xs.tolist().index(123_457)]) == 1e4
    np.testing.assert_array_equal(np.asarray(line.customdata), xs)  # the step, for clicks
    nan = by_name["a.w: NaN/Inf"]
    assert list(nan.x) == [500_000] and nan.marker.color == NONFINITE_COLOR
    assert list(nan.customdata) == [500_000] and list(nan.text) == ["nan"]
    zero = by_name["b.w: 0"]
    assert list(zero.x) == list(range(10, 20))
    assert fig.layout.yaxis.type == "log"
    assert all(len(t.x) <= 5001 for t in fig.data if t.x is not None)
    assert "total" in by_name


def test_lines_draw_clip_shading_and_max_norm():
    m = _matrix(n=100, spike=50, nan_at=())
    clip = compute_clip_whatif(m, 5.0)
    fig = build_grad_lines_figure(m, ["a.w"], clip=clip, selected_step=50, failure_steps=[60])
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert [(r.x0, r.x1) for r in rects] == [(49.5, 50.5)]
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert any(s.y0 == 5.0 and s.xref == "paper" for s in lines)
    assert any(s.x0 == 50 for s in lines) and any(s.x0 == 60 for s in lines)


def test_heatmap_marks_nonfinite_and_zero_cells_and_stays_bounded():
    m = _matrix()
    bins = compute_heatmap_bins(m, 300)
    fig = build_grad_heatmap_figure(bins, groups=group_rows(m.layers))
    heat = [t for t in fig.data if t.type == "heatmap"]
    main = heat[0]
    z = np.asarray(main.z)
    assert z.shape == (3, 300)
    assert np.nanmax(z[0]) == 4.0  # log10 of the 1e4 spike
    assert list(main.y) == ["a.w", "b.w", TOTAL]
    nan_layer = next(t for t in heat if t.name == "NaN/Inf")
    zn = np.asarray(nan_layer.z, dtype=float)
    assert np.nansum(zn[0]) == 1 and np.nansum(zn[1]) == 0
    col = int(np.nanargmax(zn[0]))  # a column of the overlay, whose x holds its own edges
    assert nan_layer.x[col] <= 500_000 < nan_layer.x[col + 1]
    # 10 zero steps share their bin with non-zero ones: no all-zero cell
    assert not any(t.name == "exactly 0" for t in heat)
    assert figure_payload_points(fig) < 20_000
    assert fig.layout.yaxis.autorange == "reversed"


def test_heatmap_zero_overlay_and_group_labels():
    n = 40
    names = [f"blocks.{i}.{p}" for i in range(2) for p in ("w", "b", "g")] + ["head.w"]
    vals = {k: np.ones(n) for k in names}
    vals["head.w"] = np.zeros(n)
    rows = [(s, k, v[s]) for k, v in vals.items() for s in range(n)]
    g = pd.DataFrame(rows, columns=["step", "layer", "grad_norm"]).assign(rank=0)
    g["layer"] = pd.Categorical(g["layer"], categories=names)
    m = pivot_grad_norms(g)[0]
    groups = group_rows(m.layers)
    assert groups == [("blocks.0", 0, 3), ("blocks.1", 3, 3), ("head", 6, 1)]
    fig = build_grad_heatmap_figure(compute_heatmap_bins(m, 300), groups=groups)
    zero = next(t for t in fig.data if t.name == "exactly 0")
    z = np.asarray(zero.z, dtype=float)
    assert np.nansum(z[6]) == n and np.nansum(z[:6]) == 0
    assert [int(x) for x in zero.x] == list(range(n + 1))  # head.w is 0 at every step: all 40 columns
    assert [a.text for a in fig.layout.annotations] == ["blocks.0", "blocks.1", "head"]


def test_other_runs_are_dashed_lines_named_by_run():
    import pandas as pd

    from debugkit.analysis.gradients.matrix import pivot_grad_norms
    from debugkit.charts.gradients import build_grad_lines_figure

    def mat(scale, steps):
        rows = [(s, 0, layer, scale * (1 + s)) for s in range(steps) for layer in ("w", "__total__")]
        return pivot_grad_norms(pd.DataFrame(rows, columns=["step", "rank", "layer", "grad_norm"]))[0]

    fig = build_grad_lines_figure(mat(1.0, 10), ["w"], others={"run-b": mat(2.0, 20)})
    by = {t.name: t for t in fig.data}
    assert {"w", "total", "w · run-b", "total · run-b"} <= set(by)
    assert by["w · run-b"].line.dash == "dash" and by["w · run-b"].customdata is None
    assert list(fig.layout.xaxis.range) == [0.0, 20.0]  # the longer run fits


def test_heatmap_overlays_span_only_their_marked_columns_in_compact_arrays():
    """Figure JSON is what the page sends before its first chart is drawn: the NaN/Inf and
    zero overlays cover only the columns from their first to their last marked cell (they
    were as wide as the heatmap, and NaN/Inf's counts a second full-size array), and the
    hover's step numbers are sent as small integers. Every mark stays where it was."""
    n, names = 3000, ["a.w", "b.w", "c.w"]
    vals = {k: np.linspace(1.0, 2.0, n) for k in names}
    vals["a.w"][2000] = np.nan
    vals["b.w"][2005:2015] = np.inf
    vals["c.w"][100:200] = 0.0
    rows = [(s, k, v[s]) for k, v in vals.items() for s in range(n)]
    g = pd.DataFrame(rows, columns=["step", "layer", "grad_norm"]).assign(rank=0)
    g["layer"] = pd.Categorical(g["layer"], categories=names)
    m = pivot_grad_norms(g)[0]
    bins = compute_heatmap_bins(m, 300)
    fig = build_grad_heatmap_figure(bins)
    main, nan, zero = (next(t for t in fig.data if t.name == k) for k in ("log10 norm", "NaN/Inf", "exactly 0"))
    assert np.asarray(main.customdata).dtype == np.uint16 and np.asarray(main.x).dtype == np.uint16
    np.testing.assert_array_equal(np.asarray(main.customdata)[0], bins.end_step)
    zn = np.asarray(nan.z, dtype=float)
    assert zn.shape[1] <= 2 and list(nan.y) == list(main.y)  # one or two of 300 columns
    marked = {(main.y[r], int(nan.x[c])) for r, c in zip(*np.nonzero(np.isfinite(zn)))}
    want = {(main.y[r], int(bins.start_step[c])) for r, c in zip(*np.nonzero(bins.nonfinite))}
    assert marked == want
    assert np.nansum(zn[:3]) == 1 + 10  # the hover's counts: a.w's NaN, b.w's ten Infs (row 3: the total)
    zz = np.asarray(zero.z, dtype=float)
    assert zz.shape[1] <= 11 and np.nansum(zz[:2]) == 0
    assert {int(x) for x in zero.x[:-1]} >= {int(s) for s in bins.start_step[bins.all_zero[2]]}
    sizes = {t["name"]: len(json.dumps(t)) for t in json.loads(pio.to_json(fig))["data"]}  # as sent
    assert sizes["NaN/Inf"] < sizes["log10 norm"] / 5 and sizes["exactly 0"] < sizes["log10 norm"] / 5
