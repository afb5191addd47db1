"""The Profiler's flamegraph in a real browser (pages/_flamegraph.js on a canvas): it draws
the training loop's frames, a hover names a frame with its file and samples, a click
zooms into it and Escape zooms out, a search paints the matching frames pink, a deep
profile scrolls, a flame graph has its root at the bottom, and the dark theme has no
white tooltip."""

from __future__ import annotations

import pytest

from debugkit.charts.profile import HIGHLIGHT

from .conftest import wait_for_app

pytestmark = pytest.mark.browser

CANVAS = "canvas[data-drawn]"
ROW = 18  # px per level (pages/_flamegraph.js)
HIGHLIGHT_RGB = [int(HIGHLIGHT[i:i + 2], 16) for i in (1, 3, 5)]

# the canvas's pixels that are the search's pink: their (x, y) in css px, one per row
PINK = """([canvas, rgb]) => {
  const ctx = canvas.getContext('2d'), dpr = canvas.width / canvas.clientWidth;
  const {data, width, height} = ctx.getImageData(0, 0, canvas.width, canvas.height);
  const out = [];
  for (let y = Math.floor(dpr * 9); y < height; y += Math.round(18 * dpr)) {
    for (let x = 0; x < width; x++) {
      const i = 4 * (y * width + x);
      if (data[i] === rgb[0] && data[i + 1] === rgb[1] && data[i + 2] === rgb[2]) {
        out.push([x / dpr + 1, y / dpr]); break; }
    }
  }
  return out; }"""


def _open(page, url):
    page.set_default_timeout(240_000)
    page.goto(url)
    wait_for_app(page)
    canvas = page.locator(CANVAS)
    canvas.wait_for()
    canvas.scroll_into_view_if_needed()
    return canvas


def _hover(page, canvas, x, y) -> tuple[str, str]:
    """Move the pointer to (x, y) of the canvas: the row under it, and the tooltip's text."""
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + x, box["y"] + y)
    tip = page.locator(".dk-flame-tip")
    tip.wait_for(state="visible", timeout=30_000)
    return canvas.get_attribute("data-hover"), tip.inner_text()


def test_hover_click_to_zoom_and_escape(server, page):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_viewport_size({"width": 1280, "height": 1000})
    canvas = _open(page, server.url + "/profiler?run=digits-profiled")
    assert int(canvas.get_attribute("data-drawn")) > 100  # the training loop's 171 frames, most drawn
    assert canvas.get_attribute("aria-label").startswith("Icicle chart of 171 frames")
    root_row, tip = _hover(page, canvas, 20, ROW / 2)
    assert tip.startswith("training loop: train (examples/digits.py, lines 94-101)")
    assert "3,795 samples (100.00 % of all)" in tip
    # level 2, the left end: the loop's widest child (backward, 48 % of the loop)
    row, tip = _hover(page, canvas, 20, 2 * ROW + ROW / 2)
    lines = tip.splitlines()
    assert lines[0] == "Tensor.backward" and lines[1] == "torch/_tensor.py", lines
    assert "samples (" in lines[2] and "% of all)" in lines[2] and lines[-1] == "click (or Enter) to zoom in"
    width = canvas.bounding_box()["width"]
    # a narrow frame further right on the same level, then zoom into it: it spans the width
    right_row, _ = _hover(page, canvas, width * 0.85, 2 * ROW + ROW / 2)
    assert right_row != row
    page.mouse.click(canvas.bounding_box()["x"] + width * 0.85, canvas.bounding_box()["y"] + 2.5 * ROW)
    page.wait_for_function(f"(c) => c.dataset.zoom === '{right_row}'", arg=canvas.element_handle())
    assert _hover(page, canvas, 5, 2 * ROW + ROW / 2)[0] == right_row
    assert _hover(page, canvas, width - 5, 2 * ROW + ROW / 2)[0] == right_row
    assert _hover(page, canvas, width - 5, ROW / 2)[0] == root_row  # the ancestors span the width too
    canvas.focus()
    page.keyboard.press("Escape")  # out one level: the zoomed frame's parent
    page.wait_for_function(f"(c) => c.dataset.zoom !== '{right_row}'", arg=canvas.element_handle())
    assert _hover(page, canvas, width * 0.85, 2 * ROW + ROW / 2)[0] == right_row  # back in its place
    assert errors == []


