"""The two benches of the Recorder's cost print their target lines (issue 32 item 1, issue 33
"Cost"): their --quick smoke runs, run as a user runs them. The figures of a smoke run mean
nothing (a few steps on a loaded machine); the lines and their structure are checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _run(script, *args):
    root = str(BENCH.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=BENCH.parent, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


@pytest.mark.slow
def test_recorder_overhead_quick_prints_beyond_the_norms_against_its_target():
    out = _run("recorder_overhead.py", "--quick")
    assert re.search(r"by training-thread CPU .*debugkit beyond the norms = -?\d+\.\d%"
                     r" \(-?\d+\.\d us; paired by round: -?\d+\.\d%\) \(target <= 3%\)", out)
    assert "the Recorder's own code alone" in out
    assert "all parts but the norms" in out


@pytest.mark.slow
def test_layer_stats_quick_prints_the_targets_and_the_peers_ratio():
    out = _run("layer_stats.py", "--quick")
    assert re.search(r"layer statistics beyond the recorder: [-+]\d+\.\d\d % of thread CPU, "
                     r"[-+]\d+\.\d\d % of process CPU \(target <= 2 %: (met|NOT met)\)", out)
    assert re.search(r"tb histograms beyond bare: .* \(target: ours cheaper: (met|NOT met)\)", out)
    assert re.search(r"=> at every=5: .* \(target <= 2 %: (met|NOT met)\); break-even every=", out)
