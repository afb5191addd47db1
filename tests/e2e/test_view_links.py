"""A link carries the view: a deep link with view parameters opens each page as its sender
saw it, and changing a widget changes the address bar (issue 35, item 3)."""

from __future__ import annotations

import re
import urllib.parse

import pytest
from playwright.sync_api import expect

from .conftest import wait_for_app

pytestmark = pytest.mark.browser

_TRACES = """() => [...document.querySelectorAll('.js-plotly-plot')].map(
    gd => ({names: (gd._fullData || []).map(t => t.name), layout: gd._fullLayout}))"""


def _query(page) -> dict:
    return urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)


def _open(page, url):
    page.goto(url)
    wait_for_app(page)
    page.locator(".js-plotly-plot >> visible=true").first.wait_for()


def test_a_scalars_link_shows_its_series_scale_and_smoothing(server, page):
    _open(page, server.url + "/scalars?run=digits-exploding&key=loss&key=epoch&smoothing=0.3&log=0&raw=0")
    first = page.evaluate(_TRACES)[0]
    assert set(first["names"]) >= {"loss", "epoch"}
    assert not any(n.endswith("(raw)") for n in first["names"])
    assert first["layout"]["yaxis"]["type"] == "linear"  # against this run's default (log)
    # the slider is in a popover named after its value, drawn when opened (issue 35 item 9)
    assert page.get_by_test_id("stSlider").count() == 0
    page.get_by_role("button", name="Smoothing 0.3").click()
    expect(page.get_by_test_id("stSlider").get_by_text("0.30")).to_have_count(1)
    page.keyboard.press("Escape")
    # turning log scale back on is a change of the address bar
    page.get_by_test_id("stCheckbox").filter(has_text="Log scale").locator("label").click()
    page.wait_for_function("() => !location.search.includes('log=0')")
    wait_for_app(page)
    assert "log" not in _query(page) and _query(page)["smoothing"] == ["0.3"]


def test_a_memory_link_shows_its_axis_and_rank_layout(server, page):
    _open(page, server.url + "/memory?run=ddp-straggler&x=time&ranks=side&host_warn=0.9")
    layout = page.evaluate(_TRACES)[0]["layout"]
    titles = [v.get("title", {}).get("text") for k, v in layout.items() if k.startswith("xaxis")]
    assert "time" in titles
    texts = [a.get("text", "") for a in layout.get("annotations", [])]
    assert any("rank 3" in t for t in texts) and "90%" in texts  # a panel per rank, the warning band
    axis = page.get_by_role("radiogroup", name="X axis")
    assert axis.get_by_role("radio", checked=True).inner_text().strip() == "time"
    # back to steps: the parameter leaves the URL
    axis.get_by_role("radio", name="step", exact=True).click()
    page.wait_for_function("() => !location.search.includes('x=time')")
    assert _query(page)["ranks"] == ["side"]


def test_a_distributed_link_opens_its_tab_and_a_tab_click_is_in_the_url(server, page):
    _open(page, server.url + "/distributed?run=ddp-straggler&tab=divergence")
    selected = page.get_by_role("tab", selected=True)
    assert selected.inner_text().strip() == "Gradient divergence"
    page.get_by_role("tab", name="Hangs").click()
    page.wait_for_function("() => location.search.includes('tab=hangs')")
    wait_for_app(page)
    assert page.get_by_role("tab", selected=True).inner_text().strip() == "Hangs"


def test_a_home_link_filters_the_run_list(server, page):
    page.goto(server.url + "/home?q=exploding&status=failed")
    wait_for_app(page)
    page.get_by_text("1 of ").first.wait_for(timeout=60_000)
    assert "runs match" in page.get_by_text("1 of ").first.inner_text()
    box = page.get_by_placeholder("run id or finding")
    # the box gets its value from the link (the list above is already filtered by it); the
    # browser may paint the widget a moment after the caption, so wait for the value
    expect(box).to_have_value("exploding", timeout=30_000)
    box.fill("digits")
    box.press("Enter")
    page.wait_for_function("() => location.search.includes('q=digits')")
    assert _query(page)["status"] == ["failed"]


