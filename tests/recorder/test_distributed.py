"""A real 2-process gloo torchrun recording: per-rank files merge into one run."""

from __future__ import annotations

import json

import pytest

from debugkit import open_run
from tests.distributed.harness import ROOT, torchrun


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    out = tmp_path_factory.mktemp("merge") / "run"
    proc = torchrun(2, [str(ROOT / "tests/distributed/jobs.py"), "merge"], out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow  # a two-rank job: 8.2 CPU s (tests._cputime)
def test_per_rank_files_merge_into_one_run(merged):
    run = open_run(merged)
    assert run.ranks == [0, 1]
    assert run.status == "finished"
    for r in (0, 1):
        meta = run.rank_meta(r)
        assert (meta["rank"], meta["world_size"], meta["local_rank"], meta["backend"]) == (r, 2, r, "gloo")
    steps = run.steps()
    assert sorted(steps.groupby("rank").size().items()) == [(0, 6), (1, 6)]
    assert sorted(steps["step"].unique().tolist()) == [0, 1, 2, 3, 4, 5]
    assert steps["ok"].all()
    g = run.grad_norms()
    assert sorted(g.groupby("rank").size().items()) == [(0, 30), (1, 30)]  # 6 steps x (4 params + total)
    sc = run.scalars()
    assert set(sc[sc["key"] == "mean_loss"]["rank"]) == {0, 1}
    # After the all-reduce both ranks hold the same mean loss, step by step.
    ml = sc[sc["key"] == "mean_loss"].pivot(index="step", columns="rank", values="value")
    assert (ml[0] == ml[1]).all()
    assert len(run.events(rank=0)) >= 2 and len(run.events(rank=1)) >= 2


def test_manifest_holds_process_group_facts(merged):
    m = json.loads((merged / "manifest.json").read_text())
    d = m["distributed"]
    assert (d["backend"], d["world_size"], d["local_world_size"], d["local_rank"], d["node_rank"]) == \
        ("gloo", 2, 2, 0, 0)
    assert d["host"] and d["master_addr"] and isinstance(d["master_port"], int)
    assert m["world_size"] == 2


def test_comm_time_is_measured_and_compute_is_the_rest(merged):
    from debugkit.analysis.distributed import compute_rank_step_times

    t = compute_rank_step_times(open_run(merged).steps())
    assert t["comm_measured"].all()
    assert (t["comm_s"] > 0).all()  # every step waited on its loss all-reduce at least
    assert (t["comm_s"] <= t["step_time_s"] + 1e-9).all()
    assert ((t["compute_s"] - (t["step_time_s"] - t["comm_s"])).abs() < 1e-12).all()


@pytest.mark.slow  # a two-rank DDP job: 14.8 CPU s (tests._cputime)
def test_ddp_job_unwraps_names_and_ranks_agree_on_grad_norms(tmp_path):
    """A DDP-wrapped model: layer names are the inner module's, and after DDP's
    all-reduce both ranks record the same gradient norms (different losses)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import numpy as np

    run_dir = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(Path(__file__).with_name("_dist_child.py")), str(run_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_run(run_dir)
    assert run.ranks == [0, 1] and run.manifest["world_size"] == 2
    for r in (0, 1):
        assert run.rank_meta(r)["layers"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    g = run.grad_norms()
    assert len(g) == 2 * 6 * 5
    a = g[g["rank"] == 0].sort_values(["step", "layer"])["grad_norm"].to_numpy()
    b = g[g["rank"] == 1].sort_values(["step", "layer"])["grad_norm"].to_numpy()
    np.testing.assert_allclose(a, b, rtol=1e-5)
    losses = run.scalars().query("key == 'loss'")
    assert losses.groupby("rank").size().to_dict() == {0: 6, 1: 6}
    l0 = losses[losses["rank"] == 0]["value"].to_numpy()
    l1 = losses[losses["rank"] == 1]["value"].to_numpy()
    assert not np.allclose(l0, l1)
