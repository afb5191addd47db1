"""Upload a run directory through the real file chooser and see it open."""

from __future__ import annotations

import shutil

import pytest

from .conftest import ROOT, wait_for_app

pytestmark = pytest.mark.browser


def test_upload_run_directory_opens_it(server, page, tmp_path):
    src = tmp_path / "uploaded-run"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", src)
    page.goto(server.url + "/overview")
    wait_for_app(page)
    page.get_by_text("Upload a run").click()
    uploader = page.get_by_test_id("stFileUploaderDropzone").first
    with page.expect_file_chooser() as fc:
        uploader.get_by_role("button", name="Upload directories").click()
    fc.value.set_files(str(src))
    page.get_by_text("digits-mlp-bad-label").first.wait_for(timeout=60_000)
    wait_for_app(page)
    page.get_by_text("Target 12 is out of bounds.").first.wait_for(state="visible", timeout=60_000)
    assert "run=uploaded-run" in page.url
    stored = [p.name for p in server.store.iterdir() if not p.name.startswith(".")]
    assert stored == ["uploaded-run"]
    page.screenshot(path=str(tmp_path / "upload.png"))
