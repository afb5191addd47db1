"""``bench/pages.py --quick`` (the smoke run of the page-speed bench) runs to the end and
prints what the lead re-runs it for: each page's gap to the one-chart Streamlit floor,
cold and warm, whether it is within the 0.5 s target, a count of the pages that are, and
the load-independent table. No figure is asserted on: times depend on the machine."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from .conftest import ROOT


@pytest.mark.slow
def test_quick_bench_prints_each_pages_gap_to_the_floor_and_the_target():
    out = subprocess.run([sys.executable, "bench/pages.py", "--quick"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "| gap to the floor, cold | gap to the floor, warm | within 0.5 s (cold / warm) |" in text
    num = r"[+-]\d+\.\d\d"
    for page, run in (("gradients", "digits-exploding"), ("checkpoints", "digits-resumed")):
        row = re.search(rf"^\| {page} \| {run} \| \d+\.\d\d \| \d+\.\d\d \| ({num}) \| ({num}) \| "
                        r"(yes|no) / (yes|no) \|", text, re.M)
        assert row, text
        assert (row[3] == "yes") == (float(row[1]) <= 0.5) and (row[4] == "yes") == (float(row[2]) <= 0.5)
    assert re.search(r"^Within 0\.5 s of the floor: [0-2] of 2 pages cold, [0-2] of 2 warm", text, re.M)
    assert re.search(r"^\| \(TensorBoard [\d.]+: the same run's scalars\) \| digits-exploding \|", text, re.M)
    # the shell floor (the floor's chart on a page of the app) beside the plain floor, and
    # the gap split into the shell's part and each page's own
    assert re.search(r"^\| \(shell floor: the same chart on a page of the app\) \| digits-exploding \| "
                     rf"\d+\.\d\d \| \d+\.\d\d \| {num} \| {num} \| - \|", text, re.M), text
    assert re.search(rf"^The gap split \(medians\): the app shell \(shell floor over the floor\) {num} s cold, "
                     rf"{num} s warm", text, re.M), text
    for page in ("checkpoints", "gradients"):
        row = re.search(rf"^\| {page} \| {num} \| {num} \| [\d.]+ \| [\d.]+ \| (\d+) / (\d+) \| (\d+) \| (.*) \|$", text, re.M)
        assert row and int(row[1]) > 0 and int(row[3]) > 1000, text  # messages; JS kB before the chart
        assert "PlotlyChart" not in row[4]  # the floor loads the chart's code too: not "beyond" it
    # the load-independent table: figures sent on the first visit (one: the open tab's
    # heatmap; the moved-most bars and Gradients' lines are drawn when opened), one script run
    for page in ("checkpoints", "gradients"):
        assert re.search(rf"^\| {page} \| \d+ \| \d+ \| [\d.]+ \| 1 \| [\d.]+ \| 1 \|", text, re.M), text
