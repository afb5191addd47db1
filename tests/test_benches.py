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
    assert re.search(r"debugkit without layer statistics \(layer_stats_every=None\) beyond the norms = "
                     r"-?\d+\.\d% \(-?\d+\.\d us; paired by round: -?\d+\.\d%\); the default's layer "
                     r"statistics \(every 500 steps\) on its unsampled steps: [-+]\d+\.\d\d% paired", out), out
    assert "the Recorder's own code alone" in out
    assert "all parts but the norms" in out


@pytest.mark.slow
def test_layer_stats_quick_prints_the_targets_and_the_peers_ratio():
    out = _run("layer_stats.py", "--quick")
    assert re.search(r"layer statistics beyond the recorder: [-+]\d+\.\d\d % of thread CPU, "
                     r"[-+]\d+\.\d\d % of process CPU \(target <= 2 %: (met|NOT met)\)", out)
    assert re.search(r"tb histograms beyond bare: .* \(target: ours cheaper: (met|NOT met)\)", out)
    assert re.search(r"=> at every=5: .* \(target <= 2 %: (met|NOT met)\); break-even every=", out)
    assert re.search(r"an unsampled step, in place \(.*\): [-+]\d+\.\d us, \+ band updates "
                     r"\d+\.\d us/step \(\d+ calls in \d+ steps\) = -?\d+\.\d us", out)
    assert re.search(r"add_histogram of every weight and gradient: \+-?\d+\.\d+ ms per logged step = "
                     r"-?\d+\.\d\dx one sampled step of ours \(target: ours cheaper: (met|NOT met)\)", out)


@pytest.mark.slow  # what it runs: SeaweedFS, 10 runs uploaded, 12 measured processes (~60 CPU s)
def test_object_store_quick_prints_every_row_with_cpu_and_the_targets():
    """bench/object_store.py --quick (issue 29's speed targets): each row has wall and CPU
    seconds on S3 and on disk and the proxy's request count, and a line per target."""
    out = _run("object_store.py", "--quick")
    assert out.startswith("10 runs (synced with their pack.zip); S3 (SeaweedFS) behind +40 ms per request")
    for row in ("list cold (empty index)", "list indexed (new process)", "Home cold (empty index)",
                "Home indexed (new process)", "Overview of one run (new process)",
                "Overview, empty cache (new process)"):
        assert re.search(rf"^{re.escape(row)}\s+\d+\.\d\d\s+\d+\.\d\d\s+\d+\s+\d+\.\d\d\s+\d+\.\d\d$", out, re.M), row
    # the indexed store is a constant number of requests whatever the number of runs
    assert re.search(r"^Home indexed \(new process\)\s+\S+\s+\S+\s+[1-3]\s", out, re.M), out
    # cold: the store's listing and one GET per run (its pack.zip), not one per file
    assert re.search(r"^Home cold \(empty index\)\s+\S+\s+\S+\s+11\s", out, re.M), out
    for row, limit in (("Home cold (empty index)", 10), ("Home indexed (new process)", 3),
                       ("Overview of one run (new process)", 5)):
        assert re.search(rf"^target {re.escape(row)}: \d+\.\d\d s on S3 \(< {limit} s\): (met|NOT met) "
                         rf"\(measured with 10 runs at \+40 ms: not the target's setting\)$", out, re.M), row


@pytest.mark.slow
def test_recorder_paired_quick_prints_each_recorder_beyond_the_norms_on_one_model():
    """bench/recorder_paired.py --quick: the Recorder (this checkout's, one of a git
    revision, one with layer statistics) against the norms on one model, paired by round."""
    out = _run("recorder_paired.py", "--quick", "--against", "HEAD", "--layer-stats", "500")
    assert out.startswith("one model, 5 variants, 3 rounds x 10 steps")
    for name in ("debugkit", "debugkit@HEAD", "debugkit\\+layers/500"):
        assert re.search(rf"\n{name} +\d+\.\d+ms +[-+]\d+\.\d us = [-+]\d+\.\d\d% of bare "
                         r"\(target <= 3%\)", out), out
    assert re.search(r"\nlayer statistics at every=500 beyond the Recorder, paired by round "
                     r"\(round medians: its unsampled steps\): [-+]\d+\.\d us = [-+]\d+\.\d\d% of bare", out), out
