"""How the front end starts on a page's own URL under ``debugkit ui``'s launcher
(pages/_serve.py serves Streamlit's front end with a script in its index.html).

Opened at ``/audit``, Streamlit's front end first asked ``/audit/_stcore/health`` and
``/audit/_stcore/host-config`` (404s), waited 100 ms and asked the server's root: every
link into a page, and every reload, paid that before the page's script ran. And the
Plotly chart code (4.7 MB) was fetched only once the first chart had arrived. Real
Chromium, the requests it made in order.
"""

from __future__ import annotations

import pytest

from .conftest import start_server, stop_server, wait_for_app

pytestmark = pytest.mark.browser

PLOT = "[data-testid='stPlotlyChart'] .js-plotly-plot"


def _requests(page) -> list[str]:
    """The URLs the page requests, in order, its websocket's among them."""
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    page.on("websocket", lambda ws: seen.append(ws.url))
    return seen


def _visit(page, url, selector=PLOT) -> list[str]:
    seen = _requests(page)
    page.goto(url)
    page.locator(selector).first.wait_for()
    wait_for_app(page)
    return seen


def _health(seen) -> list[str]:
    return [u.split("?")[0] for u in seen if "_stcore/health" in u or "_stcore/host-config" in u]


def test_a_page_link_asks_the_servers_root_first_and_fetches_the_chart_code_early(server, page):
    seen = _visit(page, server.url + "/audit?run=credit-audit")
    assert _health(seen) == [server.url + "/_stcore/health", server.url + "/_stcore/host-config"]
    plotly = [i for i, u in enumerate(seen) if "/static/js/PlotlyChart." in u]
    stream = [i for i, u in enumerate(seen) if "_stcore/stream" in u]
    assert plotly and stream and plotly[0] < stream[0]  # asked for with the front end, not after it
    # the page works on: a link of the page menu opens another page and its chart
    page.get_by_role("link", name="Profiler").first.click()
    page.wait_for_url("**/profiler?run=credit-audit")
    page.get_by_role("heading", name="Profiler").wait_for()
    wait_for_app(page)
    assert page.get_by_text("This run holds no profiles yet.").count() == 1


def test_pages_without_a_chart_do_not_fetch_the_chart_code_first(server, page):
    seen = _visit(page, server.url + "/replay?run=digits-bad-label", "[data-testid='stSidebar']")
    assert _health(seen) == [server.url + "/_stcore/health", server.url + "/_stcore/host-config"]
    assert not any("/static/js/PlotlyChart." in u for u in seen)
    seen = _visit(page, server.url + "/", "[data-testid='stTable'], [data-testid='stDataFrame']")
    assert _health(seen) == [server.url + "/_stcore/health", server.url + "/_stcore/host-config"]
    assert not any("/static/js/PlotlyChart." in u for u in seen)


def test_under_a_base_url_path_a_page_link_asks_that_path(tmp_path, page):
    """``--server.baseUrlPath dk``: the page ``/dk/audit`` asks ``/dk/_stcore/health``;
    the app's root ``/dk`` is not a page, so the front end finds its server itself."""
    srv = start_server(tmp_path, args=("--server.baseUrlPath", "dk"))
    try:
        seen = _visit(page, srv.url + "/dk/audit?run=credit-audit")
        assert _health(seen) == [srv.url + "/dk/_stcore/health", srv.url + "/dk/_stcore/host-config"]
        seen = _visit(page, srv.url + "/dk", "[data-testid='stTable'], [data-testid='stDataFrame']")
        assert srv.url + "/dk/_stcore/health" in _health(seen)
    finally:
        stop_server(srv)


def test_without_the_launchers_script_a_page_link_asked_the_page_path_first(tmp_path, page):
    """What the launcher's script saves: the same server started with
    ``DEBUGKIT_FRONTEND_PATCH=0`` serves Streamlit's index.html as it is, and the front
    end asks ``/audit/_stcore/health`` before the root."""
    srv = start_server(tmp_path, {"DEBUGKIT_FRONTEND_PATCH": "0"})
    try:
        seen = _visit(page, srv.url + "/audit?run=credit-audit")
        health = _health(seen)
        assert health[:2] == [srv.url + "/audit/_stcore/health", srv.url + "/audit/_stcore/host-config"]
        assert srv.url + "/_stcore/health" in health
    finally:
        stop_server(srv)
