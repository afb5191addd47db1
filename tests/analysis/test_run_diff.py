"""Comparing two runs: pairs of real runs recorded by examples/digits_compare.py, each with
an exact expected answer, and the band's arithmetic on small series."""

from __future__ import annotations

import json
import math
import shutil
from importlib import metadata

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis.run_diff import (
    DEFAULTS,
    compare_runs,
    compute_divergence,
    diff_code,
    diff_config,
    diff_environment,
    noise_sigma,
)
from debugkit.io.compare_facts import read_code_text
from tests.compare_factory import facts, record_pairs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return record_pairs(tmp_path_factory.mktemp("pairs"))


def _compare(runs, a, b):
    return compare_runs(facts(runs[a]), facts(runs[b]))


def _statuses(res):
    b = res["before_step_0"]
    return {"config": b["config"]["status"], "environment": b["environment"]["status"],
            "code": b["code"]["status"], "datasets": b["data"]["datasets"]["status"],
            "batch_spec": b["data"]["batch_spec"]["status"], "topology": b["topology"]["status"]}


ALL_EQUAL = {"config": "equal", "environment": "equal", "code": "equal", "datasets": "equal",
             "batch_spec": "equal", "topology": "equal"}


def test_identical_seeds_nothing_differs_and_no_divergence(runs):
    res = _compare(runs, "same", "base")
    assert _statuses(res) == ALL_EQUAL
    div = res["divergence"]
    assert div["status"] == "no divergence" and div["step"] is None and div["first_layer"] is None
    assert div["finding"] is None and div["following"] is None
    # bit-identical curves: every series compared over all 60 steps, none left the band
    assert {r["common_steps"] for r in div["series"]} == {60}
    assert all(r["step"] is None for r in div["series"])
    assert res["findings"] == {"run": [], "base": []}


def test_another_learning_rate_diverges_at_step_12_in_the_first_layer(runs):
    res = _compare(runs, "lr", "base")
    assert _statuses(res) == {**ALL_EQUAL, "config": "differs"}
    assert res["before_step_0"]["config"]["rows"] == [
        {"name": "lr", "run": 0.5, "base": 0.1, "status": "differs"}]
    div = res["divergence"]
    assert div["status"] == "diverged"
    assert div["step"] == 12
    assert div["first_layer"] == "0.weight" and div["first_layer_step"] == 12
    assert div["first_loss_step"] == 36
    # what follows: the gradient explosion the lr 0.5 run has and the base has not
    assert div["following"]["source"] == "finding"
    assert (div["following"]["kind"], div["following"]["step"], div["following"]["layer"]) == \
        ("exploding_grad", 14, "4.weight")
    f = div["finding"]
    assert (f["kind"], f["step"], f["layer"], f["severity"]) == ("runs_diverge", 12, "0.weight", "warning")
    assert "step 12" in f["message"] and "'0.weight'" in f["message"]
    only = res["findings"]
    assert [x["kind"] for x in only["run"]][:2] == ["exploding_grad", "loss_spike"]
    assert only["base"] == []


def test_label_corrupted_dataset_shows_in_the_batch_spec_and_fingerprint(runs):
    res = _compare(runs, "unlabelled", "base")
    data = res["before_step_0"]["data"]
    assert data["batch_spec"]["status"] == "differs"
    assert data["batch_spec"]["rows"] == [
        {"tensor": "1", "field": "range", "run": [-100, 10], "base": [0, 10], "status": "differs"}]
    rows = {r["name"]: r for r in data["datasets"]["rows"]}
    assert rows["length"]["status"] == "equal" and rows["length"]["run"] == 1437
    assert rows["class"]["status"] == "equal"
    fp = rows["fingerprint"]
    assert fp["status"] == "differs" and fp["items_differing"] == 3 and fp["items_sampled"] == 16
    assert res["before_step_0"]["config"]["rows"] == [
        {"name": "unlabelled", "run": 0.25, "base": 0.0, "status": "differs"}]
    # the silently ignored labels change the curves less than the base's own noise
    assert res["divergence"]["status"] == "no divergence"


