"""The trace type of a chart's lines: SVG for short ones, WebGL for long ones."""

from __future__ import annotations

#: Points drawn (all the lines together, after downsampling) up to which the lines are SVG
#: (``go.Scatter``); past it, WebGL (``go.Scattergl``). A WebGL plot costs the browser a GL
#: context and its shaders before the first line: 0.2-0.3 s of a page's first chart in
#: Chromium without a GPU (software GL) against 0.01-0.02 s for the same 60-point line in
#: SVG (issue 35 item 9); SVG paths stay cheap to draw up to tens of thousands of points.
SVG_MAX_POINTS = 20_000


def line_trace(points: int):
    """``go.Scatter`` (SVG) for lines of ``points`` points drawn in all, ``go.Scattergl``
    (WebGL) past :data:`SVG_MAX_POINTS` (Memory's timeline and the scalar charts)."""
    import plotly.graph_objects as go

    return go.Scatter if points <= SVG_MAX_POINTS else go.Scattergl
