"""A checkpointing job killed mid-run resumes from its last good checkpoint and ends with
exactly the weights of a job that never stopped (examples/digits_resumable.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from debugkit import open_run
from debugkit.checkpoints import DIR, read_index
from tests.conftest import ROOT


def _job(*args):
    return subprocess.run([sys.executable, "-m", "examples.digits_resumable", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def _final(run_dir):
    last = max(read_index(run_dir), key=lambda e: e["step"])
    d = run_dir / DIR / last["dir"]
    return last["step"], load_file(str(d / "model.safetensors")), torch.load(
        d / "optimizer.pt", weights_only=True)


@pytest.mark.slow  # training jobs, one killed and resumed: 41.4 CPU s (tests._cputime)
def test_killed_truncated_and_resumed_job_is_bit_identical_to_an_uninterrupted_one(tmp_path):
    a, b = tmp_path / "straight", tmp_path / "killed"
    assert _job("--out", a).returncode == 0
    killed = _job("--out", b, "--kill-at-step", "100")
    assert killed.returncode == -9  # SIGKILL: nothing flushed or closed
    assert [e["step"] for e in read_index(b)] == [30, 60, 90]
    assert _job("--out", b, "--truncate-newest").returncode == 0
    resumed = _job("--out", b)
    assert resumed.returncode == 0, resumed.stderr
    assert "started at step 60" in resumed.stdout
    assert "checkpoint at step 90 fails verification (model.safetensors has" in resumed.stderr
    step_a, wa, oa = _final(a)
    step_b, wb, ob = _final(b)
    assert step_a == step_b == 150
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    mom_a = [s["momentum_buffer"] for s in oa["state"].values()]
    mom_b = [s["momentum_buffer"] for s in ob["state"].values()]
    assert all(torch.equal(x, y) for x, y in zip(mom_a, mom_b, strict=True))
    run = open_run(b)
    assert run.status == "finished" and len(run.manifest["resumed_at"]) == 1
    assert run.checkpoints()["ok"].all()  # the truncated step-90 checkpoint was rewritten


def test_the_resumed_sample_run():
    run = open_run(ROOT / "sample_runs" / "digits-resumed")
    cps = run.checkpoints()
    assert cps["step"].tolist() == [30.0, 60.0, 90.0, 120.0, 150.0] and cps["ok"].all()
    assert run.status == "finished" and run.manifest["resumed_at"]
    resumed = run.scalars().query("key == 'resumed_from'")
    assert resumed["value"].tolist() == [60.0]