def test_search_paints_the_matching_frames_pink(server, page):
    page.set_viewport_size({"width": 1400, "height": 1400})
    canvas = _open(page, server.url + "/profiler?run=digits-profiled")
    assert page.evaluate(PINK, [canvas.element_handle(), HIGHLIGHT_RGB]) == []
    box = page.get_by_role("textbox", name="Search a function")
    box.fill("backward")
    box.press("Enter")
    page.get_by_text("function(s) match").first.wait_for()
    wait_for_app(page)
    canvas = page.locator(CANVAS)
    page.wait_for_function(f"([c, rgb]) => ({PINK})([c, rgb]).length > 0",
                           arg=[canvas.element_handle(), HIGHLIGHT_RGB])
    pink = page.evaluate(PINK, [canvas.element_handle(), HIGHLIGHT_RGB])
    names = [_hover(page, canvas, x, y)[1].splitlines()[0] for x, y in pink]
    assert names and all("backward" in n.lower() for n in names), names
    assert "search=backward" in page.url


def test_a_deep_profile_scrolls_and_a_flame_graph_has_its_root_at_the_bottom(server, page):
    page.set_viewport_size({"width": 1280, "height": 1000})
    canvas = _open(page, server.url + "/profiler?run=digits-profiled&scope=all")
    scroller = page.locator(".dk-flame-scroll")
    size = scroller.evaluate("s => [s.scrollHeight, s.clientHeight]")
    assert size[1] == 32 * ROW and size[0] > 100 * ROW, size  # the main thread's 162 levels
    assert _hover(page, canvas, 20, ROW / 2)[1].startswith("all\n")
    scroller.evaluate("s => { s.scrollTop = 60 * 18; }")
    page.wait_for_timeout(200)
    # level 60 now at the top (another point: the pointer did not move since the last hover)
    assert not _hover(page, canvas, 30, ROW / 2)[1].startswith("all\n")
    canvas = _open(page, server.url + "/profiler?run=digits-profiled&flame=1")
    height = canvas.bounding_box()["height"]
    assert _hover(page, canvas, 20, height - ROW / 2)[1].startswith("training loop: train")
    assert _hover(page, canvas, 20, height - 1.5 * ROW)[1].startswith("train\nexamples/digits.py")  # above it


def test_the_dark_theme_tooltip_is_dark(server, browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000}, color_scheme="dark")
    page = ctx.new_page()
    try:
        canvas = _open(page, server.url + "/profiler?run=digits-profiled")
        _hover(page, canvas, 20, 2 * ROW + ROW / 2)
        bg = page.locator(".dk-flame-tip").evaluate("t => getComputedStyle(t).backgroundColor")
        rgb = [int(v) for v in bg[bg.index("(") + 1:bg.index(")")].split(",")[:3]]
        assert sum(rgb) < 200, bg
        # the gaps between frames are the page's own background, not white
        gap = canvas.evaluate("""c => { const d = c.getContext('2d').getImageData(0, 17 * c.width / c.clientWidth + 0.5 | 0, 1, 1).data;
                                        return [d[0], d[1], d[2], d[3]]; }""")
        assert gap[3] == 0 or sum(gap[:3]) < 200, gap
    finally:
        ctx.close()


def test_the_keyboard_walks_the_frames_and_zooms(server, page):
    """Tab to the figure, the arrow keys to a frame (its parent, widest child, neighbours
    on its level), Enter to zoom into it, Escape out; the tooltip (a live region) names it."""
    page.set_viewport_size({"width": 1280, "height": 1000})
    canvas = _open(page, server.url + "/profiler?run=digits-profiled")
    tip = page.locator(".dk-flame-tip")
    assert tip.get_attribute("role") == "status" and tip.get_attribute("aria-live") == "polite"
    canvas.focus()

    def press(key) -> str:
        page.keyboard.press(key)
        tip.wait_for(state="visible", timeout=30_000)
        return tip.inner_text().splitlines()[0]

    assert press("ArrowDown") == "train"
    assert press("ArrowDown") == "Tensor.backward"  # the widest child: 48 % of the loop
    backward = canvas.get_attribute("data-hover")
    right = press("ArrowRight")
    assert right != "Tensor.backward" and canvas.get_attribute("data-hover") != backward
    assert press("ArrowLeft") == "Tensor.backward"
    assert press("ArrowUp") == "train"
    press("ArrowDown")
    press("ArrowRight")
    row = canvas.get_attribute("data-hover")
    page.keyboard.press("Enter")
    page.wait_for_function(f"(c) => c.dataset.zoom === '{row}'", arg=canvas.element_handle())
    width = canvas.bounding_box()["width"]
    assert _hover(page, canvas, width - 5, 2 * ROW + ROW / 2)[1].splitlines()[0] == right  # spans the width
    canvas.focus()
    page.keyboard.press("Escape")
    page.wait_for_function(f"(c) => c.dataset.zoom !== '{row}'", arg=canvas.element_handle())
