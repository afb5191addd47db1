"""Acceptance scenarios: fresh failing training jobs (tests/scenarios/jobs/), each recorded
by a real run and checked end to end through the installed ``debugkit`` console script,
run from another folder with relative paths: the finding's kind, step, layer or rank,
and the replay's culprit, field by field.

The jobs' model factories (``tests.scenarios.jobs.<job>:build_model``) are found the way
a user's project is: on ``PYTHONPATH``, and named to replay with ``--code-root``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from debugkit.analysis.lost_ranks import parse_collective_error

from ..conftest import console_script

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "scenarios" / "jobs"
HTA = ROOT / "tests" / "data" / "public" / "hta_trace_filter"
TIMEOUT_S = 300
DEBUGKIT = console_script("debugkit")
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _run(cmd, cwd, expect_rc=None):
    proc = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=TIMEOUT_S)
    if expect_rc is not None:
        assert proc.returncode == expect_rc, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _job(tmp_path_factory, name, expect_rc):
    cwd = tmp_path_factory.mktemp(name)
    _run([sys.executable, str(JOBS / f"{name}.py"), "--out", "run"], cwd, expect_rc)
    return cwd


def debugkit(cwd, *args, expect_rc=0):
    return _run([DEBUGKIT, *args], cwd, expect_rc)


def findings(cwd) -> list[dict]:
    return json.loads(debugkit(cwd, "diagnose", "run", "--json").stdout)["findings"]


def replay(cwd) -> dict:
    # The jobs' code lives outside the folder the command runs in: the user names it as a
    # folder whose code this replay may run (issue 22's policy; the default is the cwd).
    return json.loads(debugkit(cwd, "replay", "run", "--json", "--code-root", str(JOBS)).stdout)


def _kinds(fs):
    return [f["kind"] for f in fs]


# ------------------------------------------------------------------------------ jobs
@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
    return _job(tmp_path_factory, "lstm_lr_growth", 0)


@pytest.fixture(scope="module")
def token_run(tmp_path_factory):
    return _job(tmp_path_factory, "token_transformer", 1)


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory):
    return _job(tmp_path_factory, "cnn_nan_pixel", 1)


@pytest.fixture(scope="module")
def tabular_run(tmp_path_factory):
    return _job(tmp_path_factory, "tabular_shape", 1)


@pytest.fixture(scope="module")
def dead_rank_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("dead_rank")
    # torchrun stops the surviving rank (SIGTERM) when it notices rank 1 is gone; checking
    # every 20 s instead of every 0.1 s leaves rank 0 time to record its own error first,
    # even on a loaded machine (at 5 s, a loaded run once lost that race).
    proc = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "--monitor-interval", "20", str(JOBS / "dead_rank.py"), "--out", "run"], cwd)
    assert proc.returncode != 0
    assert "exitcode  : -6" in proc.stderr  # torchrun saw rank 1 die by SIGABRT
    return cwd


# ------------------------------------------------------------------------- overflow
@pytest.mark.slow
def test_lstm_huge_finite_gradients_are_an_explosion_not_nonfinite(lstm_run):
    from debugkit import open_run

    run = open_run(lstm_run / "run")
    assert run.status == "finished" and run.failures() == []  # halt_on_nonfinite never fired
    g = run.grad_norms()
    largest = float(g["grad_norm"].max())
    assert 1e21 < largest < 1e30  # past float32's sum-of-squares overflow, and finite
    fs = findings(lstm_run)
    assert "nonfinite_grad" not in _kinds(fs) and "step_failure" not in _kinds(fs)
    boom = [f for f in fs if f["kind"] == "exploding_grad"]
    assert [(f["step"], f["rank"], f["layer"], f["severity"]) for f in boom] == \
        [(2, 0, "lstm.bias_ih_l0", "warning")]


# ---------------------------------------------------------------------- data bugs
@pytest.mark.slow
def test_token_out_of_range_is_found_and_replayed_to_its_sample(token_run):
    fs = findings(token_run)
    assert [(f["kind"], f["step"], f["rank"], f["evidence"]["error_type"]) for f in fs] == \
        [("step_failure", 7, 0, "IndexError")]
    rep = replay(token_run)
    assert rep["reproduced"] is True and rep["replay"]["type"] == "IndexError"
    c = rep["culprit"]
    assert (c["module"], c["input"], c["sample_index"], c["dataset_index"]) == ("embed", "batch[0]", 5, 61)
    assert rep["culprit_positions"] == [9]
    assert "holds index 40, outside [0, 40)" in c["detail"]


@pytest.mark.slow
def test_nan_pixel_is_traced_to_its_scan(cnn_run):
    fs = findings(cnn_run)
    got = {(f["kind"], f["step"], f["layer"]) for f in fs}
    assert ("nonfinite_grad", 10, "0.weight") in got and ("nonfinite_loss", 10, None) not in got
    (ng,) = [f for f in fs if f["kind"] == "nonfinite_grad"]
    assert [(r["kind"], r["layer"]) for r in ng["evidence"]["related"]][0] == ("nonfinite_loss", None)
    rep = replay(cnn_run)
    assert rep["reproduced"] is True
    c = rep["culprit"]
    assert (c["input"], c["dataset_index"]) == ("batch[0]", 300)
    assert rep["culprit_positions"] == [[0, 3, 5]]  # channel 0, row 3, column 5


@pytest.mark.slow
def test_shape_mismatch_names_the_layer(tabular_run):
    fs = findings(tabular_run)
    assert [(f["kind"], f["step"], f["rank"], f["evidence"]["error_type"]) for f in fs] == \
        [("step_failure", 6, 0, "RuntimeError")]
    rep = replay(tabular_run)
    assert rep["reproduced"] is True
    c = rep["culprit"]
    assert (c["module"], c["input"]) == ("0", "batch[0]")
    assert "expects last dimension 13 (in_features); got input of shape [16, 12]" in c["detail"]


# ------------------------------------------------------------------------ dead rank
@pytest.mark.slow
def test_dead_rank_is_named_before_the_error_it_caused(dead_rank_run):
    fs = findings(dead_rank_run)
    assert [(f["kind"], f["rank"]) for f in fs] == [("rank_crashed", 1), ("step_failure", 0)], \
        [f["message"][:300] for f in fs]
    dead, symptom = fs[0], fs[1]
    assert (dead["rank"], dead["step"], dead["severity"]) == (1, 5, "error")
    ev = dead["evidence"]
    assert ev["last_completed_step"] == 4 and ev["in_step"] is True
    assert ev["confidence"] == "certain" and ev["reason"] == "process gone"
    assert ev["stack"]["signal"] == "Aborted" and ev["stack"]["collective"] == "all_reduce"
    assert ev["stack"]["where_line"] == "dead_rank.py:70"
    assert "killed by SIGABRT" in dead["message"]
    assert "ranks were in different collective calls" in dead["message"]
    assert [(s["rank"], s["step"], s["site"]) for s in ev["symptoms"]] == [(0, 5, "dead_rank.py:73")]
    assert (symptom["rank"], symptom["step"]) == (0, 5)
    coll = symptom["evidence"]["collective"]
    assert (coll["backend"], coll["kind"], coll["collective"]) == ("gloo", "peer_closed", "all_reduce")


def _distributed_page(monkeypatch, folder):
    """The Distributed page of ``folder/run`` (served as run id ``run``)."""
    from tests.app._apptest import open_page

    monkeypatch.setenv("DEBUGKIT_ROOTS", str(folder))
    at = open_page("distributed", run="run")
    assert at.title[0].value == "Distributed"
    return at


@pytest.mark.slow
def test_dead_rank_shows_on_the_distributed_page(dead_rank_run, monkeypatch):
    at = _distributed_page(monkeypatch, dead_rank_run)
    # the findings' cards (pages._ui.show_findings): the dead rank's error card comes first
    cards = [m.value for m in at.markdown if m.value.startswith(":material/")]
    assert cards and cards[0].startswith(":material/error: **rank_crashed** · step 5 · rank 1"), cards
    assert any("killed by SIGABRT" in c.value for c in at.caption)
    assert not any("No dead rank, straggler" in s.value for s in at.success)


# ---------------------------------------------------------------------- traces only
@pytest.mark.slow
def test_traces_only_run_reaches_diagnose_and_the_distributed_page(tmp_path, monkeypatch):
    src = tmp_path / "hta"
    shutil.copytree(HTA, src)
    debugkit(tmp_path, "import", "torch-trace", "hta", "run")
    fs = findings(tmp_path)
    assert [(f["kind"], f["severity"]) for f in fs] == [("trace_coverage", "info")]
    ev = fs[0]["evidence"]
    assert (ev["trace_ranks"], ev["world_size"], ev["confidence"]) == ([0, 1], 128, "partial")
    assert "uncertain" in fs[0]["message"]

    at = _distributed_page(monkeypatch, tmp_path)
    infos = " ".join(i.value for i in at.info)
    assert "single rank" not in infos and "2 per-rank torch.profiler traces" in infos
    # the page opens on the Profiler traces tab, the only one with something to show
    assert "ranks 0, 1" in " ".join(c.value for c in at.caption)


# --------------------------------------------------------------- message recognition
GLOO_CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
               "by peer [127.0.0.1]:13964. This is typically caused by a remote worker crashing.")
GLOO_RESET = "[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Read error [10.0.0.2]:41017: Connection reset by peer"
GLOO_TIMEOUT = ("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 2000ms for "
                "recv operation to complete")
NCCL_TIMEOUT = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, "
                "NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds "
                "before timing out.\n\t - To our best knowledge, ranks [3] are the lagging ranks that caused "
                "this timeout. They never joined any collectives")
MISMATCH = ("Detected mismatch between collectives on ranks. Rank 0 is running collective: "
            "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float), "
            "but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=12, OpType=BROADCAST, "
            "TensorShape=[1853171], TensorDtypes=Float).")


@pytest.mark.parametrize("text,want", [
    (GLOO_CLOSED, {"backend": "gloo", "kind": "peer_closed", "peer": "127.0.0.1:13964", "ranks": []}),
    (GLOO_RESET, {"backend": "gloo", "kind": "peer_reset", "peer": "10.0.0.2:41017"}),
    (GLOO_TIMEOUT, {"backend": "gloo", "kind": "timeout", "timeout_ms": 2000}),
    (NCCL_TIMEOUT, {"backend": "nccl", "kind": "timeout", "collective": "BROADCAST", "seq": 1,
                    "timeout_ms": 600000, "lagging_ranks": [3], "ranks": [0, 3]}),
    (MISMATCH, {"kind": "mismatch", "collective": "ALLREDUCE", "seq": 12, "ranks": [0, 1],
                "collectives": {0: "ALLREDUCE", 1: "BROADCAST"}}),
])
def test_collective_error_texts(text, want):
    got = parse_collective_error(text)
    assert {k: got[k] for k in want} == want


def test_collective_named_from_the_traceback_and_plain_errors_ignored():
    tb = ('  File "/x/torch/distributed/c10d_logger.py", line 83, in wrapper\n'
          '  File "/x/torch/distributed/distributed_c10d.py", line 3252, in all_reduce\n')
    assert parse_collective_error(GLOO_CLOSED, tb)["collective"] == "all_reduce"
    assert parse_collective_error("mat1 and mat2 shapes cannot be multiplied (16x12 and 13x32)") is None
