"""Profile figures: what they draw, read from the traces and layout."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis import profile as ap
from debugkit.charts import profile as cp
from debugkit.io.collapsed import read_collapsed

RAW = ("main (train.py:1);train (train.py:5);Tensor.backward (torch/_tensor.py:623) 60\n"
       "main (train.py:1);train (train.py:7);Module._call_impl (torch/nn/modules/module.py:1761) 30\n"
       "main (train.py:1);train (train.py:6);log (train.py:9) 10\n")


@pytest.fixture
def prof(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text(RAW)
    return read_collapsed(f)


def test_flamegraph_data_is_the_tree_with_parents_as_rows(prof):
    tree = ap.compute_flame_tree(prof)
    d = cp.flamegraph_data(tree)
    assert d["kind"] == "flamegraph"
    assert d["name"] == ["all", "main", "train", "Tensor.backward", "Module._call_impl", "log"]
    assert d["samples"] == [100, 100, 100, 60, 30, 10]
    assert d["parent"] == [-1, 0, 1, 2, 2, 2]
    assert d["color"][3] == cp.PACKAGE_COLORS["torch"] and d["color"][5] == cp.PACKAGE_COLORS["your code"]
    assert d["color"][0] == cp.ROOT_COLOR
    assert d["root"] == -1 and d["flame"] is False and d["levels"] == cp.VISIBLE_LEVELS
    # the hover's lines under the name: where, samples and share, self samples, package
    assert d["tip"][3].split("\n") == ["torch/_tensor.py", "60 samples (60.00 % of all)", "self: 60", "torch"]
    assert d["label"] == "Icicle chart of 6 frames; widest under the root: main 100 %"
    by_line = cp.flamegraph_data(ap.compute_flame_tree(prof, by="frame"))
    where = {n: t.split("\n")[0] for n, t in zip(by_line["name"], by_line["tip"])}
    assert where["Tensor.backward"] == "torch/_tensor.py:623"
    assert sorted(t.split("\n")[0] for n, t in zip(by_line["name"], by_line["tip"]) if n == "train") == [
        "train.py:5", "train.py:6", "train.py:7"]


def test_parents_are_rows_whatever_the_node_ids(prof):
    """The tree's node ids need not be its row numbers (a loop tree's are not): the data
    gives each frame its parent's row."""
    tree = ap.compute_flame_tree(prof)
    tree = tree.iloc[[0, 1, 2, 5, 3, 4]].reset_index(drop=True)
    tree["node_id"] = tree["node_id"] * 10 + 7
    tree["parent_id"] = np.where(tree["parent_id"] < 0, -1, tree["parent_id"] * 10 + 7)
    d = cp.flamegraph_data(tree, root_id=27)
    assert d["parent"] == [-1, 0, 1, 2, 2, 2] and d["name"][3] == "log"
    assert d["root"] == 2  # node 27 ("train") is row 2


def test_search_highlight_and_zoom(prof):
    tree = ap.compute_flame_tree(prof)
    mask = ap.match_frames(tree, "backward")
    d = cp.flamegraph_data(tree, highlight=mask, root_id=2, flame=True)
    assert [c == cp.HIGHLIGHT for c in d["color"]] == [False, False, False, True, False, False]
    assert set(d["color"]) - {cp.HIGHLIGHT} == {cp.DIMMED}
    assert d["root"] == 2 and d["flame"] is True
    assert d["label"].startswith("Flame graph of 6 frames")
    assert cp.flamegraph_data(tree, root_id=99)["root"] == -1  # a node it does not hold: the root


