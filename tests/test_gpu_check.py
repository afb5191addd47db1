"""bench/gpu_check.py (issue 32, item 4): its CPU self-test passes, and without CUDA the
GPU check says so and exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"


def _env(**extra):
    root = str(SCRIPT.parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root, os.environ.get("PYTHONPATH", "")]), **extra}


@pytest.mark.slow
def test_self_test_records_captures_and_replays_them_on_the_cpu(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--self-test", "--out", str(tmp_path / "w"),
                        "--rounds", "2"], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads((tmp_path / "w" / "gpu_check.json").read_text())
    assert report["device"] == "cpu"
    checks = {c["name"]: c for c in report["checks"]}
    for name in ("capture (assert)", "capture (nan)", "replay assert on cpu", "replay nan on cpu"):
        assert checks[name]["ok"] is True, checks[name]
    assert "Target 10 is out of bounds" in checks["replay assert on cpu"]["detail"]
    assert "sample 2 of batch[0] holds NaN in feature 7" in checks["replay nan on cpu"]["detail"]
    assert checks["OOM: memory snapshot written"]["ok"] is None  # CUDA only
    assert checks["device syncs on the training thread per step"]["ok"] is None
    overhead = [c for n, c in checks.items() if n.startswith("overhead on cpu")]
    assert overhead and "recorder" in overhead[0]["detail"] and "tensorboard" in overhead[0]["detail"]
    assert "[PASS] replay nan on cpu" in p.stdout


def test_without_cuda_it_skips_cleanly(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path,
                       env=_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "gpu_check: skipped: no CUDA device here" in p.stdout
    assert not list(tmp_path.iterdir())  # nothing recorded
