"""Distributed detectors on hand-built step tables, grad norms and hang dumps (exact numbers)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis import distributed as ad


def _steps(n_steps=40, ranks=4, slow=None, slow_data=0.0, slow_compute=0.0, comm=True):
    rows = []
    for s in range(n_steps):
        for r in range(ranks):
            data = 0.001 + (slow_data if r == slow else 0.0)
            comp = 0.010 + (slow_compute if r == slow else 0.0)
            # Everyone leaves the all-reduce together: the others wait for the slow rank.
            own = data + comp
            slowest = 0.011 + slow_data + slow_compute if slow is not None else 0.011
            wait = slowest - own + 0.002
            rows.append({"step": s, "rank": r, "wall_time": 1000.0 + s, "step_time_s": comp + wait,
                         "data_wait_s": data if s else None, "comm_s": wait if comm else None,
                         "ok": True})
    return pd.DataFrame(rows)


def test_rank_step_times_split_step_time_into_compute_and_comm():
    t = ad.compute_rank_step_times(_steps(n_steps=3, ranks=2, slow=1, slow_data=0.02))
    r0 = t[(t["rank"] == 0) & (t["step"] == 1)].iloc[0]
    assert r0["compute_s"] == pytest.approx(0.010)
    assert r0["comm_s"] == pytest.approx(0.022)
    assert r0["busy_s"] == pytest.approx(0.011)
    r1 = t[(t["rank"] == 1) & (t["step"] == 1)].iloc[0]
    assert r1["busy_s"] == pytest.approx(0.031)
    assert t.loc[t["step"] == 0, "data_wait_s"].tolist() == [0.0, 0.0]  # null first wait -> 0
    assert t["comm_measured"].all()


def test_slow_data_rank_is_the_straggler_with_cause_data():
    t = ad.compute_rank_step_times(_steps(slow=2, slow_data=0.03))
    found = ad.detect_stragglers(t)
    assert [(f.kind, f.rank, f.step) for f in found] == [("straggler", 2, 1)]
    ev = found[0].evidence
    assert ev["cause"] == "data"
    assert ev["median_ratio"] == pytest.approx(0.041 / 0.011)
    assert ev["excess_data_wait_s"] == pytest.approx(0.03)
    assert ev["excess_compute_s"] == pytest.approx(0.0, abs=1e-12)
    assert (ev["slow_windows"], ev["windows"]) == (2, 2)


def test_slow_compute_rank_is_the_straggler_with_cause_compute():
    t = ad.compute_rank_step_times(_steps(slow=0, slow_compute=0.02))
    found = ad.detect_stragglers(t)
    assert [(f.rank, f.evidence["cause"]) for f in found] == [(0, "compute")]
    assert found[0].evidence["excess_compute_s"] == pytest.approx(0.02)


def test_balanced_ranks_and_tiny_excess_are_not_stragglers():
    assert ad.detect_stragglers(ad.compute_rank_step_times(_steps())) == []
    # 30 % more own work, but 0.3 ms on steps that spend 50 ms in the all-reduce:
    # under min_share (5 % of the step period), not reported.
    rows = [{"step": s, "rank": r, "wall_time": float(s), "data_wait_s": 0.0,
             "step_time_s": 0.051 + (0.0003 if r == 1 else 0.0), "comm_s": 0.05, "ok": True}
            for s in range(40) for r in range(3)]
    t = ad.compute_rank_step_times(pd.DataFrame(rows))
    assert ad.compute_rank_summary(t)["busy_ratio"].round(2).tolist() == [0.87, 1.3, 0.87]
    assert ad.detect_stragglers(t) == []
    assert [f.rank for f in ad.detect_stragglers(t, min_share=0.0)] == [1]


def test_straggler_in_scattered_windows_is_not_persistent():
    # 60 steps, 3 windows: rank 1 slow in the first and the last (2 of 3, more than half)
    # but never in two windows in a row: a loaded machine, not a straggler
    df = _steps(n_steps=61, ranks=2, slow=1, slow_data=0.03)
    df.loc[(df["rank"] == 1) & (df["step"] > 20) & (df["step"] <= 40), "data_wait_s"] = 0.001
    t = ad.compute_rank_step_times(df)
    wins = ad.compute_straggler_windows(t)
    assert wins[wins["rank"] == 1]["ratio"].gt(ad.STRAGGLER_RATIO).tolist() == [True, False, True]
    assert ad.detect_stragglers(t) == []
    df2 = _steps(n_steps=61, ranks=2, slow=1, slow_data=0.03)
    df2.loc[(df2["rank"] == 1) & (df2["step"] > 40), "data_wait_s"] = 0.001  # slow, slow, fast
    assert [f.rank for f in ad.detect_stragglers(ad.compute_rank_step_times(df2))] == [1]


def test_straggler_in_one_window_only_is_not_persistent():
    df = _steps(slow=3, slow_data=0.03)
    df.loc[(df["rank"] == 3) & (df["step"] >= 20), "data_wait_s"] = 0.001
    assert ad.detect_stragglers(ad.compute_rank_step_times(df)) == []


def test_unmeasured_comm_is_said_in_the_message():
    t = ad.compute_rank_step_times(_steps(slow=1, slow_data=0.05, comm=False))
    found = ad.detect_stragglers(t, ratio=1.2)
    assert [f.rank for f in found] == [1]
    assert found[0].evidence["cause"] == "data"
    assert found[0].evidence["excess_data_wait_s"] == pytest.approx(0.05)
    assert "not measured" in found[0].message and found[0].evidence["comm_measured"] is False


def test_single_rank_gives_no_windows():
    t = ad.compute_rank_step_times(_steps(ranks=1))
    assert ad.compute_straggler_windows(t).empty
    assert ad.detect_stragglers(t) == []


def _frames(*spec):
    return [{"file": f, "line": line, "function": fn, "code": code, "library": lib}
            for f, line, fn, code, lib in spec]


USER_TRAIN = ("/job/train.py", 10, "main", "train()", False)


def _dump(rank, *, in_step, step, last, frames, reason="timeout", trigger=0, t=100.0):
    return {"rank": rank, "id": f"r{rank}/000-s{step or last:07d}-1", "time": t, "reason": reason,
            "trigger_rank": trigger, "in_step": in_step, "step": step if in_step else None,
            "last_step": last, "elapsed_s": 3.0 if in_step else None, "timeout_s": 2.0,
            "train_thread": 1, "threads": [{"ident": 1, "name": "MainThread", "frames": frames}],
            "files": {}}


ALLREDUCE = _frames(USER_TRAIN, ("/job/train.py", 40, "step", "loss.backward()", False),
                    ("/lib/torch/_tensor.py", 600, "backward", "", True))
BARRIER = _frames(USER_TRAIN, ("/job/train.py", 55, "main", "dist.barrier()", False),
                  ("/lib/torch/distributed_c10d.py", 5000, "barrier", "work.wait()", True))


def test_hang_view_marks_the_minority_rank():
    inc = [_dump(0, in_step=True, step=7, last=6, frames=ALLREDUCE),
           _dump(1, in_step=True, step=7, last=6, frames=ALLREDUCE, reason="peer", t=100.2),
           _dump(2, in_step=False, step=None, last=6, frames=BARRIER, reason="peer", t=100.3),
           _dump(3, in_step=True, step=7, last=6, frames=ALLREDUCE, reason="peer", t=100.1)]
    view, divergent = ad.compute_hang_view(inc, [0, 1, 2, 3])
    assert divergent == [2]
    assert view["divergent"].tolist() == [False, False, True, False]
    assert view.loc[view["rank"] == 2, "stuck_at"].item() == "main (train.py:55)"
    assert view.loc[view["rank"] == 0, "stuck_code"].item() == "loss.backward()"
    assert view["signature_group"].tolist() == [0, 0, 1, 0]


def test_two_ranks_the_one_behind_is_divergent_and_a_missing_rank_is_listed():
    inc = [_dump(0, in_step=True, step=22, last=21, frames=ALLREDUCE),
           _dump(1, in_step=False, step=None, last=21, frames=BARRIER, reason="peer")]
    view, divergent = ad.compute_hang_view(inc, [0, 1, 2])
    assert divergent == [1]
    assert view["position"].tolist()[:2] == [22.0, 21.5]
    assert pd.isna(view.loc[view["rank"] == 2, "dump"].item())


def test_detect_hangs_severity_follows_how_the_step_ended():
    dumps = [_dump(0, in_step=True, step=22, last=21, frames=ALLREDUCE),
             _dump(1, in_step=False, step=None, last=21, frames=BARRIER, reason="peer")]
    fail = {"rank": 0, "step": 22, "error_type": "RuntimeError", "error_module": "builtins",
            "id": "r0-s0000022-exception",
            "message": "Got the following error when running the callback: RuntimeError: "
                       "[gloo/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation"}
    [f] = ad.detect_hangs(dumps, events=[], failures=[fail], ranks=[0, 1])
    assert (f.kind, f.rank, f.step, f.severity) == ("hang", 1, 22, "error")
    assert f.message.endswith("[gloo/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation")
    assert f.evidence["errors"] == [{"rank": 0, "error_type": "RuntimeError",
                                     "failure": "r0-s0000022-exception"}]
    resolved = [{"kind": "hang_resolved", "rank": 0, "step": 22, "ok": True}]
    [g] = ad.detect_hangs(dumps, events=resolved, failures=[], ranks=[0, 1])
    assert g.severity == "warning" and "finished after all" in g.message


def test_incidents_are_split_by_trigger_and_time():
    a = [_dump(0, in_step=True, step=5, last=4, frames=ALLREDUCE, t=10.0),
         _dump(1, in_step=False, step=None, last=4, frames=BARRIER, reason="peer", t=10.5),
         _dump(0, in_step=True, step=9, last=8, frames=ALLREDUCE, t=500.0)]
    assert [len(i) for i in ad.group_hang_incidents(a)] == [2, 1]


def test_diff_stacks_shows_the_differing_frames():
    d = ad.diff_stacks(ALLREDUCE, BARRIER, "rank 0", "rank 1")
    assert "-step (train.py:40)  loss.backward()" in d
    assert "+main (train.py:55)  dist.barrier()" in d


@pytest.mark.parametrize("rec,expected", [
    ({"error_type": "DistBackendError", "error_module": "torch.distributed", "message": "x"}, True),
    ({"error_type": "RuntimeError", "error_module": "builtins",
      "message": "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer"}, True),
    ({"error_type": "IndexError", "error_module": "builtins", "message": "Target 12 is out of bounds."}, False),
])
def test_is_collective_error(rec, expected):
    assert ad.is_collective_error(rec) is expected


def _grads(values):
    rows = []
    for (step, layer), per_rank in values.items():
        for r, v in enumerate(per_rank):
            rows.append({"step": step, "rank": r, "layer": layer, "grad_norm": v})
    df = pd.DataFrame(rows)
    df["layer"] = pd.Categorical(df["layer"], categories=["a", "b", "__total__"])
    return df


def test_grad_divergence_exact_spread_and_outlier():
    g = _grads({(0, "a"): [1.0, 1.0, 1.0], (0, "b"): [2.0, 2.0, 2.5],
                (1, "a"): [1.0, 1.0, 1.0], (1, "b"): [2.0, 2.0, 3.0]})
    div = ad.compute_grad_divergence(g)
    b0 = div[(div["step"] == 0) & (div["layer"] == "b")].iloc[0]
    assert b0["rel_spread"] == pytest.approx(0.25) and b0["outlier_rank"] == 2 and b0["ranks"] == 3
    [f] = ad.detect_rank_divergence(g)
    assert (f.kind, f.step, f.rank, f.layer, f.severity) == ("rank_divergence", 0, 2, "b", "error")
    assert f.evidence["max_rel_spread"] == pytest.approx(0.5)
    assert f.evidence["steps_diverged"] == 2


def test_identical_norms_give_no_divergence():
    g = _grads({(0, "a"): [1.5, 1.5], (1, "a"): [np.float32(0.3), np.float32(0.3)]})
    assert ad.detect_rank_divergence(g) == []
    assert ad.compute_grad_divergence(g)["rel_spread"].tolist() == [0.0, 0.0]
