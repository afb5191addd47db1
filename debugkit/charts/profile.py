"""Figures of profiles: the flamegraph's and its differential version's data (drawn by
``pages/_flamegraph.js``), the step breakdown, and torch.profiler's timeline and per-step bars.

Every builder takes the DataFrame an analysis in :mod:`debugkit.analysis.profile` or
:mod:`debugkit.analysis.trace` returned and draws it; nothing is computed here beyond
colours and labels.
"""

from __future__ import annotations

import numpy as np

# Colour per package (flamegraph), picked so the common ones stay apart.
PACKAGE_COLORS = {
    "your code": "#4C78A8", "torch": "#F58518", "python": "#BAB0AC", "importlib": "#D8D3CE",
    "debugkit": "#B279A2", "numpy": "#54A24B", "sklearn": "#72B7B2", "pandas": "#9D755D",
    "": "#E6E6E6",
}
_EXTRA = ["#EECA3B", "#FF9DA6", "#88D27A", "#83BCB6", "#FABFD2", "#D67195", "#A0CBE8", "#FFBE7D"]
HIGHLIGHT = "#D6006F"   # a frame that matches the search
DIMMED = "#E9E9EC"      # frames that do not, while a search is active
FOLDED = "#F2F2F2"
ROOT_COLOR = "#DDDDDD"  # the root frame (all samples) when nothing is searched
PHASE_COLORS = {"data": "#E45756", "forward": "#4C78A8", "backward": "#72B7B2",
                "optimizer": "#F58518", "other": "#BAB0AC"}
PHASE_LABELS = {"data": "data loading", "forward": "forward", "backward": "backward",
                "optimizer": "optimizer", "other": "other (in the loop)"}


def package_color(pkg: str) -> str:
    if pkg in PACKAGE_COLORS:
        return PACKAGE_COLORS[pkg]
    return _EXTRA[sum(map(ord, pkg)) % len(_EXTRA)]


def _short(file: str, roots=()) -> str:
    """No folders of the recording machine: relative to its recorded ``roots``
    (:func:`debugkit.analysis.recorded_paths.recorded_roots`), else as
    :func:`debugkit.analysis.profile.display_path` shortens it."""
    from ..analysis.profile import display_path as shorten
    from ..analysis.recorded_paths import display_path

    return display_path(file, roots, unknown=shorten)


def _hover_text(tree, roots=()) -> list[str]:
    """``file:line`` (or ``file``) of every node."""
    import pandas as pd

    return [_short(f, roots) + ("" if pd.isna(ln) else f":{int(ln)}")
            for f, ln in zip(tree["file"].tolist(), tree["line"].astype(object).tolist())]


#: Levels the flamegraph shows before it scrolls (pages/_flamegraph.js scrolls the deeper ones).
VISIBLE_LEVELS = 32


def _tip_lines(tree, roots, unit: str) -> list[str]:
    """Each frame's hover text below its name: ``file:line``, its samples and share of all,
    its self samples and its package, one line each."""
    where = _hover_text(tree, roots)
    total = float(tree["samples"].iloc[0]) if len(tree) else 0.0
    pct = (100 * tree["samples"].to_numpy() / total) if total else np.zeros(len(tree))
    return [f"{w}\n{int(n):,} {unit} ({p:.2f} % of all)\nself: {int(s):,}\n{pkg}".rstrip()
            for w, n, p, s, pkg in zip(where, tree["samples"].tolist(), pct.tolist(),
                                       tree["self_samples"].tolist(), tree["package"].tolist())]


def _positions(tree) -> tuple[list[int], list[int]]:
    """The parent of every frame as a row position (-1: the root), and the positions."""
    pos = {int(n): i for i, n in enumerate(tree["node_id"].tolist())}
    return [pos.get(int(p), -1) for p in tree["parent_id"].tolist()], list(pos.values())


