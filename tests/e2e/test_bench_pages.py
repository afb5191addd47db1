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
    phases = r"(\d+\.\d\d) / (\d+\.\d\d) / (\d+\.\d\d)"  # start / script / draw s
    for page in ("(floor)", "(shell floor)", "checkpoints", "gradients"):
        row = re.search(rf"^\| {re.escape(page)} \| {num} \| {num} \| [\d.]+ \| [\d.]+ \| (\d+) / (\d+) \| "
                        rf"(\d+) \([\d.]+\) \| (\d+) \| {phases} \| (\d+) \| (.*) \|$", text, re.M)
        assert row and int(row[1]) > 0 and int(row[8]) > 1000, text  # messages; JS kB before the chart
        assert 0 < int(row[3]) <= int(row[1])  # messages up to the first chart's, of all of them
        assert int(row[4]) == 0, text  # the sidebar is drawn after the page's first chart
        assert float(row[5]) > 0 and float(row[7]) > 0  # the front end's start; the drawing
        assert "PlotlyChart" not in row[9]  # the floor loads the chart's code too: not "beyond" it
    # the load-independent table: figures sent on the first visit (one: the open tab's
    # heatmap; the moved-most bars and Gradients' lines are drawn when opened), one script run
    for page in ("checkpoints", "gradients"):
        assert re.search(rf"^\| {page} \| \d+ \| \d+ \| [\d.]+ \| 1 \| [\d.]+ \| 1 \|", text, re.M), text


def _bench():
    """bench/pages.py as a module (its name would clash with the app's pages package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_pages", ROOT / "bench" / "pages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("page, run", [("scalars", "digits-exploding"), ("overview", "digits-bad-label")])
def test_a_chart_page_sends_its_first_chart_before_the_sidebar(server, browser, page, run):
    """The sidebar (the page menu's 12 links, the run's expander, "Open a path", "Upload a
    run") is drawn after the page: before, its ~20 messages and the server's work for them
    came before every page's first chart (the shell floor's chart came after 25 of 27
    messages; the plain Streamlit floor's after 4). Counted in the browser, as bench/pages.py
    counts them: websocket frames from the server up to the one with the first chart."""
    bench = _bench()
    got = bench.time_to_chart(browser, f"{server.url}/{page}?run={run}", bench.PLOT, server.proc.pid)
    assert got["figures"] >= 1
    assert got["sidebar_before"] == 0, got
    assert got["ws_before"] < got["ws_msgs"] - 15, got  # the sidebar's messages came after the chart
    assert got["script_s"] >= 0 and got["draw_s"] > 0 and got["boot_s"] > 0, got
