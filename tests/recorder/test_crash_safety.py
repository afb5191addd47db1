"""SIGKILL a recording process at several points; the run must open, say `crashed`,
and hold every row flushed before the kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from debugkit import open_run

ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_crash_child.py")


def _record_then_kill(run_dir: Path, *, until: str, flush_s: float, extra_wait: float = 0.0):
    """Start the child, read its output until a line starting with `until`, kill it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(CHILD), str(run_dir), str(flush_s)],
                            stdout=subprocess.PIPE, text=True, env=env)
    flushed = -1
    deadline = time.time() + 600  # generous: a loaded 2-core machine is slow to start torch
    try:
        for line in proc.stdout:
            if line.startswith("flushed"):
                flushed = int(line.split()[1])
            if line.startswith(until):
                break
            if time.time() > deadline:
                raise AssertionError("child made no progress")
        time.sleep(extra_wait)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return flushed


@pytest.mark.timeout(900)
@pytest.mark.parametrize("until,flush_s,extra_wait", [
    ("started", 60.0, 0.0),     # killed before the first step's rows reach disk
    ("flushed 4", 60.0, 0.0),   # right after an explicit flush, long flush interval
    ("flushed 19", 0.01, 0.0),  # while the writer thread flushes every 10 ms
    ("step 42", 0.01, 0.013),   # in the middle of steps and flushes
])
def test_sigkill_leaves_a_readable_crashed_run(tmp_path, until, flush_s, extra_wait):
    run_dir = tmp_path / "run"
    flushed = _record_then_kill(run_dir, until=until, flush_s=flush_s, extra_wait=extra_wait)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a torn last batch is allowed (and reported)
        run = open_run(run_dir)
        assert run.status == "crashed"
        steps = run.steps()["step"].tolist()
        grads = run.grad_norms()
        scalars = run.scalars()
    assert steps == list(range(len(steps))), "rows are complete and in order"
    assert len(steps) >= flushed + 1, f"rows flushed through step {flushed} must be there"
    # every complete gradient row has all 5 entries (4 parameters + total)
    counts = grads.groupby("step", observed=True).size()
    assert (counts == 5).all()
    assert set(counts.index) <= set(steps) | {max(steps, default=-1) + 1}
    assert len(scalars[scalars.key == "loss"]) >= flushed + 1
    if until == "started":
        assert steps == []


def test_torn_last_batch_is_skipped_with_a_warning(tmp_path):
    run_dir = tmp_path / "run"
    flushed = _record_then_kill(run_dir, until="flushed 9", flush_s=60.0)
    path = run_dir / "ranks" / "0" / "grads-000.arrows"
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # cut the last record batch short
    from debugkit.errors import TruncatedRecordWarning

    with pytest.warns(TruncatedRecordWarning, match=r"grads-000.arrows: skipped a half-written record after \d+ complete rows"):
        g = open_run(run_dir).grad_norms()
    assert g["step"].max() < flushed + 1
    assert len(g) % 5 == 0


def test_death_between_two_tables_leaves_no_rows_past_the_steps_table(tmp_path):
    """A flush writes its steps rows before the other tables' rows: a process that dies
    between two writes leaves a step without its measurements, never measurements of a
    step the run does not list (the race CI hit now and then under SIGKILL)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(CHILD), str(run_dir), "60", "torn-flush"],
                          env=env, stdout=subprocess.DEVNULL, timeout=600)
    assert proc.returncode == 9
    run = open_run(run_dir)
    assert run.status == "crashed"
    steps = set(run.steps()["step"])
    assert steps == set(range(10)), "the dying flush wrote its steps rows first"
    assert set(run.grad_norms()["step"]) == set(range(5))
    assert set(run.scalars()["step"]) == set(range(5))


@pytest.mark.parametrize("mode", ["term-in-flush", "term-in-close"])
def test_sigterm_inside_the_training_threads_own_flush_loses_no_row(tmp_path, mode):
    """SIGTERM whose handler runs inside a flush of the same thread: the rows that flush
    took reach the disk, the signal is in the events, and the process then ends by it.
    ``term-in-close``: torchrun stopping a rank as it closes its Recorder (the elastic
    test's rank 0 in CI: its job is shorter than flush_every_s, so close() writes every
    row). close() put the default handler back first, and the signal ended the process
    after the steps table, before the other tables. ``term-in-flush``: any other flush of
    the training thread, where the handler waited for the lock its own thread held, gave
    up after 2 s and ended the process without the rows."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(CHILD), str(run_dir), "60", mode],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGTERM, proc.stderr[-2000:]
    assert "returned" not in proc.stdout  # the signal ended it once the rows were written
    run = open_run(run_dir)
    assert run.steps()["step"].tolist() == list(range(10))
    assert sorted(set(run.grad_norms()["step"])) == list(range(10))
    assert run.scalars().query("key == 'loss'")["step"].tolist() == list(range(10))
    kinds = [e["kind"] for e in run.events()]
    assert "signal" in kinds
    if mode == "term-in-close":
        # the close completed: its event, the final state, then the signal
        assert run.status == "finished" and kinds[-2:] == ["close", "signal"]
        assert run.events()[-1]["while_closing"] is True
    else:
        assert run.status == "crashed"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("handler,code", [("default", -signal.SIGTERM), ("own-handler", 3)])
def test_sigterm_writes_the_queued_rows_then_goes_on_as_before(tmp_path, handler, code):
    """torchrun stops the surviving ranks with SIGTERM: the rows of the last flush
    interval (60 s here, so none flushed yet) reach disk, the signal is in the events,
    and the process then ends as it would have (by the signal, or by its own handler)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    mode = "own-handler" if handler == "own-handler" else "no-flushes"
    proc = subprocess.Popen([sys.executable, str(CHILD), str(run_dir), "60", mode],
                            stdout=subprocess.PIPE, text=True, env=env)
    out = []
    try:
        for line in proc.stdout:
            out.append(line)
            if line.startswith("step 7"):
                break
        proc.send_signal(signal.SIGTERM)
        out += proc.stdout.readlines()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert proc.returncode == code
    assert ("own handler\n" in out) == (handler == "own-handler")
    last = max(int(line.split()[1]) for line in out if line.startswith("step "))
    run = open_run(run_dir)
    if handler == "own-handler":
        # sys.exit in the handler: the Recorder closes at exit, "failed" if the exit
        # came inside a step, "finished" if between two
        assert run.status in ("failed", "finished")
    else:
        assert run.status == "crashed"
        kinds = [e["kind"] for e in run.events()]
        assert "signal" in kinds
    steps = run.steps()["step"].tolist()
    assert steps[: last + 1] == list(range(last + 1)), "every step finished before the signal"
    assert set(run.grad_norms()["step"]) <= set(steps)
    assert len(run.scalars().query("key == 'loss'")) >= last + 1
