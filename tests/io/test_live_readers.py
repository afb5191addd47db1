"""A run written by a live training process while several sessions read it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .live_run import N_LAYERS, read_and_check

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.mark.timeout(600)
@pytest.mark.slow  # a writer and readers racing: 14.8 CPU s (tests._cputime)
def test_readers_never_see_a_torn_record_while_the_writer_appends(tmp_path):
    run = tmp_path / "live"
    writer = subprocess.Popen([sys.executable, str(HERE / "live_run.py"), str(run), "400", "0.02"],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    errors, reads = [], []
    stop = threading.Event()

    def reader():
        prev = None
        while not stop.is_set():
            if not (run / "manifest.json").exists():
                time.sleep(0.01)
                continue
            try:
                prev = read_and_check(run, prev)
                reads.append(prev)
            except AssertionError as exc:
                errors.append(str(exc))
                return
            except Exception as exc:  # the run must always open mid-write
                errors.append(f"{type(exc).__name__}: {exc}")
                return

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        out, _ = writer.communicate(timeout=500)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert writer.returncode == 0
    assert not errors, errors[:3]
    # the readers saw the run grow while it was written, not only the finished run: some
    # read found part of it (how many reads fit in the writer's ~8 s depends on the load)
    final = 400 * (2 * N_LAYERS + 1)
    grads = sorted({r["grads"] for r in reads})
    assert reads and grads[0] < final, (len(reads), grads[:10])
    assert read_and_check(run)["steps"] == len(json.loads(out)) == 400
    assert read_and_check(run)["grads"] == 400 * (2 * N_LAYERS + 1)
