"""The Memory page in a real browser: the leak sample's timeline, and a snapshot's views."""

from __future__ import annotations

import shutil

import pytest

from tests.memsnap_factory import USER, MiB, leaky_training

from .conftest import ROOT, wait_for_app

pytestmark = pytest.mark.browser


def test_memory_page_timeline_and_snapshot_tabs(server, page, tmp_path):
    from debugkit.io.run_memsnaps import import_snapshot

    run = server.store / "leak-with-snapshot"
    shutil.copytree(ROOT / "sample_runs" / "memory-leak", run)
    b = leaky_training(40)
    b.oom(64 * MiB, 10 * MiB, b.frames((USER + "train.py", 30, "train_step")))
    src = tmp_path / "oom.pickle"
    b.dump(src)
    import_snapshot(src, run, step=59)

    page.set_viewport_size({"width": 1400, "height": 2200})
    page.goto(server.url + "/memory?run=leak-with-snapshot")
    wait_for_app(page)
    page.get_by_text("keeps growing by").first.wait_for(timeout=90_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=180_000)  # plotly.js loads lazily
    page.get_by_text("Out of memory at event").first.wait_for(timeout=90_000)
    wait_for_app(page)
    assert page.locator(".js-plotly-plot").count() >= 2
    page.screenshot(path=str(tmp_path / "memory.png"))

    page.get_by_role("tab", name="Segments").click()
    page.get_by_text("cudaMalloc'd segment").first.wait_for()
    wait_for_app(page)
    page.screenshot(path=str(tmp_path / "memory-segments-tab.png"))
    page.get_by_role("tab", name="Alive at the end (leaks)").click()
    page.get_by_text("the signature of a leak").first.wait_for()
    wait_for_app(page)
    page.screenshot(path=str(tmp_path / "memory-leaks-tab.png"))
    assert "snapshot=r0-imported-oom" in page.url


def test_clicking_the_oom_marker_opens_the_capture(server, page, tmp_path):
    from tests.app.test_memory_page import make_oom_run

    run, fid = make_oom_run(server.store)
    page.set_viewport_size({"width": 1400, "height": 1600})
    page.goto(server.url + f"/memory?run={run.name}")
    wait_for_app(page)
    page.get_by_text("Out-of-memory failures").first.wait_for(timeout=90_000)
    marker = page.locator(".js-plotly-plot .scatterlayer .trace path.point").last
    marker.wait_for(timeout=180_000)
    marker.click(force=True)
    page.get_by_text(f"capture {fid}").first.wait_for(timeout=60_000)
    wait_for_app(page)
    page.screenshot(path=str(tmp_path / "memory-oom-click.png"))
