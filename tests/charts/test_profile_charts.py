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


def test_flamegraph_is_an_icicle_of_the_tree(prof):
    tree = ap.compute_flame_tree(prof)
    fig = cp.build_flamegraph_figure(tree)
    (tr,) = fig.data
    assert tr.type == "icicle" and tr.branchvalues == "total"
    assert list(tr.labels) == ["all", "main", "train", "Tensor.backward", "Module._call_impl", "log"]
    assert list(tr.values) == [100, 100, 100, 60, 30, 10]
    assert list(tr.parents) == ["", "0", "1", "2", "2", "2"]
    colors = list(tr.marker.colors)
    assert colors[3] == cp.PACKAGE_COLORS["torch"] and colors[5] == cp.PACKAGE_COLORS["your code"]
    assert tr.tiling.flip is None and tr.level is None
    assert tr.customdata[3][0] == "torch/_tensor.py"  # by function: no line
    (by_line,) = cp.build_flamegraph_figure(ap.compute_flame_tree(prof, by="frame")).data
    where = dict(zip(by_line.labels, (c[0] for c in by_line.customdata)))
    assert where["Tensor.backward"] == "torch/_tensor.py:623"
    assert sorted(c[0] for lab, c in zip(by_line.labels, by_line.customdata) if lab == "train") == [
        "train.py:5", "train.py:6", "train.py:7"]


def test_search_highlight_and_zoom(prof):
    tree = ap.compute_flame_tree(prof)
    mask = ap.match_frames(tree, "backward")
    fig = cp.build_flamegraph_figure(tree, highlight=mask, root_id=2, flame=True)
    (tr,) = fig.data
    colors = list(tr.marker.colors)
    assert [c == cp.HIGHLIGHT for c in colors] == [False, False, False, True, False, False]
    assert set(colors) - {cp.HIGHLIGHT} == {cp.DIMMED}
    assert tr.level == "2" and tr.tiling.flip == "y" and tr.pathbar.side == "bottom"


def test_folded_nodes_are_grey(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("a (x.py:1);b (x.py:2) 999\n" "a (x.py:1);c (x.py:3) 1\n")
    tree = ap.compute_flame_tree(read_collapsed(f), min_fraction=0.01)
    (tr,) = cp.build_flamegraph_figure(tree).data
    assert tr.labels[-1] == "1 frame under 1 %" and tr.marker.colors[-1] == cp.FOLDED


def test_diff_flamegraph_colours_by_change(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("m (t.py:1);x (t.py:2) 50\nm (t.py:1);y (t.py:3) 50\n")
    b.write_text("m (t.py:1);x (t.py:2) 80\nm (t.py:1);y (t.py:3) 20\n")
    tree = ap.compute_diff_tree(read_collapsed(a), read_collapsed(b))
    (tr,) = cp.build_diff_flamegraph_figure(tree).data
    d = dict(zip(tr.labels, tr.marker.colors))
    assert d["x"] == pytest.approx(30.0) and d["y"] == pytest.approx(-30.0) and d["m"] == pytest.approx(0.0)
    assert tr.marker.cmid == 0 and tr.marker.cmax == pytest.approx(30.0)


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
