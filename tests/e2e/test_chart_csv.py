"""A chart's CSV download in a real browser (its own server: see the note in
/work/notes of issue 35 on a shared server)."""

from __future__ import annotations

import pytest

from .conftest import wait_for_app

pytestmark = pytest.mark.browser


def test_a_chart_s_csv_download_holds_its_data(server, page, tmp_path):
    page.goto(server.url + "/scalars?run=digits-exploding")
    wait_for_app(page)
    page.locator(".js-plotly-plot").first.wait_for()
    wait_for_app(page)
    button = page.get_by_test_id("stDownloadButton").first.get_by_role("button")
    download = None
    for _ in range(3):  # a click while the session is still busy can be dropped: click again
        try:
            with page.expect_download(timeout=30_000) as dl:
                button.click()
            download = dl.value
            break
        except Exception:  # noqa: BLE001 - playwright's TimeoutError; retried
            wait_for_app(page)
    assert download is not None, "no download after three clicks"
    assert download.suggested_filename == "scalars_chart.csv"
    path = tmp_path / "chart.csv"
    download.save_as(path)
    lines = path.read_text().splitlines()
    assert lines[0] == "trace,x,y,value"
    nan = [line for line in lines if line.startswith("loss: NaN/inf,")]
    assert len(nan) == 1 and nan[0].startswith("loss: NaN/inf,103,") and nan[0].endswith(",NaN")
    assert sum(line.startswith("loss,") for line in lines) == 103  # steps 0-102 (103 is NaN)
