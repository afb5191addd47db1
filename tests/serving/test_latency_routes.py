"""latency_regression is judged per route, through ``debugkit diagnose --json``: a run
recorded by debugkit.serve whose /v1/generate slows after request 600 while /v1/score stays
flat gives exactly one finding, naming /v1/generate; the same traffic with no slow-down
gives none. The latencies are planted by the recorder's clock (the test sets what
``time.perf_counter`` returns inside the recorded block), so they do not depend on this
machine's load; the run is written and read by the real recorder, reader and CLI."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import torch

import debugkit
import debugkit.recorder.serve as serve_mod

from ..conftest import ROOT, console_script


def _record(run_dir, monkeypatch, *, slows: bool, seed: int = 0, n: int = 1500):
    clock = {"t": 1000.0}
    monkeypatch.setattr(serve_mod.time, "perf_counter", lambda: clock["t"])
    # a row's wall time is its perf_counter() start plus the wall clock's offset: the wall
    # clock moves with the planted one (as a machine's two clocks do)
    monkeypatch.setattr(serve_mod.time, "time", lambda: 1.7e9 + clock["t"])
    rng = np.random.default_rng(seed)
    model = torch.nn.Linear(4, 2).eval()
    with debugkit.serve(model, run_dir, hash_weights=False) as rec:
        for i in range(n):
            route = "/v1/generate" if rng.random() < 0.3 else "/v1/score"
            base = 1.5 if route == "/v1/score" else (4.0 if i < 600 or not slows else 12.0)
            x = torch.ones(1, 4)
            with torch.no_grad(), rec.request({"x": x}, route=route) as r:
                clock["t"] += base * float(rng.lognormal(0, 0.08)) / 1e3
                r.output(model(x))
            clock["t"] += 1e-3  # between requests
    monkeypatch.undo()


def _diagnose(run_dir, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([console_script(), "diagnose", str(run_dir), "--json"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["findings"]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_route_that_slows_is_the_one_finding(tmp_path, monkeypatch, seed):
    _record(tmp_path / "svc", monkeypatch, slows=True, seed=seed)
    (tmp_path / "elsewhere").mkdir()
    found = _diagnose(tmp_path / "svc", tmp_path / "elsewhere")
    (f,) = [f for f in found if f["kind"] == "latency_regression"]
    assert f["evidence"]["route"] == "/v1/generate" and f["rank"] == 0
    assert f["evidence"]["before"]["p50_ms"] == pytest.approx(4.0, rel=0.05)
    assert f["evidence"]["after"]["p50_ms"] == pytest.approx(12.0, rel=0.05)
    assert 600 <= f["step"] < 620 and "route /v1/generate" in f["message"]
    assert found == [f]


def test_the_flat_twin_has_no_finding(tmp_path, monkeypatch):
    _record(tmp_path / "svc", monkeypatch, slows=False)
    assert _diagnose(tmp_path / "svc", tmp_path) == []
