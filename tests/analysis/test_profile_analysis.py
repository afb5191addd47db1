"""Aggregating sampled profiles: exact numbers on small profiles built in the test."""

from __future__ import annotations

import numpy as np
import pytest

from debugkit.analysis import profile as ap
from debugkit.io.collapsed import read_collapsed

from ..conftest import SAMPLE_RUNS

# A training loop in raw/collapsed form (what `py-spy record --format raw --threads` writes).
T = "thread (100): MainThread;<module> (train.py:1);main (train.py:40)"
LOOP = T + ";train (train.py:{line})"
TRAIN = "\n".join([
    f"{T};<module> (train.py:2);_find_and_load (<frozen importlib._bootstrap>:1176);"
    "<module> (torch/utils/data/dataloader.py:1) 30",                       # import: outside the loop
    f"{T};train (train.py:10);load_data (train.py:20) 20",                    # set-up before the loop
    f"{LOOP.format(line=12)};_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725);"
    "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1505) 25",
    f"{LOOP.format(line=13)};Module._wrapped_call_impl (torch/nn/modules/module.py:1750);"
    "Module._call_impl (torch/nn/modules/module.py:1761);Net.forward (model.py:8) 20",
    f"{LOOP.format(line=13)};cross_entropy (torch/nn/functional.py:3555) 5",
    f"{LOOP.format(line=14)};Tensor.backward (torch/_tensor.py:623);backward (torch/autograd/__init__.py:395);"
    "_engine_run_backward (torch/autograd/graph.py:979) 30",
    f"{LOOP.format(line=15)};Optimizer.step (torch/optim/optimizer.py:500);SGD.step (torch/optim/sgd.py:80) 10",
    f"{LOOP.format(line=14)};log_metrics (train.py:30) 10",                   # inside the loop, no phase
    "thread (101): pin;Thread.run (threading.py:982);Condition.wait (threading.py:327) 7",
]) + "\n"


@pytest.fixture
def prof(tmp_path):
    f = tmp_path / "train.txt"
    f.write_text(TRAIN)
    return read_collapsed(f)


def row(table, name):
    r = table[table["name"] == name]
    assert len(r) == 1, (name, r)
    return r.iloc[0]


def test_function_table_self_and_total(prof):
    t = ap.compute_function_table(prof, by="function")
    assert int(t["self_samples"].sum()) == prof.total_samples == 157
    assert row(t, "_engine_run_backward")[["self_samples", "total_samples"]].tolist() == [30, 30]
    assert row(t, "train")[["self_samples", "total_samples"]].tolist() == [0, 120]
    assert row(t, "main")[["self_samples", "total_samples"]].tolist() == [0, 150]
    assert row(t, "Condition.wait")["self_fraction"] == pytest.approx(7 / 157)
    # sorted by self samples
    assert t["self_samples"].is_monotonic_decreasing


def test_by_frame_keeps_lines_apart(prof):
    t = ap.compute_function_table(prof, by="frame")
    train = t[t["name"] == "train"].sort_values("line")
    assert train["line"].tolist() == [10, 12, 13, 14, 15]
    assert train["total_samples"].tolist() == [20, 25, 25, 40, 10]


def test_thread_filter(prof):
    main = prof.thread_ids("main")
    assert prof.threads.set_index("tid").loc[101, "role"] == "thread"
    t = ap.compute_function_table(prof, main, by="function")
    assert "Condition.wait" not in set(t["name"])
    assert row(t, "main")["total_fraction"] == 1.0


def test_recursion_counts_once_in_total(tmp_path):
    f = tmp_path / "r.txt"
    f.write_text("a (x.py:1);b (x.py:2);a (x.py:1);b (x.py:2) 4\na (x.py:1) 1\n")
    t = ap.compute_function_table(read_collapsed(f), by="function")
    assert row(t, "a")[["self_samples", "total_samples"]].tolist() == [1, 5]
    assert row(t, "b")[["self_samples", "total_samples"]].tolist() == [4, 4]


def test_flame_tree_sums_and_folding(tmp_path):
    lines = ["root (x.py:1);big (x.py:2) 9990"] + [f"root (x.py:1);tiny{i} (x.py:{i + 10}) 1" for i in range(10)]
    f = tmp_path / "f.txt"
    f.write_text("\n".join(lines) + "\n")
    prof = read_collapsed(f)
    tree = ap.compute_flame_tree(prof, min_fraction=0.001)  # 0.1 % of 10,000 = 10 samples
    assert tree["name"].tolist() == ["all", "root", "big", "10 frames under 0.1 %"]
    assert tree["samples"].tolist() == [10000, 10000, 9990, 10]
    assert tree["folded"].tolist() == [0, 0, 0, 10]
    assert tree["parent_id"].tolist() == [-1, 0, 1, 1]
    # with folding off every frame is there
    full = ap.compute_flame_tree(prof, min_fraction=0.0)
    assert len(full) == 13 and full["folded"].sum() == 0
    # children never exceed their parent
    for t in (tree, full):
        kids = t.groupby("parent_id")["samples"].sum()
        own = t.set_index("node_id")
        for p, s in kids.items():
            if p >= 0:
                assert s + own.loc[p, "self_samples"] == own.loc[p, "samples"]


