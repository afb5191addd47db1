"""An inference run recorded by debugkit.serve, in a real browser: its Overview (requests
on the x axis, rolling latency percentiles, the failing request) and, from there, the
Replay of that request naming the token id."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.serve_fixtures import record_service, tagger_traffic, write_project

from .conftest import start_server, stop_server, wait_for_app

pytestmark = pytest.mark.browser

FID = "r0-000-req0000040-error"


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    import sys

    tmp = tmp_path_factory.mktemp("serving")
    root = write_project(tmp / "proj")
    sys.path.insert(0, str(root))
    try:
        srv = start_server(tmp, env_extra={"DEBUGKIT_CODE_ROOTS": str(root), "DEBUGKIT_CODE_TRUST": "anyone"})
        record_service(srv.store / "svc", factory="sproj.model:build_tagger",
                       traffic=tagger_traffic(300, bad_at=40), leak_bytes_per_request=64 * 1024)
        yield srv
        stop_server(srv)
    finally:
        sys.path.remove(str(root))


def _shot(page, tmp_path: Path, name: str) -> None:
    """A PNG of the viewport; also into $DEBUGKIT_SHOTS_DIR when set (docs/img, by hand)."""
    page.screenshot(path=str(tmp_path / name))
    if os.environ.get("DEBUGKIT_SHOTS_DIR"):
        shutil.copy(tmp_path / name, Path(os.environ["DEBUGKIT_SHOTS_DIR"]) / name)


def test_overview_then_replay_of_the_failing_request(serving, page, tmp_path):
    page.goto(f"{serving.url}/overview?run=svc")
    wait_for_app(page)
    page.get_by_text("stopped").first.wait_for()
    page.get_by_text("Latency: rolling percentiles over 200 requests").first.wait_for()
    metrics = page.locator("[data-testid='stMetric']")
    assert metrics.filter(has_text="Requests").first.inner_text().split()[-1] == "300"
    assert page.locator(".js-plotly-plot").count() == 2  # latency and errors/fallbacks
    page.get_by_text("index out of range in self").first.wait_for()
    _shot(page, tmp_path, "serving-overview-run-1280x800.png")

    page.get_by_role("link", name="Replay this request").first.click()
    # wait for the navigation itself: "IndexError" is on the Overview too, so waiting for the
    # text alone could read the URL before the link was followed
    page.wait_for_url(lambda u: "/replay" in u and f"failure={FID}" in u, timeout=60_000)
    wait_for_app(page)
    page.get_by_text("IndexError").first.wait_for()
    assert f"failure={FID}" in page.url and "run=svc" in page.url
    page.get_by_text("I trust this code").first.click()
    page.get_by_role("button", name="Replay", exact=True).click()
    culprit = page.locator(".st-key-culprit")
    culprit.get_by_text("holds token id 150 at position 3").first.wait_for(timeout=120_000)
    wait_for_app(page)
    assert culprit.get_by_text("input_ids").first.is_visible()
    assert page.get_by_text("Validate requests at the service's edge").first.is_visible()
    culprit.scroll_into_view_if_needed()
    _shot(page, tmp_path, "serving-replay-culprit-1280x800.png")
