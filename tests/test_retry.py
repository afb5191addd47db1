"""debugkit.retry: backoff, give-up, pass-through, events in the run, a real gloo init."""

from __future__ import annotations

import datetime
import logging
import random
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import debugkit
from debugkit import InvalidInputError, Recorder, open_run
from debugkit.retry import RETRY_EVENTS_FILE, transient_errors


class Flaky:
    """Fails with ``errors`` in order, then returns ``value``."""

    def __init__(self, errors, value="ok"):
        self.errors = list(errors)
        self.calls = 0
        self.value = value

    def __call__(self, *args, **kwargs):
        self.calls += 1
        self.args = (args, kwargs)
        if self.errors:
            raise self.errors.pop(0)
        return self.value


def retry_events(run_dir):
    return [e for e in open_run(run_dir).events() if e["kind"] == "retry"]


def test_succeeds_after_two_transient_failures_with_exponential_jittered_sleeps():
    fn = Flaky([ConnectionError("refused"), TimeoutError("slow")])
    slept = []
    out = debugkit.retry(fn, attempts=4, base_delay_s=2.0, jitter=0.5, sleep=slept.append,
                         rng=random.Random(0), args=(1,), kwargs={"k": 2})
    assert out == "ok" and fn.calls == 3 and fn.args == ((1,), {"k": 2})
    assert len(slept) == 2
    assert 1.0 <= slept[0] <= 3.0 and 2.0 <= slept[1] <= 6.0
    # The same seed gives the same jitter: the exact values of the formula.
    r = random.Random(0)
    assert slept == [2.0 * (1 + r.uniform(-0.5, 0.5)), 4.0 * (1 + r.uniform(-0.5, 0.5))]


def test_no_jitter_gives_the_capped_exponential_exactly():
    slept = []
    with pytest.raises(OSError):
        debugkit.retry(Flaky([OSError("x")] * 6), attempts=6, base_delay_s=1.0, max_delay_s=5.0,
                       jitter=0, sleep=slept.append)
    assert slept == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_gives_up_after_attempts_and_reraises_the_same_exception(caplog):
    errors = [RuntimeError(f"boom {i}") for i in range(3)]
    slept = []
    with caplog.at_level(logging.WARNING, logger="debugkit.retry"):
        with pytest.raises(RuntimeError) as info:
            debugkit.retry(Flaky(errors), attempts=3, sleep=slept.append, name="init")
    assert info.value is errors[2] and info.value.__cause__ is None
    assert len(slept) == 2
    warnings = [r for r in caplog.records if r.name == "debugkit.retry"]
    assert len(warnings) == 3 and all(r.levelno == logging.WARNING for r in warnings)
    assert "init: attempt 3/3 failed with RuntimeError: boom 2; giving up" in warnings[-1].getMessage()


def test_exception_not_in_on_is_not_retried(tmp_path):
    err = ValueError("bad config")
    fn = Flaky([err])
    slept = []
    with pytest.raises(ValueError) as info:
        debugkit.retry(fn, attempts=5, on=(ConnectionError,), sleep=slept.append,
                       run_dir=tmp_path)
    assert info.value is err and fn.calls == 1 and slept == []
    line = (tmp_path / "ranks" / "0" / RETRY_EVENTS_FILE).read_text().splitlines()
    assert len(line) == 1 and '"ok": false' in line[0] and '"delay_s": null' in line[0]


def test_default_on_holds_torch_distributed_errors():
    on = transient_errors()
    assert {RuntimeError, TimeoutError, ConnectionError, OSError} <= set(on)
    assert torch.distributed.DistNetworkError in on and torch.distributed.DistStoreError in on


def test_run_dir_events_are_read_by_open_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    run_dir = tmp_path / "run"
    fn = Flaky([ConnectionError("refused " + "x" * 3000)], value=7)
    assert debugkit.retry(fn, base_delay_s=0.5, jitter=0, run_dir=run_dir, sleep=lambda s: None,
                          name="pg-init") == 7
    # The Recorder is created afterwards in the same directory (the elastic pattern).
    model = torch.nn.Linear(2, 1)
    with Recorder(run_dir, model, flush_every_s=0.05) as rec:
        with rec.step():
            rec.log(loss=1.0)
    evs = retry_events(run_dir)
    assert [(e["attempt"], e["ok"], e["delay_s"]) for e in evs] == [(1, False, 0.5), (2, True, None)]
    first = evs[0]
    assert first["name"] == "pg-init" and first["attempts"] == 3 and first["rank"] == 0
    assert first["error_type"] == "ConnectionError" and len(first["message"]) == 2000
    assert evs[1]["error_type"] is None and evs[1]["message"] is None
    kinds = [e["kind"] for e in open_run(run_dir).events()]
    assert kinds[:2] == ["retry", "retry"] and "start" in kinds and "close" in kinds
    # The retry file does not take a segment number from the Recorder's files.
    assert (run_dir / "ranks" / "0" / "events-000.jsonl").exists()


