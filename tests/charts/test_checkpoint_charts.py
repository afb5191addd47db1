"""Checkpoint figures: heatmap overlays, weight-norm lines, moved-most bars."""

from __future__ import annotations

import numpy as np

from debugkit.analysis.checkpoints import compute_change_matrix, compute_movement
from debugkit.charts.checkpoints import (
    build_change_heatmap_figure,
    build_movement_figure,
    build_weight_norm_figure,
)
from debugkit.charts.gradients import NONFINITE_COLOR, ZERO_COLOR
from debugkit.checkpoints import read_checkpoint_diff, read_weight_stats
from tests.analysis.test_checkpoints import ORDER, _run


def test_heatmap_draws_log_change_and_marks_frozen_and_nonfinite_cells(tmp_path):
    m = compute_change_matrix(read_weight_stats(_run(tmp_path)), ORDER)
    fig = build_change_heatmap_figure(m)
    main, frozen, bad = fig.data[0], fig.data[1], fig.data[3]
    assert list(main.y) == ORDER and list(main.x) == ["→ step 10", "→ step 20", "→ step 30"]
    assert np.allclose(np.asarray(main.z)[0], -1.0, atol=1e-5)  # log10(0.1)
    assert frozen.name == "unchanged" and frozen.colorscale[0][1] == ZERO_COLOR
    assert np.nansum(np.asarray(frozen.z, dtype=float)) == 2 * 3 + 2  # 0.bias, 1.weight x3, 1.bias x2
    assert bad.name == "NaN/Inf" and bad.colorscale[0][1] == NONFINITE_COLOR
    assert np.argwhere(np.asarray(bad.z, dtype=float) == 1).tolist() == [[3, 2]]
    assert {t.name for t in fig.data if t.type == "scatter"} == {"unchanged", "NaN/Inf"}  # legend swatches


def test_weight_norm_lines_mark_nonfinite_checkpoints(tmp_path):
    m = compute_change_matrix(read_weight_stats(_run(tmp_path)), ORDER)
    fig = build_weight_norm_figure(m)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == ORDER and list(lines[0].x) == [0.0, 10.0, 20.0, 30.0]
    marks = [t for t in fig.data if t.mode == "markers"]
    assert len(marks) == 1 and marks[0].name == "1.bias: NaN/Inf" and list(marks[0].x) == [30.0]


def test_movement_bars_largest_first_and_nonfinite_in_magenta(tmp_path):
    listing = _run(tmp_path)
    mv = compute_movement(read_checkpoint_diff(listing["path"][0], listing["path"][3]), ORDER)
    fig = build_movement_figure(mv["moved"], label_a="step 0", label_b="step 30")
    bar = fig.data[0]
    assert list(bar.y) == ["1.bias", "0.weight"]  # NaN change first: the one to look at
    assert list(bar.marker.color) == [NONFINITE_COLOR, "#1f77b4"]
    assert "step 30" in fig.layout.xaxis.title.text
    # lengths compare as values do: a linear axis from 0 (a log axis made 0.62 look 20x
    # shorter than 1.37)
    assert fig.layout.xaxis.type == "linear" and fig.layout.xaxis.rangemode == "tozero"
