"""Replay the corrupted-label failure in a real browser and see the culprit sample."""

from __future__ import annotations

import io
import zipfile

import pytest

from .conftest import wait_for_app

pytestmark = pytest.mark.browser

FID = "r0-s0000075-exception"


def test_replay_corrupted_label_shows_culprit_sample(server, page, tmp_path):
    page.goto(f"{server.url}/replay?run=digits-bad-label&failure={FID}")
    wait_for_app(page)
    page.get_by_text("examples.digits:build_model").first.wait_for()
    page.get_by_role("button", name="Replay", exact=True).click()
    culprit = page.locator(".st-key-culprit")
    culprit.get_by_text("sample 6 (dataset index 1474) has label 12").wait_for(timeout=120_000)
    wait_for_app(page)
    assert culprit.get_by_text("1474").first.is_visible()
    assert page.get_by_text("Validate labels in the dataset").first.is_visible()
    assert f"failure={FID}" in page.url and "run=digits-bad-label" in page.url
    page.set_viewport_size({"width": 1280, "height": 3000})
    wait_for_app(page)
    page.screenshot(path=str(tmp_path / "replay.png"))
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download a minimal repro").click()
    data = open(dl.value.path(), "rb").read()
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert f"{FID}-repro/repro.py" in names
    assert f"{FID}-repro/code/examples/digits.py" in names


def test_bad_failure_param_is_refused_with_a_message(server, page):
    page.goto(f"{server.url}/replay?run=digits-bad-label&failure=../../etc")
    wait_for_app(page)
    page.get_by_text("expected an id like").first.wait_for()
    page.get_by_role("button", name="Replay", exact=True).wait_for()
    page.get_by_text("Target 12 is out of bounds.").first.wait_for()
    assert f"failure={FID}" in page.url
