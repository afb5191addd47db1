"""Per-rank files under a real 2-process gloo torchrun merge into one run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from debugkit import open_run

ROOT = Path(__file__).resolve().parents[2]


def test_two_rank_torchrun_writes_one_run(tmp_path):
    run_dir = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(Path(__file__).with_name("_dist_child.py")), str(run_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_run(run_dir)
    assert run.ranks == [0, 1]
    assert run.manifest["world_size"] == 2
    assert run.manifest["distributed"]["backend"] == "gloo"
    for r in (0, 1):
        meta = run.rank_meta(r)
        assert meta["rank"] == r and meta["world_size"] == 2
        assert meta["layers"] == ["0.weight", "0.bias", "2.weight", "2.bias"]  # DDP unwrapped
    assert run.status == "finished"
    steps = run.steps()
    assert sorted(zip(steps["rank"], steps["step"])) == [(r, s) for r in (0, 1) for s in range(6)]
    g = run.grad_norms()
    assert len(g) == 2 * 6 * 5
    # after DDP's all-reduce both ranks hold the same averaged gradients
    a = g[g["rank"] == 0].sort_values(["step", "layer"])["grad_norm"].to_numpy()
    b = g[g["rank"] == 1].sort_values(["step", "layer"])["grad_norm"].to_numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5)
    losses = run.scalars().query("key == 'loss'")
    assert losses.groupby("rank").size().to_dict() == {0: 6, 1: 6}
    # the ranks saw different data: different losses
    l0 = losses[losses["rank"] == 0]["value"].to_numpy()
    l1 = losses[losses["rank"] == 1]["value"].to_numpy()
    assert not np.allclose(l0, l1)
