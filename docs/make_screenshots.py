"""Screenshots of every page for the README and for looking at the pages as a user.

Starts `streamlit run app.py` on loopback with the bundled sample runs, opens each page
in Debian's chromium (Playwright) at the given viewport, and writes PNGs.

    python docs/make_screenshots.py [--out docs/img] [--size 1280x800] [--scheme dark]

``--scheme dark`` opens the pages in a browser that prefers a dark colour scheme (the
app follows it) and adds ``-dark`` to the file names, to look at every chart in the dark
theme.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import CHROMIUM_ARGS, chromium_path, start_server, wait_for_app  # noqa: E402

# (file name, url path and query, text to wait for): one shot per page, on the sample
# run that shows it best. "last:" waits for the text's last occurrence (a widget label
# that the page's help text also names).
SHOTS = [
    ("home", "/", "Runs"),
    ("overview", "/overview?run=digits-bad-label", "Target 12 is out of bounds."),
    ("scalars", "/scalars?run=digits-exploding&key=loss&key=lr", "last:Log scale"),
    ("gradients", "/gradients?run=digits-exploding", "Gradients"),
    # a run whose second ReLU alone is dead (tests/analysis/_layer_jobs.py), put in the store
    ("layers", "/layers?run=dead-relu", "Quantiles over steps"),
    # the NaN sample, with the first non-finite output of its failing step in focus (what a
    # finding's "Show" button opens)
    ("layers-nan", "/layers?run=digits-unscaled-init&stat=frac_nonfinite&step=2&module=4",
     "Quantiles over steps"),
    ("memory", "/memory?run=memory-leak", "Memory"),
    ("profiler", "/profiler?run=digits-profiled", "Profiler"),
    ("distributed", "/distributed?run=ddp-straggler", "Distributed"),
    ("checkpoints", "/checkpoints?run=digits-resumed", "Checkpoints"),
    ("replay", "/replay?run=digits-bad-label", "Replay"),
    ("compare", "/compare?run=digits-compare-lr&base=digits-compare-base", "Compare runs"),
    ("audit", "/audit?run=credit-audit", "Bias audit"),
    # an inference run (debugkit.serve): requests on the x axis
    ("serving-overview", "/overview?run=serve-leak", "Latency: rolling percentiles"),
    ("serving-memory", "/memory?run=serve-leak", "Host memory after each request"),
    ("serving-replay", "/replay?run=serve-leak&failure=r0-000-req0000707-nonfinite", "called as"),
]

# Wait until Streamlit has finished the script run, no element is still a loading
# skeleton, every plotly chart has drawn, and so has every flamegraph (a canvas in a
# component's shadow root, pages/_flamegraph.js).
SETTLED = """() => !document.querySelector('[data-testid="stStatusWidget"]')
  && !document.querySelector('[data-testid="stSpinner"]')
  && !document.querySelector('[data-testid="stSkeleton"]')
  && [...document.querySelectorAll('.js-plotly-plot')].every(p => p.querySelector('.main-svg'))
  && [...document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')]
       .every(c => c.shadowRoot ? c.shadowRoot.querySelector('canvas[data-drawn]')
                                : c.querySelector('canvas[data-drawn]'))"""


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--size", nargs="+", default=["1280x800", "1920x1080"])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--scheme", choices=["light", "dark"], default="light")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="dk-shots-"))
    if not a.only or "layers" in a.only:
        from tests.analysis._layer_jobs import dead_relu

        dead_relu(tmp / "store" / "dead-relu")
    srv = start_server(tmp)
    suffix = "-dark" if a.scheme == "dark" else ""
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            for size in a.size:
                w, h = (int(v) for v in size.split("x"))
                page = b.new_page(viewport={"width": w, "height": h}, color_scheme=a.scheme)
                for name, url, text in SHOTS:
                    if a.only and name not in a.only:
                        continue
                    page.goto(srv.url + url)
                    wait_for_app(page)
                    loc = page.get_by_text(text.removeprefix("last:"))
                    (loc.last if text.startswith("last:") else loc.first).wait_for(timeout=90_000)
                    page.wait_for_timeout(1000)
                    page.wait_for_function(SETTLED, timeout=120_000)
                    page.wait_for_timeout(1000)
                    path = out / f"{name}-{w}x{h}{suffix}.png"
                    page.screenshot(path=str(path), full_page=True)
                    print(path, flush=True)
                page.close()
            b.close()
    finally:
        srv.proc.terminate()


if __name__ == "__main__":
    main()