def test_another_package_version_written_into_the_environment(runs, tmp_path):
    changed = tmp_path / "numpy-changed"
    shutil.copytree(runs["base"], changed)
    mpath = changed / "manifest.json"
    manifest = json.loads(mpath.read_text())
    installed = manifest["env"]["distributions"]["numpy"]
    assert installed == metadata.version("numpy")
    manifest["env"]["distributions"]["numpy"] = "1.26.4"
    mpath.write_text(json.dumps(manifest))
    res = _compare({"a": changed, "b": runs["base"]}, "a", "b")
    assert _statuses(res) == {**ALL_EQUAL, "environment": "differs"}
    env = res["before_step_0"]["environment"]
    assert env["packages"] == [{"name": "numpy", "run": "1.26.4", "base": installed, "status": "differs"}]
    assert all(r["status"] == "equal" for r in env["fields"])
    assert res["divergence"]["status"] == "no divergence"


def test_what_an_older_run_did_not_record_is_unknown_not_equal(runs, tmp_path):
    old = tmp_path / "older"
    shutil.copytree(runs["base"], old)
    m = json.loads((old / "manifest.json").read_text())
    for k in ("distributions", "hardware", "os", "nccl_version"):
        del m["env"][k]
    del m["distributed"]
    (old / "manifest.json").write_text(json.dumps(m))
    (old / "data.json").unlink()
    (old / "ranks" / "0" / "batch_spec-000.json").unlink()
    res = _compare({"old": old, "b": runs["base"]}, "old", "b")
    st = _statuses(res)
    assert st["environment"] == st["datasets"] == st["batch_spec"] == st["topology"] == "unknown"
    env = res["before_step_0"]["environment"]
    fields = {r["name"]: r["status"] for r in env["fields"]}
    for name in ("nccl", "gpu_driver", "cpu_model", "os", "kernel"):
        assert fields[name] == "unknown"
    assert fields["python"] == fields["torch"] == "equal"
    # the old run listed only a few packages: the others are unknown, never "only in base"
    assert env["packages_complete"] == {"run": False, "base": True}
    assert {r["status"] for r in env["packages"]} == {"unknown"}
    assert {r["name"]: r["status"] for r in res["before_step_0"]["topology"]["rows"]}["backend"] == "unknown"
    assert res["divergence"]["status"] == "no divergence"  # the curves are still there


def test_code_diff_when_both_factory_files_are_at_hand(tmp_path):
    from debugkit._fsutil import sha256_file

    a, b = tmp_path / "model_a.py", tmp_path / "model_b.py"
    a.write_text("def build():\n    return Linear(64, 10)\n")
    b.write_text("def build():\n    return Linear(64, 12)\n")
    ca = {"spec": "model_a:build", "file": str(a), "sha256": sha256_file(a)}
    cb = {"spec": "model_b:build", "file": str(b), "sha256": sha256_file(b)}
    res = diff_code(ca, cb, read_code_text(ca), read_code_text(cb))
    assert res["status"] == "differs"
    assert "-    return Linear(64, 12)\n+    return Linear(64, 10)\n" in res["diff"]
    # a file edited since its run was recorded is not diffed: it is another file now
    b.write_text("def build():\n    return Linear(64, 99)\n")
    assert read_code_text(cb) is None
    res = diff_code(ca, cb, read_code_text(ca), read_code_text(cb))
    assert res["diff"] is None and "no longer matches" in res["diff_note"]
    assert diff_code(ca, None)["status"] == "unknown"


def test_config_is_flattened_and_only_differing_keys_are_listed():
    res = diff_config({"opt": {"lr": 0.1, "betas": [0.9, 0.99]}, "seed": 0, "extra": 1},
                      {"opt": {"lr": 0.1, "betas": [0.9, 0.999]}, "seed": 0, "warmup": 5})
    assert res["rows"] == [
        {"name": "extra", "run": 1, "base": None, "status": "only in run"},
        {"name": "opt.betas", "run": [0.9, 0.99], "base": [0.9, 0.999], "status": "differs"},
        {"name": "warmup", "run": None, "base": 5, "status": "only in base"}]
    assert diff_config(None, {"a": 1})["status"] == "unknown"


