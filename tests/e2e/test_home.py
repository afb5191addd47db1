"""Home in a real browser: /home is Home (no "Page not found" notice), and a click on a
run's row opens it."""

from __future__ import annotations

import pytest

from .conftest import wait_for_app

pytestmark = pytest.mark.browser


def test_home_path_opens_home_and_a_row_click_opens_the_run(server, page):
    page.goto(server.url + "/home")
    wait_for_app(page)
    page.get_by_role("heading", name="Runs", exact=True).wait_for()
    assert page.get_by_text("Page not found").count() == 0
    assert page.get_by_text("You have requested page").count() == 0
    grid = page.get_by_test_id("stDataFrame").first
    grid.wait_for()
    page.wait_for_timeout(500)  # the grid draws on a canvas after it is mounted
    box = grid.bounding_box()
    # the row marker (selection) column at the left of the first data row
    page.mouse.click(box["x"] + 14, box["y"] + 35 + 17)
    page.wait_for_url("**/overview?run=accelerate-nan", timeout=60_000)
    wait_for_app(page)
    picker = page.get_by_test_id("stSidebar").get_by_role("combobox", name="Open a run")
    assert picker.input_value() == "accelerate-nan"