def test_folded_nodes_are_grey_and_dark_pages_get_dark_grey(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("a (x.py:1);b (x.py:2) 999\n" "a (x.py:1);c (x.py:3) 1\n")
    tree = ap.compute_flame_tree(read_collapsed(f), min_fraction=0.01)
    d = cp.flamegraph_data(tree)
    assert d["name"][-1] == "1 frame under 1 %" and d["color"][-1] == cp.FOLDED
    dark = cp.flamegraph_data(tree, dark=True)
    assert dark["color"][-1] == "#2f2f2f" and dark["color"][0] == "#4a4a4a"  # folded, root
    assert dark["color"][1:-1] == d["color"][1:-1]  # package colours kept


def test_diff_flamegraph_colours_by_change(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("m (t.py:1);x (t.py:2) 50\nm (t.py:1);y (t.py:3) 50\n")
    b.write_text("m (t.py:1);x (t.py:2) 80\nm (t.py:1);y (t.py:3) 20\n")
    tree = ap.compute_diff_tree(read_collapsed(a), read_collapsed(b))
    d = cp.diff_flamegraph_data(tree)
    assert d["kind"] == "diff-flamegraph" and d["lim"] == pytest.approx(30.0)
    color = dict(zip(d["name"], d["color"]))
    # the ends of plotly's RdBu_r scale (+30 points red, -30 blue), white-ish for no change
    assert color["x"] == "#67001f" and color["y"] == "#053061" and color["m"] == "#f7f7f7"
    tip = dict(zip(d["name"], d["tip"]))
    assert tip["x"].split("\n")[1:] == ["before: 50.00 %", "after: 80.00 %", "change: +30.00 points"]
    table = cp.flamegraph_table(tree, diff=True)
    assert table.set_index("frame").loc["y", "change_points"] == pytest.approx(-30.0)


def test_flamegraph_table_is_one_row_per_frame(prof):
    tree = ap.compute_flame_tree(prof, by="frame")
    t = cp.flamegraph_table(tree)
    assert list(t.columns) == ["frame", "file", "depth", "parent_row", "samples", "self_samples",
                               "percent_of_all", "package", "folded"]
    assert len(t) == len(tree) and t["samples"].iloc[0] == 100
    row = t[t["frame"] == "Tensor.backward"].iloc[0]
    assert row["file"] == "torch/_tensor.py:623" and row["percent_of_all"] == 60.0
    assert t["frame"].iloc[row["parent_row"]] == "train"


def test_step_breakdown_bars(prof):
    bd, _ = ap.compute_step_breakdown(prof)
    fig = cp.build_step_breakdown_figure(bd)
    assert [t.name for t in fig.data] == ["data loading", "forward", "backward", "optimizer", "other (in the loop)"]
    assert [t.x[0] for t in fig.data] == pytest.approx([0, 30, 60, 0, 10])
    assert fig.data[2].marker.color == cp.PHASE_COLORS["backward"] and fig.layout.barmode == "stack"


def test_trace_timeline_and_steps():
    tl = pd.DataFrame({"lane": ["main", "main", "GPU 0 · stream 7"], "lane_kind": ["cpu", "cpu", "gpu"],
                       "name": ["ProfilerStep#1", "aten::mm", "sgemm"], "cat": ["user_annotation", "cpu_op", "kernel"],
                       "start_ms": [0.0, 1.0, 1.5], "dur_ms": [10.0, 2.0, 1.0], "depth": [0, 1, 0],
                       "input_shapes": ["", "[[2,2]]", ""]})
    fig = cp.build_trace_timeline_figure(tl)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"user_annotation", "cpu_op", "kernel"}
    assert list(by_name["cpu_op"].base) == [1.0] and list(by_name["cpu_op"].x) == [2.0]
    assert by_name["cpu_op"].width[0] < by_name["user_annotation"].width[0]  # nested drawn thinner
    assert list(fig.layout.yaxis.categoryarray) == ["GPU 0 · stream 7", "main"]  # bottom up: CPU lanes on top
    steps = pd.DataFrame({"step": [1], "start_ms": [0.0], "dur_ms": [10.0], "data_ms": [1.0], "forward_ms": [2.0],
                          "backward_ms": [3.0], "optimizer_ms": [1.0], "other_ms": [3.0]})
    sf = cp.build_trace_steps_figure(steps)
    assert [t.y[0] for t in sf.data] == [1.0, 2.0, 3.0, 1.0, 3.0] and np.all([t.x[0] == "step 1" for t in sf.data])
