"""The `debugkit` command as a user runs it: real subprocesses, exit codes, stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from debugkit.errors import MSG_NO_SUCH_PATH, MSG_NOT_A_RUN

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"


def dk(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "debugkit", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_info_json_of_the_crashed_sample():
    p = dk("info", SAMPLES / "digits-bad-label", "--json")
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["status"] == "failed" and info["name"] == "digits-bad-label"
    assert info["manifest"]["schema_version"] == "1.0"
    assert info["manifest"]["model_factory"] == "examples.digits:build_model"
    # loss, epoch and lr per completed step; the failing step logged only its lr
    # "layers": the run format 1.1 table (issue 33); this sample recorded none; "requests":
    # format 1.2's table of inference runs (issue 34); a training run has none
    assert info["row_counts"] == {"scalars": 75 * 3 + 1, "grads": 75 * 7, "memory": 76, "steps": 76,
                                  "layers": 0, "requests": 0}
    assert info["kind"] == "training" and info["requests"] is None
    (f,) = info["failures"]
    assert f["error_type"] == "IndexError" and f["step"] == 75 and 1474 in f["dataset_indices"]


def test_info_text():
    p = dk("info", SAMPLES / "digits-mlp")
    assert p.returncode == 0
    assert "status:  finished" in p.stdout and "failures: none" in p.stdout


@pytest.mark.parametrize("target,msg", [
    ("no/such/run", MSG_NO_SUCH_PATH.format(path="no/such/run")),
    ("docs", MSG_NOT_A_RUN.format(path="docs")),
])
def test_bad_paths_give_one_line_and_exit_2(target, msg):
    p = dk("info", target)
    assert p.returncode == 2
    assert p.stderr == f"debugkit: error: {msg}\n"
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_broken_run_gives_one_line_and_exit_2(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "manifest.json").write_text('{"schema_version": "2.0"}')
    p = dk("info", d)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "newer than this debugkit (1.x)" in p.stderr


def test_diagnose_json_shape():
    p = dk("diagnose", SAMPLES / "digits-bad-label", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) >= {"run", "status", "findings"}
    kinds = [f["kind"] for f in out["findings"]]
    assert "step_failure" in kinds
    sf = next(f for f in out["findings"] if f["kind"] == "step_failure")
    assert set(sf) == {"kind", "step", "rank", "layer", "severity", "message", "evidence"}
    assert sf["step"] == 75 and sf["severity"] == "error"


def test_ui_refuses_a_missing_path():
    p = dk("ui", "nowhere-at-all")
    assert p.returncode == 2 and p.stderr == f"debugkit: error: {MSG_NO_SUCH_PATH.format(path='nowhere-at-all')}\n"


def test_no_command_prints_help_and_exits_2():
    p = dk()
    assert p.returncode == 2 and "usage: debugkit" in p.stderr
