"""`debugkit compare` as a user runs it: the console script, from another folder, with
relative paths, on the compare samples (recorded by examples/digits_compare.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from debugkit.errors import MSG_NO_SUCH_PATH, MSG_NOT_A_RUN

from ..conftest import console_script

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"


def debugkit(*args, cwd):
    exe = console_script("debugkit")
    return subprocess.run([exe, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=180)


@pytest.fixture
def here(tmp_path):
    for name in ("digits-compare-base", "digits-compare-lr", "digits-compare-unlabelled"):
        shutil.copytree(SAMPLES / name, tmp_path / "runs" / name)
    return tmp_path


def test_compare_json_of_the_learning_rate_pair(here):
    p = debugkit("compare", "runs/digits-compare-lr", "runs/digits-compare-base", "--json", cwd=here)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert list(res) == ["run", "base", "before_step_0", "divergence", "findings", "paths", "statuses"]
    assert list(res["before_step_0"]) == ["config", "environment", "code", "data", "topology"]
    assert res["paths"] == {"run": "runs/digits-compare-lr", "base": "runs/digits-compare-base"}
    assert res["statuses"] == {"run": "finished", "base": "finished"}
    assert res["before_step_0"]["config"]["rows"] == [
        {"name": "lr", "run": 0.5, "base": 0.1, "status": "differs"}]
    for section in ("environment", "code", "topology"):
        assert res["before_step_0"][section]["status"] == "equal"
    div = res["divergence"]
    assert (div["status"], div["step"], div["first_layer"], div["first_loss_step"]) == \
        ("diverged", 12, "0.weight", 36)
    assert div["finding"]["kind"] == "runs_diverge"
    assert div["following"]["kind"] == "exploding_grad" and div["following"]["step"] == 14
    assert {r["key"] for r in div["series"]} >= {"loss", "0.weight", "__total__"}
    assert res["findings"]["base"] == [] and res["findings"]["run"][0]["kind"] == "exploding_grad"


def test_compare_text_in_section_order(here):
    p = debugkit("compare", "runs/digits-compare-unlabelled", "runs/digits-compare-base", cwd=here)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    i1, i2, i3 = (out.index(h) for h in ("1. What differs before step 0", "2. Where they diverge",
                                          "3. Findings in one and not the other"))
    assert i1 < i2 < i3
    assert "batch spec: differs" in out and "1.range  [-100, 10]  [0, 10]  differs" in out
    assert "unlabelled  0.25  0.0   differs" in out
    assert "no divergence (rank 0 compared)" in out


def test_a_run_with_itself_differs_in_nothing(here):
    p = debugkit("compare", "runs/digits-compare-base", "runs/digits-compare-base", "--json", cwd=here)
    res = json.loads(p.stdout)
    assert res["divergence"]["status"] == "no divergence"
    assert {k: v["status"] for k, v in res["before_step_0"].items() if k != "data"} == {
        "config": "equal", "environment": "equal", "code": "equal", "topology": "equal"}


@pytest.mark.parametrize("args, message", [
    (["runs/missing", "runs/digits-compare-base"], MSG_NO_SUCH_PATH.format(path="runs/missing")),
    (["runs", "runs/digits-compare-base"], MSG_NOT_A_RUN.format(path="runs")),
    (["runs/digits-compare-lr", "runs/digits-compare-base", "--set", "band=3"],
     "--set 'band=3': expected KEY=VALUE with KEY one of band_sigmas"),
    (["runs/digits-compare-lr", "runs/digits-compare-base", "--set", "persist=three"],
     "--set 'persist=three': VALUE must be JSON"),
])
def test_bad_input_is_one_line_and_exit_2(here, args, message):
    before = sorted(p.name for p in (here / "runs").rglob("*"))
    p = debugkit("compare", *args, cwd=here)
    assert p.returncode == 2
    assert p.stderr.startswith("debugkit: error: ") and message in p.stderr
    assert p.stderr.count("\n") == 1
    assert sorted(p.name for p in (here / "runs").rglob("*")) == before  # nothing written


def test_set_overrides_a_threshold(here):
    p = debugkit("compare", "runs/digits-compare-lr", "runs/digits-compare-base", "--json",
                 "--set", "band_sigmas=1000", cwd=here)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["divergence"]["status"] == "no divergence"
