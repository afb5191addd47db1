"""The Profiler page in a real browser: search a function and see it highlighted."""

from __future__ import annotations

import pytest

from debugkit.charts.profile import HIGHLIGHT

from .conftest import wait_for_app

pytestmark = pytest.mark.browser

HIGHLIGHT_RGB = "rgb({}, {}, {})".format(*(int(HIGHLIGHT[i:i + 2], 16) for i in (1, 3, 5)))

SLICES = """() => Array.from(document.querySelectorAll('.js-plotly-plot g.slice')).map(g => ({
    fill: (g.querySelector('path.surface') || {style: {}}).style.fill,
    text: (g.querySelector('text') || {textContent: ''}).textContent}))"""


def test_search_highlights_a_function(server, page, tmp_path):
    page.set_default_timeout(240_000)
    page.set_viewport_size({"width": 1400, "height": 2400})
    page.goto(server.url + "/profiler?run=digits-profiled")
    wait_for_app(page)
    page.locator(".js-plotly-plot g.slice").first.wait_for(timeout=240_000)
    before = page.evaluate(SLICES)
    assert before and not any(s["fill"] == HIGHLIGHT_RGB for s in before)
    box = page.get_by_role("textbox", name="Search a function")
    box.fill("backward")
    box.press("Enter")
    page.get_by_text("function(s) match").first.wait_for(timeout=240_000)
    wait_for_app(page)
    page.wait_for_function(
        "(rgb) => Array.from(document.querySelectorAll('.js-plotly-plot g.slice path.surface'))"
        ".some(p => p.style.fill === rgb)", arg=HIGHLIGHT_RGB, timeout=240_000)
    after = page.evaluate(SLICES)
    lit = [s["text"] for s in after if s["fill"] == HIGHLIGHT_RGB]
    assert lit, after[:10]
    assert all("backward" in t.lower() for t in lit if t), lit
    assert "search=backward" in page.url
    page.screenshot(path=str(tmp_path / "profiler-search.png"), full_page=True)
