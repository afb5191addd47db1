"""Pages follow a run while it is written: new steps appear without a click or reload."""

from __future__ import annotations

import pytest

from .conftest import start_server, stop_server, wait_for_app

pytestmark = pytest.mark.browser

_LAST_X = """
() => {
  const gd = [...document.querySelectorAll('.js-plotly-plot')].find(
      p => (p._fullData || []).some(t => t.name === 'loss'));
  if (!gd) return -1;
  const tr = gd._fullData.find(t => t.name === 'loss');
  const xs = Array.from(tr.x);
  return xs.length ? Math.max(...xs) : -1;
}
"""


def _live_run(root):
    import time

    from debugkit import format as fmt
    from debugkit._fsutil import atomic_write_json
    from debugkit.recorder.writer import RankWriter

    run = root / "live"
    run.mkdir(parents=True)
    atomic_write_json(run / fmt.MANIFEST, {"schema_version": fmt.SCHEMA_VERSION, "run_id": "l",
                                           "name": "live", "config": {}})
    d = run / fmt.RANKS_DIR / "0"
    w = RankWriter(d, n_layers=1, flush_every_s=3600)  # heartbeat: running, this process
    atomic_write_json(d / "meta-000.json", {"rank": 0, "layers": ["w"], "segment": 0})

    def add(steps):
        for s in steps:
            w.add("scalars", (s, "loss", 2.0 - 0.01 * s, time.time()))
            w.add("grads", (s, [1.0]))
        w.flush()

    return w, add


def test_scalars_follow_a_live_run(tmp_path, browser):
    w, add = _live_run(tmp_path / "runs")
    add(range(10))
    srv = start_server(tmp_path / "srv", env_extra={"DEBUGKIT_ROOTS": str(tmp_path / "runs")})
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    try:
        page.goto(srv.url + "/scalars?run=live")
        wait_for_app(page)
        page.get_by_text("live: refreshes every few seconds").first.wait_for()
        page.wait_for_function(f"() => ({_LAST_X})() === 9", timeout=60_000)
        add(range(10, 30))  # the run goes on: no click, no reload
        page.wait_for_function(f"() => ({_LAST_X})() === 29", timeout=60_000)
    finally:
        ctx.close()
        w.close()
        stop_server(srv)
