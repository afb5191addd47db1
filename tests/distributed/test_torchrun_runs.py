"""Findings on real torchrun jobs: stragglers, hangs, collective timeouts, desynchronised ranks."""

from __future__ import annotations

import re

from debugkit import open_run
from debugkit.diagnose import diagnose
from debugkit.io.distributed import read_hang_file, read_hangs


def _by_kind(findings, kind):
    return [f for f in findings if f.kind == kind]


def test_straggler_finding_names_the_slowed_rank(straggler_run):
    run = open_run(straggler_run)
    assert run.ranks == [0, 1, 2] and run.status == "finished"
    found = _by_kind(diagnose(run), "straggler")
    steps = [f for f in found if f.evidence["source"] == "steps"]
    assert [f.rank for f in steps] == [1]
    ev = steps[0].evidence
    assert ev["cause"] == "data"
    assert ev["comm_measured"] is True
    # 16 samples x 3 ms of slow storage per batch: at least 48 ms more data wait per step.
    assert ev["excess_data_wait_s"] > 0.04
    assert ev["slow_windows"] == ev["windows"] == 3
    assert "Rank 1 is a straggler" in steps[0].message


def test_trace_straggler_and_overlap_from_real_profiler_traces(straggler_run):
    from debugkit.analysis.distributed_traces import compute_comm_comp_overlap
    from debugkit.io.rank_traces import find_rank_traces, read_rank_traces, stack_events

    run = open_run(straggler_run)
    traces = read_rank_traces(find_rank_traces(run))
    assert sorted(traces) == [0, 1, 2]
    assert {t.backend for t in traces.values()} == {"gloo"}
    assert not any(t.device_trace for t in traces.values())
    ev = stack_events(traces)
    assert sorted(ev.loc[ev["kind"] == "step", "iteration"].unique().tolist()) == [22, 23, 24, 25]
    trace_found = [f for f in _by_kind(diagnose(run), "straggler")
                   if f.evidence["source"] == "profiler_trace"]
    assert [f.rank for f in trace_found] == [1]
    assert trace_found[0].evidence["collective"] == "gloo:all_reduce"
    ov = compute_comm_comp_overlap(ev)
    assert ov["rank"].tolist() == [0, 1, 2]
    assert ((ov["overlap_pct"] >= 0) & (ov["overlap_pct"] <= 100)).all()


def test_hang_sample_shows_the_divergent_rank_and_its_stack(hang_run):
    run = open_run(hang_run)
    assert run.status == "failed"
    hangs = _by_kind(diagnose(run), "hang")
    assert len(hangs) == 1
    h = hangs[0]
    assert (h.rank, h.step, h.severity) == (1, 22, "error")
    assert h.evidence["divergent_ranks"] == [1] and h.evidence["trigger_rank"] == 0
    ranks = {r["rank"]: r for r in h.evidence["ranks"]}
    assert (ranks[0]["in_step"], ranks[0]["step"], ranks[0]["stuck_code"]) == (True, 22, "loss.backward()")
    assert (ranks[1]["in_step"], ranks[1]["last_step"]) == (False, 21)
    assert ranks[1]["stuck_code"].startswith("dist.barrier(")
    dumps = read_hangs(run)
    assert sorted(d["rank"] for d in dumps) == [0, 1]
    r1 = next(d for d in dumps if d["rank"] == 1)
    assert r1["reason"] == "peer" and r1["trigger_rank"] == 0
    text = read_hang_file(run, 1, r1["files"]["faulthandler"])
    assert "in barrier" in text  # faulthandler's view of rank 1's main thread
    events = run.events(rank=0)
    assert [e["kind"] for e in events if e["kind"].startswith("hang")] == ["hang", "hang_resolved"]


def test_collective_error_in_the_hang_sample_is_a_failure_on_rank_0(hang_run):
    fails = open_run(hang_run).failures()
    assert [(f["rank"], f["step"], f["error_type"]) for f in fails] == [(0, 22, "RuntimeError")]
    assert re.search(r"Timed out waiting|Connection closed by peer", fails[0]["message"])


def test_real_gloo_timeout_inside_a_step_is_captured_with_its_rank(timeout_run):
    run = open_run(timeout_run)
    fails = run.failures()
    assert len(fails) == 1
    f = fails[0]
    assert (f["rank"], f["world_size"], f["step"], f["kind"]) == (0, 2, 3, "exception")
    assert f["error_type"] in ("RuntimeError", "DistBackendError")
    assert "Timed out waiting 2000ms" in f["message"]
    assert f["files"]["batch"] == ["batch.safetensors", "batch.json"]
    found = [x for x in diagnose(run) if x.kind == "step_failure"]
    assert [(x.rank, x.step) for x in found] == [(0, 3)]
    assert run.rank_status(0) == "failed"
    # rank 1 finishes its steps, unless torchrun's agent terminates it first when it sees
    # rank 0 exit with an error (a race on a loaded machine): then it never closed its run
    assert run.rank_status(1) in ("finished", "crashed")


def test_rank_divergence_when_a_layer_is_left_out_of_the_all_reduce(desync_run):
    run = open_run(desync_run)
    found = _by_kind(diagnose(run), "rank_divergence")
    assert len(found) == 1
    f = found[0]
    assert f.step == 0 and f.layer == "2.weight" and f.severity == "error"
    assert f.evidence["layers"][0] == "2.weight"
    assert set(f.evidence["layers"]) <= {"2.weight", "__total__"}
    assert f.evidence["steps_diverged"] == 6
