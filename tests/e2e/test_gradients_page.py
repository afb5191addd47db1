"""The Gradients page in a real browser: click the spike on the line chart and see that
step's details."""

from __future__ import annotations

import pytest

from .conftest import wait_for_app

pytestmark = pytest.mark.browser

# The exploding sample's total gradient norm jumps 56x at step 98 (lr 10 after the
# StepLR typo); its value there is 12.66.
SPIKE_STEP = 98

_POINT_JS = """
([step]) => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  const gd = plots.find(p => (p._fullData || []).some(t => t.name === 'total'));
  const tr = gd._fullData.find(t => t.name === 'total');  // arrays decoded from base64
  const xs = Array.from(tr.x), ys = Array.from(tr.y);
  const i = xs.indexOf(step);
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const box = gd.querySelector('.main-svg').getBoundingClientRect();
  return {x: box.left + xa._offset + xa.l2p(xs[i]),
          y: box.top + ya._offset + ya.l2p(Math.log10(ys[i])), value: ys[i]};
}
"""

_HOVERED_JS = """
([step]) => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')]
      .find(p => (p._fullData || []).some(t => t.name === 'total'));
  const h = (gd && gd._hoverdata) || [];
  return h.length > 0 && h.every(d => d.x === step && d.data.name === 'total');
}
"""


def test_click_spike_shows_step_details(server, page, tmp_path):
    page.set_viewport_size({"width": 1400, "height": 1600})
    page.goto(server.url + "/gradients?run=digits-exploding")
    wait_for_app(page)
    page.get_by_text("exploding_grad").first.wait_for(timeout=90_000)
    # the lines are built when opened: the heatmap is the page's first and only chart till then
    page.get_by_text("Lines per layer").click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot')].some("
        "p => (p._fullData || []).some(t => t.name === 'total') && p._fullLayout)", timeout=90_000)
    assert page.get_by_text(f"Step {SPIKE_STEP}", exact=True).count() == 0
    page.get_by_text("Click a point to see that step. NaN/Inf").scroll_into_view_if_needed()
    # Like a user: hover until plotly's tooltip is on the spike, then click. Under load the
    # page can still be laying out when the point's position is read (CI once clicked step
    # 101 from a position read a moment too early), so the position is read again until the
    # hover lands on the spike itself.
    for _ in range(20):
        pt = page.evaluate(_POINT_JS, [SPIKE_STEP])
        assert pt["value"] == pytest.approx(12.66, rel=1e-3)
        page.mouse.move(pt["x"] - 3, pt["y"] - 3)
        page.mouse.move(pt["x"], pt["y"])
        if page.evaluate(_HOVERED_JS, [SPIKE_STEP]):
            break
        page.wait_for_timeout(500)
    else:
        pytest.fail(f"the pointer never hovered step {SPIKE_STEP} of the total's line")
    page.mouse.click(pt["x"], pt["y"])
    heading = page.get_by_role("heading", name=f"Step {SPIKE_STEP}")
    heading.wait_for(timeout=60_000)
    wait_for_app(page)
    assert f"step={SPIKE_STEP}" in page.url
    details = page.get_by_test_id("stMetric")
    assert details.filter(has_text="total grad norm").first.inner_text().split()[-1] == "12.66"
    assert details.filter(has_text="learning rate").first.inner_text().split()[-1] == "10"
    page.get_by_text("r0-s0000103-nonfinite").first.wait_for()
    page.screenshot(path=str(tmp_path / "gradients-click.png"), timeout=120_000)


def test_typed_tensorboard_log_dir_opens_on_the_gradients_page(server, page, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "my-tb-run"
    w = SummaryWriter(str(logdir))
    for s in range(30):
        w.add_scalar("grad_norm/fc1.weight", 1.0 + 0.01 * s, s)
        w.add_scalar("grad_norm/fc2.weight", float("nan") if s >= 25 else 0.5, s)
        w.add_scalar("loss", 2.0 - 0.01 * s, s)
    w.close()
    page.goto(server.url + "/gradients")
    wait_for_app(page)
    page.get_by_text("Open a path").click()
    page.get_by_label("Run directory, .zip or TensorBoard log dir").fill(str(logdir))
    page.get_by_test_id("stBaseButton-secondaryFormSubmit").click()
    page.get_by_text("fc2.weight").first.wait_for(timeout=90_000)
    wait_for_app(page)
    page.get_by_text("nonfinite_grad").first.wait_for(timeout=60_000)
    page.get_by_text("2 of 2 parameters").first.wait_for()
    assert "run=my-tb-run" in page.url
    assert list(logdir.iterdir())[0].name.startswith("events.out.tfevents.")
    assert len(list(logdir.iterdir())) == 1  # the log directory is only read
    page.screenshot(path=str(tmp_path / "tensorboard.png"), timeout=120_000)


def test_show_step_scrolls_its_panel_into_view(server, page):
    """At 1280x800 the step panel is drawn far below the fold: "Show step N" scrolls there."""
    page.goto(server.url + "/gradients?run=digits-exploding")
    wait_for_app(page)
    page.get_by_role("button", name="Show step 91").click()
    heading = page.get_by_role("heading", name="Step 91")
    heading.wait_for(timeout=60_000)
    page.wait_for_function(
        """() => { const el = document.getElementById('step-details');
                   if (!el) return false;
                   const r = el.getBoundingClientRect();
                   return r.top >= 0 && r.top < window.innerHeight; }""", timeout=30_000)
