"""Share links in a real browser: a fresh context (no session) sees the audit alone and no
navigation; an altered token sees one refusal; another page's URL with a token still shows
the audit; the downloaded HTML report opens offline with its charts."""

from __future__ import annotations

import time

import pytest

from debugkit.audit import list_audits, make_token

from .conftest import ROOT, start_server, stop_server, wait_for_app

pytestmark = pytest.mark.browser
SECRET = "e2e-test-secret-0123456789abcdef"
SAMPLE = "credit-audit"


@pytest.fixture(scope="module")
def share_server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("share-srv"), {"DEBUGKIT_SECRET": SECRET})
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def audit_id():
    return list_audits(ROOT / "sample_runs" / SAMPLE)[0]["id"]


def link(server, audit_id, token=None, page="audit"):
    token = token or make_token(SAMPLE, audit_id, int(time.time()) + 3600, SECRET.encode())
    return f"{server.url}/{page}?run={SAMPLE}&audit={audit_id}&token={token}"


def _expander(page, label):
    """An expander's header (a click opens it); ``label`` matched case-sensitively in it."""
    import re

    return page.locator("[data-testid='stExpander'] summary").filter(has_text=re.compile(re.escape(label))).first


def wait_for_charts(page, n):
    page.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot .main-svg').length >= {n}",
                           timeout=180_000)


def test_share_link_in_a_fresh_browser_shows_the_audit_alone(share_server, browser, audit_id, tmp_path):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(link(share_server, audit_id))
        wait_for_app(page)
        page.get_by_text("Bias audit: ").first.wait_for()
        page.get_by_text("Shared read-only view of audit").first.wait_for()
        page.get_by_role("button", name="Download report (HTML)").wait_for()
        page.get_by_text("Provenance").first.wait_for()
        wait_for_app(page)
        wait_for_charts(page, 1)  # the disparity chart; the others are drawn when opened
        _expander(page, "SHAP summary").click()  # a share visitor opens them too
        wait_for_charts(page, 3)
        # the open state reaches the address bar with the run's last messages, which a loaded
        # machine may deliver after the charts are drawn: wait for it, then check the token stays
        page.wait_for_function("() => location.search.includes('shap=1')", timeout=60_000)
        wait_for_app(page)
        assert "token=" in page.url
        assert page.get_by_test_id("stSidebar").count() == 0
        assert page.get_by_test_id("stSidebarNav").count() == 0
        assert page.get_by_text("Open a run").count() == 0
        assert page.get_by_text("Upload a run").count() == 0
        assert page.get_by_text("Compute a new audit").count() == 0
        assert page.get_by_text("Share with compliance").count() == 0
        assert page.get_by_role("button", name="Download report (HTML)").count() == 1
        page.screenshot(path=str(tmp_path / "shared.png"))
    finally:
        ctx.close()


def test_another_page_in_the_url_still_shows_only_the_audit(share_server, browser, audit_id):
    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(link(share_server, audit_id, page="overview"))
        wait_for_app(page)
        page.get_by_text("Bias audit: ").first.wait_for()
        page.get_by_text("Provenance").first.wait_for()
        wait_for_app(page)
        assert page.get_by_test_id("stSidebar").count() == 0
        assert page.get_by_text("Steps", exact=True).count() == 0
    finally:
        ctx.close()


def test_a_share_link_with_an_open_tab_keeps_it_and_a_tab_click_keeps_the_token(share_server, browser,
                                                                                audit_id):
    import urllib.parse

    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    try:
        # on another path, as a reviewer might paste it: forwarded to the audit with its tab
        page.goto(link(share_server, audit_id, page="overview") + "&attr=foreign_worker")
        wait_for_app(page)
        page.get_by_text("Bias audit: ").first.wait_for()
        page.get_by_text("Group metrics").first.wait_for()
        wait_for_app(page)
        selected = [t.inner_text().strip() for t in page.get_by_role("tab", selected=True).all()]
        assert selected == ["foreign_worker · Needs review"]  # the SHAP tabs: drawn when opened
        # no "Page not found" over it (it left the page inert: no tab could be clicked)
        assert page.get_by_role("dialog").count() == 0
        _expander(page, "Per sensitive attribute").click()
        page.get_by_role("tab", name="sex", exact=True).wait_for()
        wait_for_app(page)
        page.get_by_role("tab", name="sex", exact=True).click()
        page.wait_for_function("() => new URLSearchParams(location.search).get('shap_attr') === 'sex'")
        wait_for_app(page)
        q = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)
        assert q["token"] and q["audit"] == [audit_id] and q["attr"] == ["foreign_worker"]
        assert page.get_by_text("Shared read-only view of audit").count() == 1
        assert page.get_by_test_id("stSidebar").count() == 0
        assert page.get_by_text("Compute a new audit").count() == 0
        assert page.get_by_text("Share with compliance").count() == 0
    finally:
        ctx.close()


@pytest.mark.parametrize("how", ["altered", "expired"])
def test_bad_token_shows_the_refusal(share_server, browser, audit_id, how, tmp_path):
    tok = make_token(SAMPLE, audit_id, int(time.time()) + (3600 if how == "altered" else -5), SECRET.encode())
    if how == "altered":
        tok = tok[:-1] + ("A" if tok[-1] != "A" else "B")
    ctx = browser.new_context()
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(link(share_server, audit_id, token=tok))
        wait_for_app(page)
        page.get_by_text("This share link cannot be opened").first.wait_for()
        assert page.get_by_text("Bias audit").count() == 0
        assert page.get_by_test_id("stSidebar").count() == 0
        assert page.locator(".js-plotly-plot").count() == 0
        page.screenshot(path=str(tmp_path / f"refused-{how}.png"))
    finally:
        ctx.close()


def test_downloaded_report_opens_offline(share_server, browser, audit_id, tmp_path):
    import hashlib

    ctx = browser.new_context(accept_downloads=True)
    page = ctx.new_page()
    page.set_default_timeout(180_000)
    try:
        page.goto(link(share_server, audit_id))
        wait_for_app(page)
        page.get_by_text("Bias audit: ").first.wait_for()
        with page.expect_download() as dl:
            page.get_by_role("button", name="Download report (HTML)").click()
        html_path = tmp_path / "report.html"
        dl.value.save_as(str(html_path))
        wait_for_app(page)
        with page.expect_download() as dl2:
            page.get_by_role("button", name="Download audit JSON").click()
        json_path = tmp_path / "audit.json"
        dl2.value.save_as(str(json_path))
    finally:
        ctx.close()
    sha = hashlib.sha256(json_path.read_bytes()).hexdigest()
    assert sha in html_path.read_text()
    off = browser.new_context(offline=True, viewport={"width": 1280, "height": 1000})
    requests = []
    page = off.new_page()
    page.on("request", lambda r: requests.append(r.url))
    page.set_default_timeout(120_000)
    try:
        page.goto(html_path.as_uri())
        page.locator("#json-sha256").wait_for()
        assert page.locator("#json-sha256").inner_text() == sha
        wait_for_charts(page, 14)
        page.screenshot(path=str(tmp_path / "report-offline.png"), full_page=True)
    finally:
        off.close()
    assert [u for u in requests if not u.startswith(("file:", "data:", "blob:"))] == []
