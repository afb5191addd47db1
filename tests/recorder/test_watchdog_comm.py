"""The hang watchdog and the collective timer, in one process (no torchrun)."""

from __future__ import annotations

import json
import time

import pytest
import torch

from debugkit import InvalidInputError, Recorder, open_run
from debugkit.io.distributed import read_hang_file, read_hangs
from debugkit.recorder.comm import CommTimer, union_length


@pytest.fixture(autouse=True)
def _no_pyspy(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_HANG_PYSPY", "0")  # py-spy is exercised by the torchrun tests


def _rec(tmp_path, **kw):
    model = torch.nn.Linear(3, 1)
    return Recorder(tmp_path / "run", model, flush_every_s=0.1, **kw), model


def _wait_for(pred, limit_s=30.0):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_union_length_exact():
    assert union_length([(0, 2), (1, 3), (5, 6)], 0, 10) == 4
    assert union_length([(0, 2), (1, 3), (5, 6)], 1.5, 5.5) == 2.0
    assert union_length([], 0, 1) == 0.0


def test_comm_timer_blocks_and_ddp_buckets():
    t = CommTimer()
    assert t.end_step(0.0, 1.0) is None  # nothing measures yet
    t.begin_step()
    t._add_block(0.1, 0.3)
    t.measuring = True
    t._launches += [0.2, 0.5]
    t._dones += [0.6, 0.9]
    # blocks [0.1, 0.3] plus DDP wait from the last launch (0.5) to the last completion (0.9)
    assert t.end_step(0.0, 0.8) == pytest.approx(0.2 + 0.3)
    t.begin_step()
    assert t.end_step(0.0, 1.0) == 0.0  # measured, nothing waited


def test_rec_comm_fills_comm_s(tmp_path):
    rec, model = _rec(tmp_path)
    with rec:
        with rec.step():
            with rec.comm():
                time.sleep(0.05)
        with rec.step():
            pass
    st = open_run(tmp_path / "run").steps()
    assert st["comm_s"].iloc[0] >= 0.05 and st["comm_s"].iloc[0] <= st["step_time_s"].iloc[0]
    assert st["comm_s"].iloc[1] == 0.0


def test_no_comm_measurement_leaves_comm_s_null(tmp_path):
    rec, _ = _rec(tmp_path)
    with rec:
        with rec.step():
            pass
    assert open_run(tmp_path / "run").steps()["comm_s"].isna().all()


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "3"])
def test_bad_hang_timeout(tmp_path, value):
    with pytest.raises(InvalidInputError, match="hang_timeout_s=.*expected a number of seconds > 0"):
        _rec(tmp_path, hang_timeout_s=value)


def test_watch_ddp_refuses_a_plain_module(tmp_path):
    rec, model = _rec(tmp_path)
    with pytest.raises(InvalidInputError, match="expected a torch.nn.parallel.DistributedDataParallel model, got Linear"):
        rec.watch_ddp(model)
    rec.close()


def test_slow_step_is_dumped_and_resolved(tmp_path):
    rec, _ = _rec(tmp_path, hang_timeout_s=0.2)
    run_dir = tmp_path / "run"
    with rec:
        with rec.step():
            assert _wait_for(lambda: list((run_dir / "ranks/0/hangs").glob("*.json")))
            time.sleep(0.1)
    run = open_run(run_dir)
    [d] = read_hangs(run)
    assert (d["rank"], d["reason"], d["in_step"], d["step"], d["trigger_rank"]) == (0, "timeout", True, 0, 0)
    assert d["elapsed_s"] > 0.2 and d["timeout_s"] == 0.2
    assert d["pyspy_error"] == "disabled by DEBUGKIT_HANG_PYSPY=0"
    main = next(t for t in d["threads"] if t["ident"] == d["train_thread"])
    assert any(f["function"] == "test_slow_step_is_dumped_and_resolved" for f in main["frames"])
    assert "test_watchdog_comm.py" in read_hang_file(run, 0, d["files"]["faulthandler"])
    kinds = [e["kind"] for e in run.events()]
    assert kinds.count("hang") == 1 and kinds.count("hang_resolved") == 1
    req = json.loads(next((run_dir / "hangs").glob("*.json")).read_text())
    assert (req["rank"], req["step"]) == (0, 0)


def test_a_peer_request_makes_this_rank_dump_between_steps(tmp_path):
    rec, _ = _rec(tmp_path, hang_timeout_s=0.2)
    run_dir = tmp_path / "run"
    with rec:
        with rec.step():
            pass
        (run_dir / "hangs").mkdir(exist_ok=True)
        (run_dir / "hangs" / "r3-000-s0000001.json").write_text(
            json.dumps({"rank": 3, "step": 1, "time": time.time(), "timeout_s": 1.0}))
        assert _wait_for(lambda: list((run_dir / "ranks/0/hangs").glob("*.json")))
    [d] = read_hangs(open_run(run_dir))
    assert (d["reason"], d["trigger_rank"], d["trigger_step"], d["in_step"], d["last_step"]) == \
        ("peer", 3, 1, False, 0)


@pytest.mark.parametrize("name", ["../../manifest.json", "000-s0000001-1.py", "x.txt"])
def test_hang_file_names_are_checked(tmp_path, name):
    from debugkit.errors import RunDirError

    rec, _ = _rec(tmp_path)
    rec.close()
    with pytest.raises(RunDirError, match="expected a name like"):
        read_hang_file(open_run(tmp_path / "run"), 0, name)
