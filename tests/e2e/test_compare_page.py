"""The Compare page in a real browser: from Home, pick two runs, land on the comparison."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import ROOT, wait_for_app

pytestmark = pytest.mark.browser

SHOT = ROOT / "docs" / "img" / "compare-1280x800.png"


def test_home_picks_two_runs_and_opens_the_comparison(server, page, tmp_path):
    page.goto(server.url + "/")
    wait_for_app(page)
    page.get_by_text("Compare two runs").wait_for(timeout=90_000)
    # The two pickers of the Home page's "Compare two runs" section.
    for label, value in (("Run to check", "digits-compare-lr"), ("Base (the run that worked)",
                                                        "digits-compare-base")):
        box = page.get_by_label(label, exact=True)
        box.click()
        box.fill(value)
        page.get_by_role("option", name=value, exact=True).wait_for()
        page.keyboard.press("Enter")
        wait_for_app(page)
        expect(page.get_by_label(label, exact=True)).to_have_value(value)
    page.get_by_role("button", name="Compare", exact=True).click()
    page.get_by_text("2. Where they diverge").wait_for(timeout=90_000)
    wait_for_app(page)
    assert "/compare" in page.url and "run=digits-compare-lr" in page.url \
        and "base=digits-compare-base" in page.url
    page.get_by_text("leaves the base run's band at step 12").wait_for(timeout=60_000)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p._fullLayout).length >= 2",
        timeout=90_000)
    # The loss chart: the band, then the run and the base, in their own colours.
    names = page.evaluate(
        "() => [...document.querySelectorAll('.js-plotly-plot')][0]._fullData.map(t => t.name)")
    assert names[:4] == ["base band (upper)", "base band", "digits-compare-lr", "digits-compare-base"]
    page.screenshot(path=str(tmp_path / "compare-top.png"), timeout=120_000)
    page.get_by_text("2. Where they diverge").evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(500)  # let the scroll settle before the picture (not a wait for the app)
    page.screenshot(path=str(SHOT), timeout=120_000)


def test_deep_link_opens_the_comparison(server, page, tmp_path):
    page.goto(server.url + "/compare?run=digits-compare-unlabelled&base=digits-compare-base")
    wait_for_app(page)
    page.get_by_text("1. What differs before step 0").wait_for(timeout=90_000)
    page.get_by_text("[-100, 10]").first.wait_for(state="attached", timeout=60_000)
    page.get_by_text("No divergence: the run stays inside").wait_for(timeout=60_000)
    page.screenshot(path=str(tmp_path / "compare-unlabelled.png"), timeout=120_000)
