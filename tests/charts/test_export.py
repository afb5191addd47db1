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


def _flame_tree():
    return pd.DataFrame({"node_id": [0, 1, 2, 3], "parent_id": [-1, 0, 1, 1],
                         "name": ["all", "train", "forward", "backward"], "samples": [10, 9, 3, 6],
                         "self_samples": [1, 0, 3, 6], "fraction": [1.0, 0.9, 0.3, 0.6],
                         "file": ["", "train.py", "model.py", "torch/autograd.py"], "line": [0, 3, 9, 1],
                         "package": ["", "user", "user", "torch"], "depth": [0, 1, 2, 2],
                         "folded": [0, 0, 0, 0]})


def test_a_hierarchy_is_one_row_per_node_with_its_customdata():
    import plotly.graph_objects as go

    t = _flame_tree()
    fig = go.Figure(go.Icicle(ids=t["node_id"].astype(str).tolist(), labels=t["name"].tolist(),
                              parents=["", "0", "1", "1"], values=t["samples"].tolist(),
                              customdata=t[["self_samples"]].to_numpy(), meta={"columns": ["self_samples"]}))
    table = figure_table(fig)
    assert table["label"].tolist() == ["all", "train", "forward", "backward"]
    assert table["parent"].tolist() == ["", "0", "1", "1"] and table["value"].tolist() == [10, 9, 3, 6]
    assert table["self_samples"].tolist() == [1, 0, 3, 6]
    back = pd.read_csv(io.StringIO(figure_csv(fig)))
    assert list(back.columns[:5]) == ["trace", "id", "label", "parent", "value"]


def test_a_timeline_row_has_its_start_duration_and_event():
    from debugkit.charts.profile import build_trace_timeline_figure

    tl = pd.DataFrame({"lane": ["thread 1", "thread 1", "stream 7"], "lane_kind": ["cpu", "cpu", "gpu"],
                       "start_ms": [0.0, 2.5, 3.0], "dur_ms": [2.0, 1.0, 0.5], "depth": [0, 1, 0],
                       "cat": ["cpu_op", "cpu_op", "kernel"], "name": ["aten::mm", "aten::add", "gemm"],
                       "input_shapes": ["[[2, 3]]", "", ""]})
    table = figure_table(build_trace_timeline_figure(tl)).sort_values("base")
    assert table["event"].tolist() == ["aten::mm", "aten::add", "gemm"]
    assert table["base"].tolist() == [0.0, 2.5, 3.0] and table["x"].tolist() == [2.0, 1.0, 0.5]
    assert table["y"].tolist() == ["thread 1", "thread 1", "stream 7"]
