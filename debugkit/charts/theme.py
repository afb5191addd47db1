"""Charts in the dark theme: the builders draw for a light page; :func:`for_dark_theme`
turns the colours that only work on white (white gaps and frames, dark grey rules and
labels, near-white blocks) into their counterparts on a dark page. The figure's data is
left as it is."""

from __future__ import annotations

#: The dark theme's page background (Streamlit's dark theme as drawn in Chromium).
DARK_BACKGROUND = "#171614"

#: Light-page colours and what they become on a dark page (keys in lower case).
_DARK = {
    "white": DARK_BACKGROUND, "#fff": DARK_BACKGROUND, "#ffffff": DARK_BACKGROUND,
    "#eee": "#3a3a3a", "#eeeeee": "#3a3a3a",
    "#f2f2f2": "#2f2f2f", "#e9e9ec": "#3a3a3e", "#dddddd": "#4a4a4a", "#ddd": "#4a4a4a",
    "#999": "#8a8a8a", "#8a5a00": "#e0a040",
    "rgba(255,255,255,0.85)": "rgba(23,22,20,0.85)", "#555": "#b0b0b0", "#444": "#bbbbbb", "#333": "#cccccc", "#222": "#dddddd",
}


def dark_color(color: str) -> str:
    """A colour drawn for a light page as it is drawn on a dark one (:data:`_DARK`; other
    colours as they are): the flamegraph's near-white blocks turn dark grey."""
    return _DARK.get(color.strip().lower(), color)


def _swap(color):
    if isinstance(color, str):
        return dark_color(color)
    if isinstance(color, (list, tuple)):
        return [_swap(c) for c in color]
    if hasattr(color, "tolist"):  # a numpy array of colours
        return [_swap(c) for c in color.tolist()]
    return color


def for_dark_theme(fig):
    """``fig`` made ready for a dark page, in place (a plotly Figure; returned too): the
    plot area is transparent where the builder made it white, and the colours of rules,
    labels, gaps, frame outlines and grey blocks drawn for a white page (white,
    near-white, dark grey) are swapped for their dark-page counterparts (:data:`_DARK`).
    Data, data colours and colour scales are kept. In place, because a copy would
    validate a large figure (a flamegraph) again on every draw; pages pass the figure
    they draw once."""
    lay = fig.layout
    if str(lay.plot_bgcolor or "").lower() in ("white", "#fff", "#ffffff"):
        lay.plot_bgcolor = "rgba(0,0,0,0)"
    for sh in lay.shapes or ():
        if sh.line is not None and sh.line.color is not None:
            sh.line.color = _swap(sh.line.color)
    for a in lay.annotations or ():
        if a.font is not None and a.font.color is not None:
            a.font.color = _swap(a.font.color)
        if a.bgcolor is not None:
            a.bgcolor = _swap(a.bgcolor)
    for t in fig.data:
        marker = getattr(t, "marker", None)
        if marker is not None:
            if getattr(marker, "line", None) is not None and isinstance(marker.line.color, str):
                marker.line.color = _swap(marker.line.color)
            if getattr(marker, "colors", None) is not None:
                marker.colors = _swap(marker.colors)
            if isinstance(getattr(marker, "color", None), str):
                marker.color = _swap(marker.color)
        line = getattr(t, "line", None)
        if line is not None and isinstance(getattr(line, "color", None), str):
            line.color = _swap(line.color)
        root = getattr(t, "root", None)
        if root is not None and root.color is not None:
            root.color = _swap(root.color)
    return fig
