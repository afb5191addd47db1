"""Memory findings on the golden sample runs, recorded by real training scripts."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from debugkit import open_run
from debugkit.analysis.memory import MiB, theil_sen, window_minima
from debugkit.diagnose import diagnose
from tests.conftest import ROOT, SAMPLE_RUNS

MEMORY_KINDS = {"memory_leak", "memory_pressure", "fragmentation"}


def test_memory_leak_sample_reports_the_leak_with_its_rate():
    run = open_run(SAMPLE_RUNS / "memory-leak")
    found = [f for f in diagnose(run) if f.kind in MEMORY_KINDS]
    assert [(f.kind, f.rank) for f in found] == [("memory_leak", 0)]
    ev = found[0].evidence
    assert ev["metric"] == "rss_bytes"
    # the rate is the Theil-Sen slope of the window minima after warm-up (10 %, >= 5 steps),
    # recomputed here from the recorded table
    mem = run.memory().sort_values("step")
    steps, rss = mem["step"].to_numpy(), mem["rss_bytes"].astype("float64").to_numpy()
    warm = max(5, int(np.ceil(0.1 * len(steps))))
    x, y = window_minima(steps[warm:], rss[warm:], min(20, (len(steps) - warm) // 3))
    assert ev["bytes_per_step"] == theil_sen(x, y)[0]
    # each kept loss holds ~6 MiB of activations (3 x 1024 x 512 float32) plus its graph
    assert 4 * MiB <= ev["bytes_per_step"] <= 16 * MiB
    assert ev["start_step"] <= warm
    assert ev["last_step"] == int(steps.max())
    assert rss[-1] - rss[0] > 300 * MiB  # RSS visibly grows
    cap = run.memory_capacity()["host_capacity_bytes"].iloc[0]
    assert ev["capacity_bytes"] == cap
    assert ev["oom_step"] == ev["last_step"] + int(np.ceil((cap - ev["level_bytes"]) / ev["bytes_per_step"]))
    assert "per step from step" in found[0].message


@pytest.mark.parametrize("name", ["digits-mlp", "digits-bad-label"])
def test_healthy_and_crashed_digits_runs_get_no_memory_finding(name):
    found = [f for f in diagnose(open_run(SAMPLE_RUNS / name)) if f.kind in MEMORY_KINDS]
    assert found == []


def test_diagnose_cli_reports_the_leak():
    proc = subprocess.run([sys.executable, "-m", "debugkit", "diagnose", str(SAMPLE_RUNS / "memory-leak"),
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    kinds = [f["kind"] for f in json.loads(proc.stdout)["findings"]]
    assert kinds == ["memory_leak"]