def test_search(prof):
    tree = ap.compute_flame_tree(prof, min_fraction=0)
    m = ap.match_frames(tree, "BACKWARD")
    assert sorted(tree.loc[m, "name"]) == ["Tensor.backward", "_engine_run_backward", "backward"]
    assert not ap.match_frames(tree, "   ").any()
    assert ap.search_summary(prof, "backward") == {"matches": 3, "samples": 30, "fraction": 30 / 157}
    assert ap.search_summary(prof, "model.py")["samples"] == 20
    assert ap.search_summary(prof, "nothing-like-this")["samples"] == 0


def test_step_breakdown(prof):
    bd, info = ap.compute_step_breakdown(prof, prof.thread_ids("main"))
    got = dict(zip(bd["phase"], bd["samples"]))
    assert got == {"data": 25, "forward": 25, "backward": 30, "optimizer": 10, "other": 10}
    assert info["loop"] == "train (train.py, lines 12-15)"
    assert info["loop_samples"] == 100 and info["outside_samples"] == 50
    assert bd["fraction"].sum() == pytest.approx(1.0)
    assert "Backward takes the most time: 30%" in ap.describe_breakdown(bd, info)


def test_breakdown_names_data_waits(tmp_path):
    f = tmp_path / "d.txt"
    f.write_text("train (t.py:5);_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725) 60\n"
                 "train (t.py:6);Module._call_impl (torch/nn/modules/module.py:1761) 40\n")
    bd, info = ap.compute_step_breakdown(read_collapsed(f))
    assert dict(zip(bd["phase"], bd["samples"]))["data"] == 60
    assert "60% is spent waiting for data" in ap.describe_breakdown(bd, info)


def test_a_loop_that_only_waited_for_data_is_the_loop_not_the_queue_it_waited_in(tmp_path):
    # CI, loaded: every main-thread sample of a short data-bound run caught the loop in
    # the DataLoader's Queue.get, and the loop was named after Queue.get (it covered all
    # the phase samples and was the deepest frame outside a phase's own).
    f = tmp_path / "d.txt"
    q = ("train (t.py:5);_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:733);"
         "_MultiProcessingDataLoaderIter._next_data (torch/utils/data/dataloader.py:1480);"
         "Queue.get (/usr/lib/python3.11/multiprocessing/queues.py:113)")
    f.write_text(f"<module> (t.py:40);{q};_poll (/usr/lib/python3.11/multiprocessing/connection.py:440) 50\n"
                 f"<module> (t.py:40);{q} 10\n")
    bd, info = ap.compute_step_breakdown(read_collapsed(f))
    assert info["loop"].startswith("train (t.py") and dict(zip(bd["phase"], bd["samples"]))["data"] == 60


def test_no_training_loop(tmp_path):
    f = tmp_path / "n.txt"
    f.write_text("main (x.py:1);work (x.py:2) 5\n")
    bd, info = ap.compute_step_breakdown(read_collapsed(f))
    assert info["loop"] is None and bd["samples"].sum() == 0
    assert "not a training loop" in ap.describe_breakdown(bd, info)


def test_diff(tmp_path):
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    a.write_text("main (t.py:1);load (t.py:2) 20\nmain (t.py:1);fwd (t.py:3) 80\n")
    b.write_text("main (t.py:1);load (t.py:9) 60\nmain (t.py:1);fwd (t.py:3) 40\nmain (t.py:1);new (t.py:4) 100\n")
    pa, pb = read_collapsed(a), read_collapsed(b)
    d = ap.compute_profile_diff(pa, pb).set_index("name")
    # load moved line (a code change) but is the same function: 20 % -> 30 %
    assert d.loc["load", "base_self_fraction"] == pytest.approx(0.2)
    assert d.loc["load", "new_self_fraction"] == pytest.approx(0.3)
    assert d.loc["load", "self_delta"] == pytest.approx(0.1)
    assert d.loc["new", "self_delta"] == pytest.approx(0.5)
    assert d.loc["fwd", "self_delta"] == pytest.approx(0.2 - 0.8)
    assert list(d.index[:2]) == ["new", "load"]  # what got slower first
    tree = ap.compute_diff_tree(pa, pb, min_fraction=0).set_index("name")
    assert tree.loc["load", "samples"] == 60 and tree.loc["load", "base_samples"] == 20
    assert tree.loc["load", "delta"] == pytest.approx(0.1)
    assert tree.loc["new", "base_fraction"] == 0.0
    assert tree.loc["all", "delta"] == pytest.approx(0.0)