def test_a_compare_link_shows_its_runs_layer_and_scale(server, page):
    _open(page, server.url + "/compare?run=digits-compare-lr&base=digits-compare-base"
                             "&extra=digits-compare-unlabelled&layer=2.weight&log=1")
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2", timeout=60_000)
    loss, grad = page.evaluate(_TRACES)[:2]
    runs = ["digits-compare-lr", "digits-compare-base", "digits-compare-unlabelled"]
    assert [n for n in loss["names"] if n in runs] == runs
    assert loss["layout"]["yaxis"]["type"] == "log"  # against these losses' default (linear)
    assert grad["layout"]["yaxis"]["title"]["text"] == "grad norm: 2.weight"
    assert "digits-compare-unlabelled" in grad["names"]
    assert page.get_by_test_id("stMultiSelect").get_by_text("digits-compare-unlabelled").count() == 1
    # the scale back to linear: the parameter leaves the address bar, the others stay
    page.get_by_test_id("stCheckbox").filter(has_text="Log scale").locator("label").click()
    page.wait_for_function("() => !location.search.includes('log=1')")
    wait_for_app(page)
    q = _query(page)
    assert q["extra"] == ["digits-compare-unlabelled"] and q["layer"] == ["2.weight"]
    assert page.evaluate(_TRACES)[0]["layout"]["yaxis"]["type"] == "linear"


def test_an_audit_link_opens_its_attribute_tabs_and_a_tab_click_is_in_the_url(server, page):
    page.goto(server.url + "/audit?run=credit-audit&attr=sex&shap_attr=foreign_worker")
    wait_for_app(page)
    page.get_by_text("Group metrics").first.wait_for(timeout=120_000)
    page.locator(".js-plotly-plot >> visible=true").first.wait_for(timeout=120_000)
    selected = [t.inner_text().strip() for t in page.get_by_role("tab", selected=True).all()]
    assert selected == ["sex · Needs review", "foreign_worker"]
    page.get_by_role("tab", name="foreign_worker · Needs review").click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('attr') === 'foreign_worker'")
    wait_for_app(page)
    q = _query(page)
    assert q["attr"] == ["foreign_worker"] and q["shap_attr"] == ["foreign_worker"]
    assert q["run"] == ["credit-audit"] and "audit" in q


def test_a_replay_link_selects_its_options_and_runs_nothing(server, page):
    page.goto(server.url + "/replay?run=digits-bad-label&failure=r0-s0000075-exception&device=cpu&timeout=60")
    wait_for_app(page)
    page.get_by_role("button", name="Replay", exact=True).wait_for(timeout=60_000)
    device = page.get_by_role("radiogroup", name="Device")
    assert device.get_by_role("radio", name="cpu", exact=True).is_checked()
    assert page.get_by_label("Timeout (s)").input_value() == "60.00"
    assert page.get_by_text("Reproduced", exact=True).count() == 0  # the link ran no replay
    device.locator("label").filter(has_text="auto").click()
    page.wait_for_function("() => !new URLSearchParams(location.search).has('device')")
    q = _query(page)
    assert q["timeout"] == ["60"] and q["failure"] == ["r0-s0000075-exception"]


def test_a_gradients_link_shows_its_lines_and_thresholds(server, page):
    _open(page, server.url + "/gradients?run=digits-exploding&line=2.bias&line=8.bias&explode_factor=100000")
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].some("
                           "gd => (gd._fullData || []).some(t => t.name === '8.bias'))", timeout=60_000)
    lines = next(c for c in page.evaluate(_TRACES) if "8.bias" in c["names"])
    layers = {n.split(":")[0] for n in lines["names"] if n and n[0].isdigit()}
    assert layers == {"2.bias", "8.bias"}  # the two lines of the link, no default line
    assert _query(page)["explode_factor"] == ["100000"]
    at_91 = re.compile(r"exploding_grad · step 91 ")
    assert page.get_by_text(at_91).count() == 0  # the explosion found at that threshold is later
    _open(page, server.url + "/gradients?run=digits-exploding&line=2.bias&line=8.bias")
    page.get_by_text(at_91).first.wait_for()  # ... than at the default
