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