def _summary(tree, what: str) -> str:
    """A text alternative of the figure (the canvas's accessible name): its frames and
    the widest ones under the root."""
    if not len(tree):
        return f"{what}: no frames"
    top = tree[tree["depth"] == 1].sort_values("samples", ascending=False).head(3)
    widest = ", ".join(f"{r.name} {100 * float(r.fraction):.0f} %" for r in top.itertuples())
    return f"{what} of {len(tree):,} frames" + (f"; widest under the root: {widest}" if widest else "")


def flamegraph_data(tree, *, highlight=None, root_id: int | None = None, flame: bool = False,
                    unit: str = "samples", roots=(), dark: bool = False) -> dict:
    """What the Profiler's flamegraph (``pages/_flamegraph.js``: an icicle, or a flame
    graph with ``flame=True``, drawn on a canvas) draws of a flame tree from
    :func:`~debugkit.analysis.profile.compute_flame_tree`.

    Returns ``name``, ``parent`` (the parent's position, -1 for the root), ``samples``
    (widths), ``color``, ``tip`` (hover lines below the name), ``root`` (the position of
    the frame it opens zoomed into, -1: the root), ``flame``, ``levels`` (visible before
    it scrolls) and ``label`` (its text alternative).

    highlight : array of bool, optional
        Frames that match a search: drawn in :data:`HIGHLIGHT`, the others greyed out.
    root_id : int, optional
        The node it opens zoomed into (clicking a frame in the browser zooms too).
    roots : tuple of str
        The recording machine's folders (the run's recorded roots): a frame's file is shown
        relative to them.
    dark : bool
        For a dark page: near-white blocks (the root, folded and greyed-out frames) dark.
    """
    folded = tree["folded"].to_numpy() > 0
    if highlight is not None and np.asarray(highlight).any():
        hl = np.asarray(highlight, dtype=bool)
        colors = np.where(hl, HIGHLIGHT, DIMMED).tolist()
    else:
        colors = [package_color(p) for p in tree["package"].tolist()]
        if len(colors):
            colors[0] = ROOT_COLOR
    colors = [FOLDED if f else c for f, c in zip(folded, colors)]
    parent, pos = _positions(tree)
    at = dict(zip(tree["node_id"].astype(int).tolist(), pos))
    return {"kind": "flamegraph", "name": tree["name"].tolist(), "parent": parent,
            "samples": [int(v) for v in tree["samples"].tolist()],
            "color": _for_page(colors, dark), "tip": _tip_lines(tree, roots, unit),
            "root": at.get(int(root_id), -1) if root_id is not None else -1, "flame": bool(flame),
            "levels": VISIBLE_LEVELS, "label": _summary(tree, "Flame graph" if flame else "Icicle chart")}


def _for_page(colors: list[str], dark: bool) -> list[str]:
    if not dark:
        return colors
    from .theme import dark_color

    return [dark_color(c) for c in colors]


def diff_colors(delta_points, lim: float) -> list[str]:
    """Red for a larger share, blue for a smaller one (plotly's ``RdBu_r`` scale from
    ``-lim`` to ``+lim`` points), as ``#rrggbb``."""
    from plotly.colors import sample_colorscale, unlabel_rgb

    at = np.clip((np.nan_to_num(np.asarray(delta_points, dtype=float)) + lim) / (2 * lim), 0.0, 1.0)
    return ["#" + "".join(f"{int(round(v)):02x}" for v in unlabel_rgb(c))
            for c in sample_colorscale("RdBu_r", at.tolist())]