def test_an_unwritable_run_dir_does_not_change_the_outcome(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    err = ConnectionError("down")
    with caplog.at_level(logging.WARNING, logger="debugkit.retry"):
        with pytest.raises(ConnectionError) as info:
            debugkit.retry(Flaky([err]), attempts=1, run_dir=blocker)
    assert info.value is err
    assert any("could not record attempt 1" in r.getMessage() for r in caplog.records)


def test_rank_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    debugkit.retry(lambda: None, run_dir=tmp_path)
    assert (tmp_path / "ranks" / "3" / RETRY_EVENTS_FILE).exists()


def test_recorder_events(tmp_path):
    model = torch.nn.Linear(2, 1)
    with Recorder(tmp_path / "r", model, flush_every_s=0.05) as rec:
        with pytest.raises(TimeoutError):
            debugkit.retry(Flaky([TimeoutError("t1"), TimeoutError("t2")]), attempts=2,
                           recorder=rec, sleep=lambda s: None, jitter=0, base_delay_s=1.5)
    evs = retry_events(tmp_path / "r")
    assert [(e["attempt"], e["ok"], e["error_type"], e["message"], e["delay_s"]) for e in evs] == [
        (1, False, "TimeoutError", "t1", 1.5), (2, False, "TimeoutError", "t2", None)]
    assert evs[0]["name"] == "Flaky"  # a callable object: its class's qualname


def test_recorder_event_rejects_a_bad_kind(tmp_path):
    with Recorder(tmp_path / "r", torch.nn.Linear(2, 1)) as rec:
        with pytest.raises(InvalidInputError, match=r"event kind='': expected a non-empty string"):
            rec.event("")
        rec.event("note", text="hello")
    (note,) = [e for e in open_run(tmp_path / "r").events() if e["kind"] == "note"]
    assert note["text"] == "hello" and note["rank"] == 0


def test_default_name_is_the_qualname(tmp_path):
    def init_pg():
        return 1

    debugkit.retry(init_pg, run_dir=tmp_path)
    text = (tmp_path / "ranks" / "0" / RETRY_EVENTS_FILE).read_text()
    assert "test_default_name_is_the_qualname.<locals>.init_pg" in text


@pytest.mark.parametrize("kwargs,msg", [
    ({"attempts": 0}, r"attempts=0: expected an integer >= 1"),
    ({"attempts": 2.5}, r"attempts=2.5: expected an integer >= 1"),
    ({"attempts": True}, r"attempts=True: expected an integer >= 1"),
    ({"base_delay_s": -1}, r"base_delay_s=-1: expected a finite number >= 0"),
    ({"base_delay_s": float("nan")}, r"base_delay_s=nan: expected a finite number >= 0"),
    ({"max_delay_s": "5"}, r"max_delay_s='5': expected a finite number >= 0"),
    ({"jitter": 1.5}, r"jitter=1.5: expected a number in \[0, 1\]"),
    ({"on": ()}, r"on=\(\): expected an exception class or a tuple of exception classes"),
    ({"on": (ValueError, "x")}, r"on=\(<class 'ValueError'>, 'x'\): expected an exception class"),
    ({"on": int}, r"on=\(<class 'int'>,\): expected an exception class"),
    ({"run_dir": "a", "recorder": SimpleNamespace(event=print)}, r"give run_dir= or recorder=, not both"),
    ({"recorder": object()}, r"recorder=<object object at .*>: expected a debugkit.Recorder"),
    ({"rng": 3}, r"rng=3: expected a random.Random"),
    ({"sleep": 3}, r"sleep=3: expected a callable"),
])
def test_bad_arguments(kwargs, msg):
    fn = Flaky([])
    with pytest.raises(InvalidInputError, match=msg):
        debugkit.retry(fn, **kwargs)
    assert fn.calls == 0


def test_fn_not_callable():
    with pytest.raises(InvalidInputError, match=r"fn=42: expected a callable"):
        debugkit.retry(42)


def test_import_debugkit_does_not_import_torch_and_retry_is_the_function():
    code = ("import sys, debugkit, debugkit.retry; from debugkit.retry import backoff_delay; "
            "print(callable(debugkit.retry), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_gloo_init_process_group_retried(tmp_path, monkeypatch):
    """Attempt 1 joins a 2-rank group whose master port is closed (a real DistNetworkError
    after ~1 s); attempt 2 forms a 1-rank group. Both attempts land in the run."""
    import torch.distributed as dist

    monkeypatch.setenv("RANK", "0")
    attempts_made = []

    def init():
        attempts_made.append(1)
        if len(attempts_made) == 1:  # a peer that is not up: nobody listens on the port
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                                    rank=1, world_size=2, timeout=datetime.timedelta(seconds=1))
        else:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                                    rank=0, world_size=1, timeout=datetime.timedelta(seconds=10))

    run_dir = tmp_path / "run"
    try:
        debugkit.retry(init, attempts=3, base_delay_s=0.1, run_dir=run_dir, name="init_pg")
        assert dist.is_initialized() and dist.get_world_size() == 1
        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0]
        with Recorder(run_dir, torch.nn.Linear(2, 1), flush_every_s=0.05):
            pass
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    evs = retry_events(run_dir)
    assert [(e["attempt"], e["ok"]) for e in evs] == [(1, False), (2, True)]
    assert evs[0]["error_type"] in ("DistNetworkError", "DistStoreError", "RuntimeError")
    assert 0.05 <= evs[0]["delay_s"] <= 0.15 and evs[1]["delay_s"] is None
