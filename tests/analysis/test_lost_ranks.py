"""``detect_lost_ranks``: who died first, and what a rank still running but behind is."""

from __future__ import annotations

import pandas as pd

from debugkit.analysis.findings import Finding, sort_findings
from debugkit.analysis.lost_ranks import detect_lost_ranks, summarize_stack
from debugkit.diagnose import causes_first


def _info(rows):
    cols = ["rank", "status", "heartbeat_step", "heartbeat_time", "pid", "world_size", "crash_reason"]
    return pd.DataFrame(rows, columns=cols)


def _times(last):
    rows = [{"step": s, "rank": r, "ok": True} for r, n in last.items() for s in range(n + 1)]
    return pd.DataFrame(rows)


def test_the_rank_with_a_fatal_stack_comes_first_and_the_other_is_marked():
    info = _info([(0, "crashed", 5, 100.0, 11, 2, "process gone"),
                  (1, "crashed", 5, 101.0, 12, 2, "process gone")])
    fatal = {1: {"signal": "Aborted", "threads": [{"id": "0x1", "current": True, "frames": [
        {"file": "/proj/train.py", "line": 70, "function": "main"}]}], "file": "fatal-000.txt"}}
    found = detect_lost_ranks(info, _times({0: 4, 1: 4}), fatal=fatal)
    assert [(f.kind, f.rank, f.step) for f in found] == [("rank_crashed", 1, 5), ("rank_crashed", 0, 5)]
    assert found[1].evidence["after_rank"] == 1 and found[1].evidence["confidence"] == "probable"
    assert "probably stopped because of rank 1" in found[1].message and "uncertain" in found[1].message
    assert found[0].evidence["stack"]["where"] == "/proj/train.py:70 in main"
    # diagnose keeps that order ahead of everything at the same step
    other = Finding(kind="step_failure", step=5, rank=0, layer=None, severity="error", message="x",
                    evidence={"failure": "r0-s5"})
    assert [f.rank for f in causes_first(sort_findings(found + [other]))][:2] == [1, 0]


def test_a_running_rank_behind_ended_ranks_is_lost_and_unsure():
    info = _info([(0, "failed", 9, 100.0, 11, 3, None), (1, "running", 3, 100.0, 12, 3, None),
                  (2, "failed", 9, 100.0, 13, 3, None)])
    (f,) = detect_lost_ranks(info, _times({0: 9, 1: 2, 2: 9}))
    assert (f.kind, f.rank, f.step, f.severity) == ("rank_lost", 1, 3, "error")
    assert f.evidence["confidence"] == "uncertain" and "uncertain" in f.message
    assert f.evidence["last_completed_step"] == 2


def test_a_missing_rank_folder_and_healthy_ranks():
    ok = _info([(0, "finished", 9, 100.0, 11, 2, None), (1, "finished", 9, 100.0, 12, 2, None)])
    assert detect_lost_ranks(ok, _times({0: 9, 1: 9})) == []
    (f,) = detect_lost_ranks(_info([(0, "failed", 3, 100.0, 11, 2, None)]), _times({0: 3}))
    assert (f.kind, f.rank, f.evidence["reason"]) == ("rank_lost", 1, "no rank folder")


def test_a_program_in_a_folder_named_debugkit_is_the_users_code_in_a_fatal_stack():
    # the dead rank's dump as faulthandler wrote it in CI, where the clone of this
    # repository is a folder named debugkit: the training thread's frames are the
    # program's (tests/scenarios/jobs/dead_rank.py), blocked in an all_reduce; the thread
    # that raised SIGABRT is a timer with none of the program's frames
    lib = "/usr/lib/python3.11"
    c10d = f"{lib}/site-packages/torch/distributed/distributed_c10d.py"
    job = "/tmp/tmp.7K/debugkit/tests/scenarios/jobs/dead_rank.py"
    fatal = {"signal": "Aborted", "file": "ranks/1/fatal-000.txt", "threads": [
        {"id": "0x1", "current": True, "frames": [
            {"file": f"{lib}/threading.py", "line": 1401, "function": "run"}]},
        {"id": "0x2", "current": False, "frames": [
            {"file": f"{lib}/threading.py", "line": 331, "function": "wait"},
            {"file": "/tmp/tmp.7K/debugkit/debugkit/recorder/writer.py", "line": 215, "function": "_loop"}]},
        {"id": "0x3", "current": False, "frames": [
            {"file": c10d, "line": 3252, "function": "all_reduce"},
            {"file": f"{lib}/site-packages/torch/distributed/c10d_logger.py", "line": 83, "function": "wrapper"},
            {"file": job, "line": 70, "function": "main"},
            {"file": job, "line": 79, "function": "<module>"}]},
    ]}
    s = summarize_stack(fatal)
    assert (s["thread"], s["collective"], s["where_line"]) == ("0x3", "all_reduce", "dead_rank.py:70")