def diff_flamegraph_data(tree, *, flame: bool = False, roots=()) -> dict:
    """A differential flame graph for ``pages/_flamegraph.js``: the new profile's tree
    (sizes), each frame coloured by how its share changed from the base profile (red:
    larger share now, i.e. slower; blue: smaller; the scale's ends are ``lim`` points).
    ``tree`` comes from :func:`~debugkit.analysis.profile.compute_diff_tree`; ``roots`` as
    for :func:`flamegraph_data`."""
    delta = 100 * tree["delta"].to_numpy(dtype=float)
    lim = max(float(np.nanmax(np.abs(delta[1:]))) if len(delta) > 1 else 1.0, 0.5)
    where = _hover_text(tree, roots)
    tips = [f"{w}\nbefore: {100 * b:.2f} %\nafter: {100 * a:.2f} %\nchange: {d:+.2f} points"
            for w, b, a, d in zip(where, tree["base_fraction"].tolist(), tree["fraction"].tolist(), delta.tolist())]
    parent, _ = _positions(tree)
    return {"kind": "diff-flamegraph", "name": tree["name"].tolist(), "parent": parent,
            "samples": [int(v) for v in tree["samples"].tolist()], "color": diff_colors(delta, lim),
            "tip": tips, "root": -1, "flame": bool(flame), "levels": VISIBLE_LEVELS, "lim": lim,
            "label": _summary(tree, "Differential flame graph")}


def flamegraph_table(tree, roots=(), *, diff: bool = False):
    """The flamegraph's data as a table (its CSV download): one row per frame."""
    import pandas as pd

    parent, _ = _positions(tree)
    out = pd.DataFrame({"frame": tree["name"].tolist(), "file": _hover_text(tree, roots),
                        "depth": tree["depth"].astype(int).tolist(), "parent_row": parent,
                        "samples": tree["samples"].astype(int).tolist()})
    if diff:
        out["before_percent"] = (100 * tree["base_fraction"].to_numpy(dtype=float)).round(4)
        out["after_percent"] = (100 * tree["fraction"].to_numpy(dtype=float)).round(4)
        out["change_points"] = (100 * tree["delta"].to_numpy(dtype=float)).round(4)
    else:
        out["self_samples"] = tree["self_samples"].astype(int).tolist()
        out["percent_of_all"] = (100 * tree["fraction"].to_numpy(dtype=float)).round(4)
        out["package"] = tree["package"].tolist()
        out["folded"] = tree["folded"].astype(int).tolist()
    return out


