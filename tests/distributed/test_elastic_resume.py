"""A torchrun job whose worker dies mid-run is started again, resumes from its last
checkpoint with resume_latest, and ends with the weights of a job that never failed.

The restart is a second torchrun (a scheduler re-submitting the job). torchrun's own
in-place restart (--max-restarts) was tried first: on this 2-core machine about one
restart in six hung in the restarted workers' set-up (gloo on loopback), which is not
debugkit's to fix, and a test that hangs now and then proves nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from debugkit import open_run

from .harness import ROOT


def _job(out, final, *extra, restarts=0):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "--max-restarts", str(restarts), str(ROOT / "tests" / "distributed" / "elastic_job.py"),
           "--out", str(out), "--final", str(final), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_killed_worker_restart_resumes_from_the_last_checkpoint(tmp_path):
    straight = _job(tmp_path / "a", tmp_path / "a.pt")
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = _job(tmp_path / "b", tmp_path / "b.pt", "--die-at", "6")
    assert killed.returncode != 0 and "exitcode: 17" in killed.stderr  # the worker died
    again = _job(tmp_path / "b", tmp_path / "b.pt", "--attempt", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    wa = torch.load(tmp_path / "a.pt", weights_only=True)
    wb = torch.load(tmp_path / "b.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    run = open_run(tmp_path / "b")
    resumed = run.scalars().query("key == 'resumed_from'")
    # both ranks of the second attempt resumed from step 4. Of the first attempt, rank 1
    # died (os._exit) and may lose its last flush interval; torchrun then stopped rank 0
    # with SIGTERM, and the Recorder's handler wrote rank 0's rows before it ended (one
    # CI run of 2026-12-07, before that handler, lost them; another, when the signal came
    # inside rank 0's own flush as it closed: tests/recorder/test_crash_safety.py)
    v = resumed.groupby("rank")["value"].apply(list).to_dict()
    assert v[0] == [0.0, 4.0] and v[1] in ([4.0], [0.0, 4.0]), v
    assert [int(s) for s in run.checkpoints()["step"]] == [4, 8, 12]
