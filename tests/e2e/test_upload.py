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
    page.get_by_text("digits-bad-label").first.wait_for(timeout=60_000)
    wait_for_app(page)
    page.get_by_text("Target 12 is out of bounds.").first.wait_for(state="visible", timeout=60_000)
    assert "run=uploaded-run" in page.url
    stored = [p.name for p in server.store.iterdir() if not p.name.startswith(".")]
    assert stored == ["uploaded-run"]
    page.screenshot(path=str(tmp_path / "upload.png"))


def test_an_upload_on_a_server_of_other_folders_is_listed_and_its_link_reopens_it(tmp_path, browser):
    """`debugkit ui sample_runs` serves sample_runs alone (DEBUGKIT_ROOTS); an upload lands
    in the store and must still be listed, and its ?run= link must open it in a new tab."""
    from .conftest import start_server, stop_server

    srv = start_server(tmp_path / "srv", env_extra={"DEBUGKIT_ROOTS": str(ROOT / "sample_runs")})
    try:
        src = tmp_path / "leak-upload"
        shutil.copytree(ROOT / "sample_runs" / "memory-leak", src)
        ctx = browser.new_context(viewport={"width": 1280, "height": 800})
        page = ctx.new_page()
        page.set_default_timeout(30_000)
        page.goto(srv.url + "/overview")
        wait_for_app(page)
        page.get_by_text("Upload a run").click()
        uploader = page.get_by_test_id("stFileUploaderDropzone").first
        with page.expect_file_chooser() as fc:
            uploader.get_by_role("button", name="Upload directories").click()
        fc.value.set_files(str(src))
        page.get_by_text("Uploaded as leak-upload").first.wait_for(timeout=60_000)
        wait_for_app(page)
        assert "run=leak-upload" in page.url
        link = page.url
        other = ctx.new_page()  # a new tab: a new session
        other.goto(link)
        wait_for_app(other)
        # the sidebar names the open run; its picker (opened) lists it, selected
        other.get_by_test_id("stSidebar").get_by_text("leak-upload · change").click()
        picker = other.get_by_test_id("stSidebar").get_by_test_id("stSelectbox").first
        picker.wait_for()
        assert picker.get_by_role("combobox").input_value() == "leak-upload"
        assert other.get_by_text("no such run").count() == 0
        other.goto(srv.url + "/home")
        wait_for_app(other)
        # the run list is a canvas grid: search it and read the match count
        other.get_by_placeholder("run id or finding").fill("leak-upload")
        other.get_by_placeholder("run id or finding").press("Enter")
        other.get_by_text("1 of ").first.wait_for(timeout=60_000)
        assert "runs match" in other.get_by_text("1 of ").first.inner_text()
        ctx.close()
    finally:
        stop_server(srv)
