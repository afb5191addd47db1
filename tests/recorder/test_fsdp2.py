"""FSDP2 (``fully_shard``, DTensor parameters) under a real 2-rank gloo torchrun: the
Recorder records each rank's shards without a collective and the reader gives every rank
the whole layers' norms, checked against ``full_tensor()``'s (the job's oracle)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from debugkit import open_run
from debugkit.io.shards import add_shards
from tests.distributed.harness import ROOT, torchrun

JOB = str(ROOT / "tests/distributed/fsdp2_job.py")


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp2") / "run"
    proc = torchrun(2, [JOB], out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


@pytest.mark.slow  # a two-rank job
def test_an_fsdp2_job_trains_to_the_end_under_the_recorder(fsdp2):
    out, proc = fsdp2
    run = open_run(out)
    assert run.ranks == [0, 1] and run.status == "finished"
    assert run.steps()["ok"].all() and len(run.steps()) == 16
    for r in (0, 1):
        assert run.rank_meta(r)["grad_shards"] is True
    # layer statistics are off for shards, and the user is told why
    assert "layer statistics are not taken for DTensor (FSDP2) parameters" in proc.stderr
    assert run.layer_stats().empty


@pytest.mark.slow
def test_every_rank_gets_the_whole_layers_norms_of_full_tensor(fsdp2):
    out, _ = fsdp2
    oracle = json.loads((out.parent / "oracle.json").read_text())
    g = open_run(out).grad_norms()
    assert sorted(g.groupby("rank").size().items()) == [(0, 8 * 7), (1, 8 * 7)]  # 6 params + total
    for r in (0, 1):
        mine = g[g["rank"] == r]
        for row in mine.itertuples():
            if row.layer == "__total__":
                want = math.sqrt(sum(v * v for v in oracle[str(row.step)].values()))
            else:
                want = oracle[str(row.step)][row.layer]
            assert row.grad_norm == pytest.approx(want, rel=1e-5), (r, row.step, row.layer)
    # one rank asked for alone gets the same whole norms
    one = open_run(out).grad_norms(rank=1)
    assert one["grad_norm"].tolist() == g[g["rank"] == 1]["grad_norm"].tolist()


@pytest.mark.slow
def test_diagnose_sees_no_rank_divergence_in_shards(fsdp2):
    from debugkit.diagnose import diagnose

    kinds = {f.kind for f in diagnose(open_run(fsdp2[0]))}
    assert "rank_divergence" not in kinds and "vanishing_grad" not in kinds and "dead_layer" not in kinds


def test_shards_add_up_as_squares_and_a_partial_step_is_left_out():
    # ranks 0 and 1 sharded, rank 2 not; layer 0 and the total (code 1)
    step = np.array([0, 0, 0, 0, 1, 1, 1, 0, 0, 2, 2], dtype=np.int64)
    rank = np.array([0, 0, 1, 1, 0, 0, 1, 2, 2, 0, 1], dtype=np.int32)
    code = np.array([0, 1, 0, 1, 0, 1, 0, 0, 1, 0, 0], dtype=np.int16)
    value = np.array([3.0, 3.0, 4.0, 4.0, 1e200, 1.0, 1e200, 7.0, 7.0, np.inf, np.nan])
    s, r, c, v = add_shards(step, rank, code, value, [0, 1])
    got = {(int(a), int(b), int(x)): float(y) for a, b, x, y in zip(s, r, c, v)}
    assert got[(0, 0, 0)] == got[(0, 1, 0)] == 5.0 and got[(0, 0, 1)] == 5.0
    assert got[(1, 0, 0)] == pytest.approx(math.sqrt(2) * 1e200)  # no overflow of the squares
    assert (1, 0, 1) not in got  # rank 1 did not log the total at step 1
    assert math.isnan(got[(2, 0, 0)]) and math.isnan(got[(2, 1, 0)])  # NaN over inf
    assert got[(0, 2, 0)] == 7.0  # an unsharded rank keeps its rows


def test_a_step_logged_twice_by_a_rank_counts_its_last_row():
    step = np.array([0, 0, 0], dtype=np.int64)
    rank = np.array([0, 0, 1], dtype=np.int32)
    code = np.array([0, 0, 0], dtype=np.int16)
    value = np.array([100.0, 3.0, 4.0])
    s, r, c, v = add_shards(step, rank, code, value, [0, 1])
    assert sorted(zip(r.tolist(), v.tolist())) == [(0, 5.0), (1, 5.0)]


def test_steps_far_apart_are_not_mixed_up():
    # a hostile or merely long run: steps near int64's end stay apart (no arithmetic key)
    big = np.iinfo(np.int64).max - 1
    step = np.array([big, big, 0, 0], dtype=np.int64)
    rank = np.array([0, 1, 0, 1], dtype=np.int32)
    code = np.array([0, 0, 0, 0], dtype=np.int16)
    value = np.array([3.0, 4.0, 6.0, 8.0])
    s, r, c, v = add_shards(step, rank, code, value, [0, 1])
    assert sorted(set(zip(s.tolist(), v.tolist()))) == [(0, 10.0), (big, 5.0)]


@pytest.fixture(scope="module")
def fsdp2_nan(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp2nan") / "run"
    proc = torchrun(2, [JOB, "--nan-step", "5"], out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_a_nan_batch_on_one_rank_is_named_on_the_rank_the_reduce_scatter_carried_it_to(fsdp2_nan):
    from debugkit.diagnose import diagnose

    run = open_run(fsdp2_nan)
    g = run.grad_norms()
    assert g[(g["step"] == 5)]["grad_norm"].isna().any()
    grads = {f.rank: f for f in diagnose(run) if f.kind == "nonfinite_grad"}
    assert grads[0].step == grads[1].step == 5
    assert grads[0].evidence["from_rank"] is None and grads[0].evidence["loss_finite"] is False
    # rank 1's own loss was finite: its NaN came from rank 0's batch through the collective
    assert grads[1].evidence["loss_finite"] is True and grads[1].evidence["from_rank"] == 0
    assert "carried rank 0's non-finite gradients" in grads[1].message
    assert {"r0-s0000005-nonfinite", "r1-s0000005-nonfinite"} <= {f["id"] for f in run.failures()}