def build_step_breakdown_figure(breakdown, *, title: str | None = None):
    """One horizontal bar split into data loading / forward / backward / optimizer /
    other, from :func:`~debugkit.analysis.profile.compute_step_breakdown`."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in breakdown.itertuples():
        pct = 100 * float(r.fraction)
        fig.add_trace(go.Bar(
            y=["training loop"], x=[pct], orientation="h", name=PHASE_LABELS.get(r.phase, r.phase),
            marker={"color": PHASE_COLORS.get(r.phase, "#999999")},
            text=[f"{PHASE_LABELS.get(r.phase, r.phase)} {pct:.0f} %" if pct >= 6 else ""],
            textposition="inside", insidetextanchor="middle",
            customdata=[[int(r.samples), float(r.seconds)]], meta={"columns": ["samples", "seconds"]},
            hovertemplate=(f"<b>{PHASE_LABELS.get(r.phase, r.phase)}</b><br>%{{x:.1f}} % of the loop"
                           "<br>%{customdata[0]} samples, %{customdata[1]:.2f} s<extra></extra>")))
    fig.update_layout(barmode="stack", height=130, title=title, showlegend=True,
                      legend={"orientation": "h", "y": -0.45, "x": 0, "traceorder": "normal"},
                      xaxis={"range": [0, 100], "ticksuffix": " %", "showgrid": False},
                      yaxis={"showticklabels": False},
                      margin={"l": 4, "r": 4, "t": 30 if title else 4, "b": 4})
    return fig


def build_trace_steps_figure(steps, *, title: str | None = None):
    """Stacked bars per ``ProfilerStep``: data / forward / backward / optimizer / other
    in ms, from :func:`~debugkit.analysis.trace.compute_trace_steps`."""
    import plotly.graph_objects as go

    fig = go.Figure()
    x = [f"step {s}" for s in steps["step"].tolist()]
    for phase in ("data", "forward", "backward", "optimizer", "other"):
        col = f"{phase}_ms"
        fig.add_trace(go.Bar(x=x, y=steps[col].tolist(), name=PHASE_LABELS[phase],
                             marker={"color": PHASE_COLORS[phase]},
                             hovertemplate=f"{PHASE_LABELS[phase]}: %{{y:.2f}} ms<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="stack", height=300, title=title, yaxis_title="ms",
                      legend={"orientation": "h", "y": -0.2, "traceorder": "normal"},
                      margin={"l": 50, "r": 10, "t": 30 if title else 10, "b": 40})
    return fig


def build_annotated_steps_figure(steps, *, title: str | None = None):
    """Stacked bars per ``ProfilerStep`` of the user's own annotated phases, from
    :func:`~debugkit.analysis.trace.compute_annotated_steps` (long form: step, phase, ms)."""
    import plotly.colors
    import plotly.graph_objects as go

    fig = go.Figure()
    order = list(dict.fromkeys(p for p in steps["phase"].tolist() if p != "other")) + ["other"]
    palette = plotly.colors.qualitative.T10
    x_of = {s: f"step {s}" for s in steps["step"].tolist()}
    for i, phase in enumerate(order):
        g = steps[steps["phase"] == phase]
        color = PHASE_COLORS.get(phase) or palette[i % len(palette)]
        fig.add_trace(go.Bar(x=[x_of[s] for s in g["step"].tolist()], y=g["ms"].tolist(), name=phase,
                             marker={"color": PHASE_COLORS["other"] if phase == "other" else color},
                             hovertemplate=f"{phase}: %{{y:.2f}} ms<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="stack", height=320, title=title, yaxis_title="ms",
                      legend={"orientation": "h", "y": -0.2, "traceorder": "normal"},
                      margin={"l": 50, "r": 10, "t": 30 if title else 10, "b": 40})
    return fig


_CAT_COLORS = {"cpu_op": "#4C78A8", "user_annotation": "#B279A2", "python_function": "#BAB0AC",
               "cuda_runtime": "#F58518", "cuda_driver": "#FF9DA6", "kernel": "#54A24B",
               "gpu_memcpy": "#E45756", "gpu_memset": "#9D755D", "gpu_user_annotation": "#D67195"}
_DEPTH_WIDTH = {0: 0.8, 1: 0.58, 2: 0.38}


def build_trace_timeline_figure(timeline, *, title: str | None = None):
    """A per-thread / per-stream timeline (Gantt) of trace events from
    :func:`~debugkit.analysis.trace.compute_trace_timeline`: one row per lane, nested
    events drawn thinner inside their parents, coloured by category."""
    import plotly.graph_objects as go

    fig = go.Figure()
    lanes = list(dict.fromkeys(timeline.sort_values(["lane_kind", "lane"])["lane"].tolist()))
    seen = set()
    for (depth, cat), g in timeline.groupby(["depth", "cat"], sort=True):
        fig.add_trace(go.Bar(
            y=g["lane"].tolist(), x=g["dur_ms"].tolist(), base=g["start_ms"].tolist(), orientation="h",
            width=[_DEPTH_WIDTH.get(int(depth), 0.3)] * len(g), name=cat or "(none)",
            legendgroup=cat, showlegend=cat not in seen,
            marker={"color": _CAT_COLORS.get(cat, "#999999"), "line": {"width": 0}},
            customdata=np.stack([g["name"].to_numpy(), g["input_shapes"].to_numpy()], axis=1),
            meta={"columns": ["event", "input_shapes"]},
            hovertemplate=("<b>%{customdata[0]}</b><br>%{base:.3f} ms + %{x:.3f} ms"
                           "<br>%{customdata[1]}<extra>" + (cat or "") + "</extra>")))
        seen.add(cat)
    fig.update_layout(barmode="overlay", title=title, height=max(220, 90 + 60 * len(lanes)),
                      xaxis_title="ms from the start of the profiled window",
                      yaxis={"categoryorder": "array", "categoryarray": lanes[::-1]},
                      legend={"orientation": "h", "y": -0.25},
                      margin={"l": 10, "r": 10, "t": 30 if title else 10, "b": 40})
    return fig
