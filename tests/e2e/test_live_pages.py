"""Pages follow a run while it is written: a real Recorder trains in background processes
(two ranks, as torchrun would start them) and each page shows the new steps without a
click or a reload."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from .conftest import ROOT, start_server, stop_server, wait_for_app

pytestmark = pytest.mark.browser

#: The largest numeric x of every trace of every chart on the page (steps), -1 for none.
_LAST_X = """
() => Math.max(-1, ...[...document.querySelectorAll('.js-plotly-plot')].flatMap(
    gd => (gd._fullData || []).flatMap(t => Array.from(t.x || []).filter(v => typeof v === 'number'))))
"""
#: The number of checkpoints the Checkpoints page's caption names, -1 before it is drawn.
_CHECKPOINTS = """
() => { const m = document.body.innerText.match(/(\\d+) checkpoint\\(s\\)/); return m ? +m[1] : -1; }
"""
#: Pages watched while the run goes on: (path, probe, its value once the first 10 steps
#: are drawn, its growth for each phase of 5 steps and one checkpoint).
PAGES = [("overview", _LAST_X, 9, 5), ("scalars", _LAST_X, 9, 5), ("gradients", _LAST_X, 9, 5),
         ("memory", _LAST_X, 9, 5), ("layers", _LAST_X, 9, 5), ("distributed", _LAST_X, 9, 5),
         ("checkpoints", _CHECKPOINTS, 1, 1)]


def _start_ranks(run, gates, phases):
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(rank), "WORLD_SIZE": "2",
               "LOCAL_RANK": str(rank), "CUDA_VISIBLE_DEVICES": ""}
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.e2e._live_trainer", str(run),
                                       str(gates), str(phases)], cwd=ROOT, env=env,
                                      stdout=subprocess.DEVNULL, stderr=open(gates / f"rank{rank}.log", "w")))
    return procs


def _wait_for_first_checkpoint(run, procs, limit_s: float = 180) -> None:
    """Until the first 10 steps are written (the checkpoint after them is on disk)."""
    deadline = time.time() + limit_s
    while not (run / "checkpoints").is_dir() or not any((run / "checkpoints").iterdir()):
        assert all(p.poll() is None for p in procs), "a training process exited"
        assert time.time() < deadline, "the first 10 steps were not written"
        time.sleep(0.2)


def _stop(procs, gates):
    (gates / "stop").touch()
    for p in procs:
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(30)


def test_every_page_follows_a_run_a_recorder_is_writing(tmp_path, browser):
    runs, gates = tmp_path / "runs", tmp_path / "gates"
    runs.mkdir()
    gates.mkdir()
    procs = _start_ranks(runs / "live", gates, len(PAGES))
    _wait_for_first_checkpoint(runs / "live", procs)
    srv = start_server(tmp_path / "srv", env_extra={"DEBUGKIT_ROOTS": str(runs)})
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(90_000)
    try:
        for k, (name, probe, drawn, growth) in enumerate(PAGES, start=1):
            page.goto(f"{srv.url}/{name}?run=live")
            wait_for_app(page)
            page.wait_for_function(f"() => ({probe})() >= {drawn}", timeout=120_000)
            page.wait_for_timeout(1000)
            before = page.evaluate(probe)
            (gates / f"go{k}").touch()  # the run goes on: no click, no reload
            try:
                page.wait_for_function(f"() => ({probe})() >= {before + growth}", timeout=120_000)
            except Exception:
                raise AssertionError(f"{name} did not follow the run: still at {page.evaluate(probe)}, "
                                     f"{before} before 5 more steps") from None
        # Home lists the run as running and follows it to its end
        page.goto(f"{srv.url}/home")
        wait_for_app(page)
        page.get_by_text("1 running: this list refreshes every few seconds").wait_for()
        _stop(procs, gates)
        deadline = time.time() + 120
        while page.get_by_text("1 running: this list refreshes").count() and time.time() < deadline:
            page.wait_for_timeout(500)
        assert page.get_by_text("1 running: this list refreshes").count() == 0
    finally:
        ctx.close()
        _stop(procs, gates)
        stop_server(srv)
