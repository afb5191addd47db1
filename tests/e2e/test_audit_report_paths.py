"""The Bias audit's HTML report, downloaded from the owner's view in a real browser, names
the command that computed the audit without that machine's folders (as the page's
Provenance table does: tests/app/test_recorded_paths.py). credit-audit was computed by
``/work/wt/credit/examples/credit.py --out /work/wt/credit/sample_runs/credit-audit``."""

from __future__ import annotations

import json

import pytest

from .conftest import ROOT, start_server, stop_server, wait_for_app

pytestmark = pytest.mark.browser
SAMPLE = "credit-audit"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("report-srv"))
    yield srv
    stop_server(srv)


def test_the_downloaded_report_names_the_command_relative_to_the_project(server, browser, tmp_path):
    cwd = json.loads((ROOT / "sample_runs" / SAMPLE / "manifest.json").read_text())["env"]["cwd"]
    ctx = browser.new_context(accept_downloads=True)
    page = ctx.new_page()
    page.set_default_timeout(180_000)
    try:
        page.goto(f"{server.url}/audit?run={SAMPLE}")
        wait_for_app(page)
        page.get_by_role("button", name="Download report (HTML)").wait_for()
        with page.expect_download() as dl:
            page.get_by_role("button", name="Download report (HTML)").click()
        html = tmp_path / "report.html"
        dl.value.save_as(str(html))
    finally:
        ctx.close()
    text = html.read_text()
    assert "examples/credit.py --out sample_runs/credit-audit" in text
    assert cwd not in text and str(ROOT) not in text
