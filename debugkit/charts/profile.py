"""Figures of profiles: the flamegraph (a plotly icicle), its differential version, the
step breakdown, and torch.profiler's timeline and per-step bars.

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


MAX_LEVELS = 28  # levels shown at once; clicking a frame shows the levels below it


def build_flamegraph_figure(tree, *, highlight=None, root_id: int | None = None,
                            flame: bool = False, title: str | None = None, unit: str = "samples",
                            height: int | None = None, max_levels: int = MAX_LEVELS, roots=()):
    """An icicle (root on top) or flame graph (``flame=True``: root at the bottom) of a
    flame tree from :func:`~debugkit.analysis.profile.compute_flame_tree`.

    Parameters
    ----------
    tree : DataFrame
        ``node_id, parent_id, name, file, line, samples, self_samples, fraction,
        folded, package``.
    highlight : array of bool, optional
        Nodes to highlight (a search): they are drawn in :data:`HIGHLIGHT`, the others
        greyed out.
    root_id : int, optional
        Start zoomed into this node (clicking a frame in the browser zooms too; click
        the top bar to zoom out).
    max_levels : int
        Levels drawn at once below the current root (deeper ones appear on zooming in).
    unit : str
        What ``samples`` counts, for the hover text.
    roots : tuple of str
        The recording machine's folders (the run's recorded roots): a frame's file is shown
        relative to them.
    """
    import plotly.graph_objects as go

    ids = tree["node_id"].astype(str).tolist()
    parents = ["" if p < 0 else str(p) for p in tree["parent_id"].tolist()]
    folded = tree["folded"].to_numpy() > 0
    if highlight is not None and np.asarray(highlight).any():
        hl = np.asarray(highlight, dtype=bool)
        colors = np.where(hl, HIGHLIGHT, DIMMED).tolist()
        colors[0] = DIMMED if not hl[0] else HIGHLIGHT
    else:
        colors = [package_color(p) for p in tree["package"].tolist()]
        colors[0] = "#DDDDDD"
    colors = [FOLDED if f else c for f, c in zip(folded, colors)]
    total = float(tree["samples"].iloc[0]) if len(tree) else 0.0
    custom = np.stack([
        np.array(_hover_text(tree, roots), dtype=object),
        tree["samples"].to_numpy().astype(object),
        (100 * tree["fraction"].to_numpy()).round(2).astype(object),
        tree["self_samples"].to_numpy().astype(object),
        tree["package"].to_numpy().astype(object),
    ], axis=1) if len(tree) else None
    fig = go.Figure(go.Icicle(
        ids=ids, parents=parents, labels=tree["name"].tolist(), values=tree["samples"].tolist(),
        branchvalues="total", sort=True, customdata=custom,
        meta={"columns": ["frame", "samples", "percent_of_all", "self_samples", "package"]},
        marker={"colors": colors, "line": {"width": 0.5, "color": "#FFFFFF"}},
        hovertemplate=("<b>%{label}</b><br>%{customdata[0]}<br>%{customdata[1]} " + unit
                       + " (%{customdata[2]} % of all)<br>self: %{customdata[3]}<br>"
                       "%{customdata[4]}<extra></extra>"),
        tiling={"orientation": "v", "flip": "y", "pad": 0} if flame else {"orientation": "v", "pad": 0},
        pathbar={"visible": True, "side": "bottom" if flame else "top", "thickness": 18},
        textinfo="label", insidetextfont={"size": 11}, level=str(root_id) if root_id is not None else None,
        root={"color": "#DDDDDD"}, maxdepth=max_levels,
    ))
    depth = min(int(tree["depth"].max()) + 1 if len(tree) else 1, max_levels)
    fig.update_layout(title=title, height=height or int(min(1600, max(320, 40 + 22 * depth))),
                      margin={"l": 4, "r": 4, "t": 36 if title else 4, "b": 4},
                      meta={"total": total, "kind": "flamegraph"})
    return fig


def build_diff_flamegraph_figure(tree, *, flame: bool = False, title: str | None = None,
                                 height: int | None = None, roots=()):
    """A differential flame graph: the new profile's tree (sizes), each frame coloured by
    how its share changed from the base profile (red: larger share now, i.e. slower;
    blue: smaller). ``tree`` comes from :func:`~debugkit.analysis.profile.compute_diff_tree`;
    ``roots`` as for :func:`build_flamegraph_figure`."""
    import plotly.graph_objects as go

    delta = 100 * tree["delta"].to_numpy()
    lim = float(np.nanmax(np.abs(delta[1:]))) if len(delta) > 1 else 1.0
    lim = max(lim, 0.5)
    custom = np.stack([
        np.array(_hover_text(tree, roots), dtype=object),
        (100 * tree["base_fraction"].to_numpy()).round(2).astype(object),
        (100 * tree["fraction"].to_numpy()).round(2).astype(object),
        delta.round(2).astype(object),
    ], axis=1) if len(tree) else None
    fig = go.Figure(go.Icicle(
        ids=tree["node_id"].astype(str).tolist(),
        parents=["" if p < 0 else str(p) for p in tree["parent_id"].tolist()],
        labels=tree["name"].tolist(), values=tree["samples"].tolist(), branchvalues="total",
        customdata=custom, meta={"columns": ["frame", "before_percent", "after_percent", "change_points"]},
        marker={"colors": delta.tolist(), "colorscale": "RdBu_r", "cmid": 0, "cmin": -lim, "cmax": lim,
                "line": {"width": 0.5, "color": "#FFFFFF"}, "showscale": True,
                "colorbar": {"title": {"text": "share Δ<br>(points)"}, "thickness": 12}},
        hovertemplate=("<b>%{label}</b><br>%{customdata[0]}<br>before: %{customdata[1]} %"
                       "<br>after: %{customdata[2]} %<br>change: %{customdata[3]} points<extra></extra>"),
        tiling={"orientation": "v", "flip": "y", "pad": 0} if flame else {"orientation": "v", "pad": 0},
        pathbar={"visible": True, "side": "bottom" if flame else "top", "thickness": 18},
        textinfo="label", insidetextfont={"size": 11}, sort=True, maxdepth=MAX_LEVELS,
    ))
    depth = min(int(tree["depth"].max()) + 1 if len(tree) else 1, MAX_LEVELS)
    fig.update_layout(title=title, height=height or int(min(1600, max(320, 40 + 22 * depth))),
                      margin={"l": 4, "r": 4, "t": 36 if title else 4, "b": 4},
                      meta={"kind": "diff-flamegraph"})
    return fig


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
