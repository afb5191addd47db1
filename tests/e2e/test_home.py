"""Home in a real browser: /home is Home (no "Page not found" notice), and a click on a
run's row opens it."""

from __future__ import annotations

import pytest

from .conftest import ROOT, wait_for_app

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
    # the sidebar names the open run (its picker is drawn when that expander is opened)
    page.get_by_test_id("stSidebar").get_by_text("accelerate-nan · change").wait_for(timeout=60_000)


def test_the_favicon_is_served_by_the_app_and_the_theme_follows_the_user(server, browser):
    import base64

    for scheme, dark in (("dark", True), ("light", False)):
        ctx = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme=scheme)
        page = ctx.new_page()
        page.set_default_timeout(30_000)
        try:
            page.goto(server.url + "/scalars?run=digits-exploding")
            wait_for_app(page)
            page.locator(".js-plotly-plot").first.wait_for()
            icon = page.evaluate("() => document.querySelector(\"link[rel*='icon']\").href")
            # the app's own PNG, sent in the page's config as a data URL: no CDN, no request,
            # and no PIL re-encoding of the file in each new session's first script run
            head, _, data = icon.partition(",")
            assert head == "data:image/png;base64", icon[:80]
            assert base64.b64decode(data) == (ROOT / "assets" / "favicon.png").read_bytes()
            bg = page.evaluate("() => getComputedStyle(document.querySelector(\"[data-testid='stApp']\"))"
                               ".backgroundColor")
            rgb = [int(v) for v in bg[bg.index("(") + 1:bg.index(")")].split(",")[:3]]
            assert (sum(rgb) < 200) == dark, (scheme, bg)
            # the chart follows it too: its paper is transparent over the app's background
            # or drawn in the theme's colour
            paper = page.evaluate("() => document.querySelector('.js-plotly-plot')._fullLayout.paper_bgcolor")
            if paper.startswith("#"):
                prgb, alpha = [int(paper[i:i + 2], 16) for i in (1, 3, 5)], 1.0
            else:
                parts = [float(v) for v in paper[paper.index("(") + 1:paper.index(")")].split(",")]
                prgb, alpha = parts[:3], (parts[3] if len(parts) > 3 else 1.0)
            light_paper = alpha > 0 and sum(prgb) > 600
            assert light_paper != dark, (scheme, paper)  # no white chart on a dark page
        finally:
            ctx.close()


NARROW_PAGES = ["/home", "/overview?run=digits-bad-label", "/scalars?run=digits-exploding",
                "/gradients?run=digits-exploding", "/layers?run=digits-dead-relu", "/memory?run=memory-leak",
                "/profiler?run=digits-profiled", "/distributed?run=ddp-straggler",
                "/checkpoints?run=digits-resumed", "/replay?run=digits-bad-label",
                "/compare?run=digits-compare-lr&base=digits-compare-base", "/audit?run=credit-audit"]


@pytest.mark.parametrize("path", NARROW_PAGES)
def test_an_800px_window_breaks_no_label_or_title_inside_a_word(server, browser, path):
    ctx = browser.new_context(viewport={"width": 800, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(server.url + path)
        wait_for_app(page)
        page.locator("[data-testid='stHeading']").first.wait_for()
        if path == "/home":
            page.get_by_text("Where to look").wait_for()  # the end of the page
        page.wait_for_timeout(1500)  # charts and grids drawn after the script run
        # a widget label or a column narrower than its longest word breaks it letter by
        # letter ("Ran k"); every column keeps at least ~200 px, or wraps to its own row
        count_narrow = """() => [...document.querySelectorAll('[data-testid="stColumn"]')]
            .filter(c => c.getBoundingClientRect().width > 0 && c.getBoundingClientRect().width < 150)
            .length"""
        # settled: a page measured while Streamlit is still laying it out can show a row
        # of columns before app.py's narrow-window rule applies to it
        try:
            page.wait_for_function(f"() => ({count_narrow})() === 0", timeout=20_000)
        except Exception:
            pass
        assert page.evaluate(count_narrow) == 0
        broken = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stWidgetLabel"] p')]
            .filter(p => { const r = document.createRange(); r.selectNodeContents(p);
                           const words = p.textContent.split(/\\s+/).filter(Boolean).length;
                           const lines = new Set([...r.getClientRects()].map(x => Math.round(x.top))).size;
                           return lines > Math.max(words, 1); })
            .map(p => p.textContent)""")
        assert broken == []
        # nor is a page link's label cut off (Home's "Where to look" list was)
        cut = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stPageLink-NavLink"] span')]
            .filter(s => s.scrollWidth > s.clientWidth + 1).map(s => s.textContent)""")
        assert cut == []
        # nor a figure's value ("Grown by 432.4 …" on Memory): its type shrinks to the card
        values = page.evaluate("""() => [...document.querySelectorAll('.dk-figure-value')]
            .map(p => [p.textContent, p.scrollWidth <= p.clientWidth + 1, parseFloat(getComputedStyle(p).fontSize)])""")
        assert all(fits for _, fits, _ in values), values
        assert all(size >= 16 for *_, size in values), values  # never under 1rem
    finally:
        ctx.close()


def test_in_the_dark_theme_no_chart_keeps_a_white_frame_or_white_gaps(server, browser):
    """The gradient heatmap was drawn on a white plot area with white rules between its
    layer groups: a white box on a dark page."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        for path in ("/gradients?run=digits-exploding", "/checkpoints?run=digits-resumed"):
            page.goto(server.url + path)
            wait_for_app(page)
            page.locator(".js-plotly-plot >> visible=true").first.wait_for()
            whites = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(gd => {
                const l = gd._fullLayout, light = c => /^(white|#fff(fff)?|rgb\\(255, 255, 255\\))$/i.test(c || '');
                return [light(l.plot_bgcolor) ? 'plot_bgcolor' : null,
                        ...(l.shapes || []).map(s => light(s.line && s.line.color) ? 'shape' : null)]
                       .filter(Boolean); })""")
            assert whites == [], (path, whites)
    finally:
        ctx.close()