def test_frame_package():
    assert ap.frame_package("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py") == "torch"
    assert ap.frame_package("threading.py") == "python"
    assert ap.frame_package("/usr/lib/python3.11/threading.py") == "python"
    assert ap.frame_package("<frozen importlib._bootstrap>") == "importlib"
    assert ap.frame_package("/home/me/train.py") == "your code"
    assert ap.frame_package("train.py") == "your code"
    # debugkit's own modules, installed or in a checkout; a program in a folder that is
    # only named debugkit (a clone of this repository) is the user's code
    assert ap.frame_package("/usr/lib/python3.11/site-packages/debugkit/recorder/writer.py") == "debugkit"
    assert ap.frame_package("/src/debugkit/debugkit/recorder/writer.py") == "debugkit"
    assert ap.frame_package("debugkit/recorder/writer.py") == "debugkit"
    assert ap.frame_package("/tmp/tmp.x/debugkit/examples/digits.py") == "your code"


def test_summary_contract(prof):
    s = ap.summarize_profile(prof, top=3)
    assert s["format"] == "raw" and s["samples"] == 157
    assert set(s["threads"][0]) == {"id", "name", "pid", "tid", "role", "process", "samples"}
    assert len(s["top_self"]) == 3
    assert set(s["top_self"][0]) == {"name", "file", "line", "samples", "fraction"}
    assert s["top_self"][0] == {"name": "<module>", "file": "torch/utils/data/dataloader.py",
                                "line": 1, "samples": 30, "fraction": round(30 / 157, 6)}
    assert s["top_self"][1]["name"] == "_engine_run_backward"
    assert s["top_total"][0]["name"] == "<module>" and s["top_total"][0]["samples"] == 150
    assert s["step_breakdown"]["phases"]["backward"]["samples"] == 30


def test_digits_sample_breakdown_and_diff():
    """The committed real profiles: 2 DataLoader workers versus none."""
    from debugkit.io.run import open_run
    from debugkit.io.run_profiles import get_profile, read_entry

    run = open_run(SAMPLE_RUNS / "digits-profiled")
    w2 = read_entry(get_profile(run, "train"))
    w0 = read_entry(get_profile(run, "train-no-workers"))
    assert w2.total_samples == 46959 and w0.total_samples == 14992
    assert (w2.threads["role"] == "dataloader").sum() == 18 and "dataloader" not in set(w0.threads["role"])
    bd2, info2 = ap.compute_step_breakdown(w2, w2.thread_ids("main"))
    bd0, info0 = ap.compute_step_breakdown(w0, w0.thread_ids("main"))
    assert info2["loop"].startswith("train (") and info2["loop"].endswith("digits.py, lines 94-101)")
    assert dict(zip(bd2["phase"], bd2["samples"])) == {"data": 846, "forward": 880, "backward": 1817,
                                                        "optimizer": 105, "other": 147}
    assert dict(zip(bd0["phase"], bd0["samples"]))["data"] == 124
    d = ap.compute_profile_diff(w0, w2, w0.thread_ids("main"), w2.thread_ids("main"))
    top = d.iloc[0]
    assert top["self_delta"] > 0 and np.isfinite(d["self_delta"]).all()


def test_data_wait_finding(tmp_path):
    f = tmp_path / "d.txt"
    f.write_text("train (t.py:5);_BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py:725) 40\n"
                 "train (t.py:6);Module._call_impl (torch/nn/modules/module.py:1761) 60\n")
    bd, info = ap.compute_step_breakdown(read_collapsed(f))
    (finding,) = ap.detect_data_wait(bd, info, "p1")
    assert finding.kind == "dataloader_bound" and finding.severity == "warning"
    assert finding.evidence["data_fraction"] == 0.4
    assert "spends 40% of its time waiting for data" in finding.message
    assert ap.detect_data_wait(bd, info, "p1", threshold=0.5) == []


def test_diagnose_reads_the_latest_profile():
    from debugkit.diagnose import diagnose
    from debugkit.io.run import open_run

    findings = diagnose(open_run(SAMPLE_RUNS / "digits-profiled"), {"profiles": {"data_wait_threshold": 0.2}})
    kinds = [f.kind for f in findings]
    # the latest sampled profile is the no-workers one: 4 % data, under the threshold
    assert "dataloader_bound" not in kinds
    findings = diagnose(open_run(SAMPLE_RUNS / "digits-profiled"), {"profiles": {"data_wait_threshold": 0.04}})
    (f,) = [f for f in findings if f.kind == "dataloader_bound"]
    assert f.evidence["profile"] == "train-no-workers"
