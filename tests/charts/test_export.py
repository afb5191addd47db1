"""figure_table / figure_csv: the data each chart draws, for its CSV download."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from debugkit.analysis.scalars import smooth_scalars
from debugkit.charts.export import figure_csv, figure_table
from debugkit.charts.scalars import build_scalars_figure


def test_lines_and_markers_become_rows_with_nan_spelled_out():
    df = pd.DataFrame({"step": [0, 1, 2, 0, 1, 2], "rank": 0, "key": ["loss"] * 3 + ["lr"] * 3,
                       "value": [2.0, 1.5, np.nan, 0.1, 0.1, 1.0]})
    fig = build_scalars_figure(smooth_scalars(df, 0.0), ["loss", "lr"])
    table = figure_table(fig)
    loss = table[table["trace"] == "loss"]
    assert loss["x"].tolist() == [0, 1] and loss["y"].tolist() == [2.0, 1.5]
    assert table[table["trace"] == "lr"]["y"].tolist() == [0.1, 0.1, 1.0]
    back = pd.read_csv(io.StringIO(figure_csv(fig)), keep_default_na=False)
    nan = back[back["trace"] == "loss: NaN/inf"]
    assert nan["x"].tolist() == [2] and nan["value"].tolist() == ["NaN"]


def test_a_heatmap_is_one_row_per_cell():
    fig = go.Figure(go.Heatmap(z=[[1, 2, 3], [4, np.nan, 6]], x=[10, 20, 30], y=["a", "b"], name="h"))
    table = figure_table(fig)
    assert len(table) == 6
    assert table.set_index(["x", "y"]).loc[(30, "b"), "z"] == 6
    assert "NaN" in figure_csv(fig)