def test_environment_rows_name_what_differs():
    base = {"python": "3.11.7", "torch": "2.4.0", "cuda_version": "12.1", "cudnn_version": 90100,
            "nccl_version": "2.20.5", "gpus": [{"name": "NVIDIA A100-SXM4-80GB"}],
            "hardware": {"gpu_model": "NVIDIA A100-SXM4-80GB", "gpu_driver": "535.104.05",
                         "cpu_model": "AMD EPYC 7742"},
            "os": {"distro": "Ubuntu 22.04.4 LTS", "release": "5.15.0"}, "platform": "Linux",
            "distributions": {"torch": "2.4.0", "numpy": "1.26.4"},
            "pip_check": {"ok": True, "conflicts": []}}
    run = json.loads(json.dumps(base))
    run["hardware"]["gpu_driver"] = "550.54.15"
    run["distributions"]["apex"] = "0.1"
    run["pip_check"] = {"ok": False, "conflicts": ["apex 0.1 requires torch<2.4"]}
    res = diff_environment(run, base)
    assert [r["name"] for r in res["fields"] if r["status"] != "equal"] == ["gpu_driver"]
    assert res["packages"] == [{"name": "apex", "run": "0.1", "base": None, "status": "only in run"}]
    assert res["pip_check"]["run"] == {"ok": False, "conflicts": ["apex 0.1 requires torch<2.4"],
                                       "status": "broken"}
    assert res["pip_check"]["base"]["status"] == "ok"
    assert diff_environment(None, base)["status"] == "unknown"


def test_noise_sigma_is_the_mad_of_first_differences():
    x = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0])  # diffs +-1, median 0 -> MAD 1
    assert noise_sigma(x) == pytest.approx(1.4826 / math.sqrt(2))
    # one outlier moves the MAD little (diffs' median 1, MAD 2); a standard deviation jumps
    y = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 100.0, 1.0, 0.0, 1.0])
    assert noise_sigma(y) == pytest.approx(1.4826 * 2 / math.sqrt(2))
    assert np.std(np.diff(y)) / math.sqrt(2) > 30
    assert noise_sigma(np.array([1.0, np.nan])) is None


def _frames(loss_run, loss_base):
    def scal(v):
        return pd.DataFrame({"step": np.arange(len(v)), "rank": 0, "key": "loss",
                             "value": np.asarray(v, float), "wall_time": 0.0})
    empty = pd.DataFrame({"step": pd.Series([], dtype="int64"), "rank": pd.Series([], dtype="int32"),
                          "layer": pd.Categorical([]), "grad_norm": pd.Series([], dtype="float64")})
    return scal(loss_run), empty, scal(loss_base), empty


def test_one_point_outside_the_band_is_not_a_divergence():
    rng = np.random.default_rng(0)
    base = 2.0 + 0.01 * rng.standard_normal(40)
    run = base.copy()
    run[10] += 1.0  # a single spike: back inside at step 11
    assert compute_divergence(*_frames(run, base))["status"] == "no divergence"
    run[20:] += 1.0  # a level shift that stays
    div = compute_divergence(*_frames(run, base))
    assert div["status"] == "diverged" and div["step"] == 20 and div["first_loss_step"] == 20
    assert compute_divergence(*_frames(run, base), config={"persist": 1})["step"] == 10


def test_nan_in_the_run_is_outside_the_band_even_at_its_last_step():
    base = 2.0 + 0.01 * np.sin(np.arange(30))
    run = base[:21].copy()
    run[20] = np.nan  # the run stopped at its first NaN loss
    div = compute_divergence(*_frames(run, base))
    assert div["step"] == 20
    assert math.isinf(div["series"].iloc[0]["excess"])


def test_defaults_are_documented_in_docs_compare():
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "compare.md").read_text()
    for key in DEFAULTS:
        assert f"`{key}`" in text


def test_what_follows_a_divergence_is_the_failure_capture_first(sample_runs):
    from debugkit.analysis.run_diff import following_event
    from debugkit.diagnose import diagnose
    from debugkit.io.run import open_run

    bad = open_run(sample_runs / "digits-bad-label")
    found = diagnose(bad)
    f = following_event(70, bad.failures(), found)
    assert (f["source"], f["id"], f["kind"], f["step"]) == \
        ("failure", "r0-s0000075-exception", "exception", 75)
    assert "Target 12 is out of bounds" in f["message"]
    assert following_event(76, bad.failures(), found) is None
    assert following_event(None, bad.failures(), found) is None
