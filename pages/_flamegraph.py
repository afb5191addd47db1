"""The Profiler's flamegraphs, drawn in the browser on a canvas by ``_flamegraph.js`` (an
``st.components.v2`` component, in the page itself, not in an iframe).

A plotly icicle measured every frame's label in the page (plotly.js's ``Drawing.bBox``,
a layout each: 0.14 s for the loop's 171 frames) and waited for plotly.js (a 4.7 MB
script) before it drew: the Profiler reached its first chart 0.57-0.71 s after a
one-chart page's floor. The canvas measures labels with ``measureText`` and draws every
frame in a few milliseconds, before the floor's chart (docs/benchmarks.md, fourteenth
round); it also cuts a long label with "…" where the icicle hid it, and scrolls past
:data:`~debugkit.charts.profile.VISIBLE_LEVELS` levels where the icicle drew 28 (issue
35 item 9).
"""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

#: The component's name (``st.components.v2`` components share one namespace per app).
NAME = "debugkit.flamegraph"

# In the component's shadow root; colours from the page's theme (Streamlit's --st-* variables).
CSS = """
.dk-flame{position:relative;width:100%;font-family:var(--st-font, sans-serif)}
.dk-flame-scroll{overflow-y:auto;overflow-x:hidden;overscroll-behavior:contain}
.dk-flame canvas{display:block;position:sticky;top:0;outline:none}
.dk-flame canvas:focus-visible{box-shadow:0 0 0 2px var(--st-primary-color, #ff4b4b)}
.dk-flame-tip{position:absolute;z-index:10;pointer-events:none;max-width:min(28rem,90%);
 padding:.4rem .6rem;border-radius:.4rem;font-size:.8rem;line-height:1.35;overflow-wrap:anywhere;
 background:var(--st-background-color, #fff);color:var(--st-text-color, #1f1f1f);
 border:1px solid var(--st-border-color, rgba(49,51,63,.2));box-shadow:0 2px 8px rgba(0,0,0,.18)}
.dk-flame-tip b{font-weight:600}
"""


@functools.lru_cache(maxsize=1)
def _js() -> str:
    return Path(__file__).with_name("_flamegraph.js").read_text(encoding="utf-8")


def flamegraph(data: dict, table, *, key: str):
    """Draw ``data`` (:func:`debugkit.charts.profile.flamegraph_data` or
    ``diff_flamegraph_data``) and, under it, a *CSV* button with ``table`` (one row per
    frame; made only when clicked), as :func:`pages._ui.chart` does for a plotly chart."""
    # registered in every script run: the registry is the runtime's (a new one per
    # AppTest), and registering the same definition again changes nothing
    mount = st.components.v2.component(NAME, css=CSS, js=_js())
    mount(data=data, key=key, height="content")
    st.download_button("CSV", data=lambda: table().to_csv(index=False), file_name=f"{key}.csv",
                       mime="text/csv", key=f"csv_{key}", on_click="ignore", type="tertiary",
                       icon=":material/download:", help="The data of this chart, as CSV")
