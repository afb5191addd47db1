"""Figures of gradient norms: the layer x step heatmap and the per-layer line chart.

Both take what :mod:`debugkit.analysis.gradients` computed and only draw it. Their
payload is bounded whatever the run's length: the heatmap has at most the bins it is
given, and each line carries at most about ``max_points`` points (extremes kept) plus
its NaN/Inf markers.
"""

from __future__ import annotations

import numpy as np

from ..analysis.downsample import downsample_minmax
from ..analysis.gradients.clipping import ClipWhatIf
from ..analysis.gradients.heatmap import HeatmapBins
from ..analysis.gradients.matrix import TOTAL, GradMatrix

NONFINITE_COLOR = "#e3008c"   # NaN/Inf cells and markers: a colour the viridis scale never uses
ZERO_COLOR = "#9e9e9e"        # exactly-zero gradients
CLIP_COLOR = "rgba(255, 145, 0, 0.16)"
FAILURE_COLOR = "#d62728"
SELECTED_COLOR = "#1f1f1f"
TOTAL_COLOR = "#111111"


def _legend_swatch(fig, name, color, symbol="square"):
    import plotly.graph_objects as go

    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, showlegend=True,
                             marker={"symbol": symbol, "color": color, "size": 11},
                             hoverinfo="skip"))


def build_grad_heatmap_figure(bins: HeatmapBins, *, groups=(), selected_step=None,
                              failure_steps=(), title=None):
    """Heatmap of log10 gradient norm, layer (rows, model order) x step bin (columns).

    Parameters
    ----------
    bins : HeatmapBins
        From :func:`debugkit.analysis.gradients.heatmap.compute_heatmap_bins`; each cell is the
        bin's largest finite norm.
    groups : sequence of (prefix, first row, n rows)
        Module groups (:func:`~debugkit.analysis.gradients.layers.group_rows`): drawn as
        separators with the module's name.
    selected_step : int, optional
        Marked with a vertical line.
    failure_steps : sequence of int
        Steps with a failure capture (dotted red lines).

    NaN/Inf cells are drawn in :data:`NONFINITE_COLOR`, exactly-zero cells in
    :data:`ZERO_COLOR`, both as overlays above the colour scale.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    names = list(bins.names)
    groups = list(groups or ())
    # Name the groups only when they hold more than weight+bias (else the row labels say it).
    label_groups = bool(groups) and len(names) > 2 * len(groups) + 1
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(bins.max_norm > 0, np.log10(bins.max_norm), np.nan).astype(np.float32)
    # Each cell's last step, for the hover: whole numbers, sent in the smallest integer type
    # that holds them (uint8/16/32: a quarter or half of float32's bytes in the page).
    end = bins.end_step
    custom = np.broadcast_to(end[None, :], z.shape).astype(_uint_for(end))
    edges = _whole(bins.edges)
    fig.add_trace(go.Heatmap(
        z=z, x=edges, y=names, customdata=custom, colorscale="Viridis", name="log10 norm",
        colorbar={"title": {"text": "log10<br>norm"}, "thickness": 12,
                  "x": 1.0 + (0.16 if label_groups else 0.01), "xanchor": "left"},
        hovertemplate="%{y}<br>steps %{x}–%{customdata:.0f}<br>max norm 10^%{z:.2f}<extra></extra>",
        zsmooth=False))
    # The overlays are sent only over the columns that hold a marked cell (x: those columns'
    # edges), and the NaN/Inf overlay's z is the count its hover reads: an overlay that was
    # as large as the heatmap (two arrays) is now one array over a few columns.
    bad = bins.nonfinite
    if bad.any():
        cols = _marked_columns(bad)
        counts = (bins.n_nan + bins.n_inf)[:, cols]
        fig.add_trace(go.Heatmap(
            z=np.where(bad[:, cols], counts, np.nan).astype(np.float32), x=edges[cols.start:cols.stop + 1],
            y=names, colorscale=[[0, NONFINITE_COLOR], [1, NONFINITE_COLOR]],
            showscale=False, name="NaN/Inf", zmin=0, zmax=1,
            hovertemplate="%{y}<br>from step %{x}: %{z:.0f} NaN/Inf value(s)<extra></extra>"))
        _legend_swatch(fig, "NaN/Inf", NONFINITE_COLOR)
    zero = bins.all_zero & ~bad
    if zero.any():
        cols = _marked_columns(zero)
        fig.add_trace(go.Heatmap(
            z=np.where(zero[:, cols], 1.0, np.nan).astype(np.float32), x=edges[cols.start:cols.stop + 1],
            y=names, colorscale=[[0, ZERO_COLOR], [1, ZERO_COLOR]], showscale=False, name="exactly 0",
            zmin=0, zmax=1, hovertemplate="%{y}<br>from step %{x}: gradient exactly 0<extra></extra>"))
        _legend_swatch(fig, "exactly 0", ZERO_COLOR)
    shapes, annotations = [], []
    for prefix, first, count in groups:
        if first > 0:
            shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
                           "y0": first - 0.5, "y1": first - 0.5,
                           "line": {"color": "white", "width": 2}})
        if label_groups:
            annotations.append({"xref": "paper", "x": 1.0, "xanchor": "left", "yref": "y",
                                "y": first + (count - 1) / 2, "text": prefix or "(root)",
                                "showarrow": False, "font": {"size": 10, "color": "#555"}})
    if TOTAL in names and len(names) > 1:
        t = names.index(TOTAL)
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
                       "y0": t - 0.5, "y1": t - 0.5, "line": {"color": "white", "width": 4}})
    for s in failure_steps:
        shapes.append({"type": "line", "x0": s, "x1": s, "xref": "x", "yref": "paper", "y0": 0,
                       "y1": 1, "line": {"color": FAILURE_COLOR, "dash": "dot", "width": 1}})
    if selected_step is not None:
        shapes.append({"type": "line", "x0": selected_step, "x1": selected_step, "xref": "x",
                       "yref": "paper", "y0": 0, "y1": 1,
                       "line": {"color": SELECTED_COLOR, "width": 1.5}})
    height = int(min(1400, max(260, 18 * len(names) + 110)))
    fig.update_layout(
        title=title, height=height, shapes=shapes, annotations=annotations,
        margin={"l": 10, "r": 150 if label_groups else 20, "t": 40 if title else 10, "b": 40},
        xaxis={"title": "step", "range": [float(bins.edges[0]), float(bins.edges[-1])] if len(bins.edges) else None},
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        uirevision="grad-heatmap", plot_bgcolor="white")
    return fig



def _uint_for(values: np.ndarray):
    """The smallest unsigned integer type holding every value of ``values`` (whole, >= 0)."""
    top = int(values.max()) if len(values) else 0
    return next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if top <= np.iinfo(t).max)


def _whole(values: np.ndarray) -> np.ndarray:
    """``values`` as the smallest unsigned integer type when all are whole and >= 0 (the
    bins' edges are steps), else unchanged."""
    v = np.asarray(values)
    if len(v) and np.all(np.isfinite(v)) and v.min() >= 0 and np.all(v == np.round(v)):
        return v.astype(_uint_for(v))
    return v


def _marked_columns(mask: np.ndarray) -> slice:
    """The columns from the first to the last holding a True cell of ``mask`` (not empty)."""
    cols = np.flatnonzero(mask.any(axis=0))
    return slice(int(cols[0]), int(cols[-1]) + 1)

def _nonfinite_subset(idx: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of non-finite points to draw: all of them up to ``max_points``, else the
    first and last of every consecutive run plus an even spread."""
    if len(idx) <= max_points:
        return idx
    brk = np.flatnonzero(np.diff(idx) != 1)
    ends = np.unique(np.concatenate([idx[:1], idx[brk], idx[brk + 1], idx[-1:]]))
    if len(ends) >= max_points:
        ends = ends[np.linspace(0, len(ends) - 1, max_points).astype(np.int64)]
    spread = idx[np.linspace(0, len(idx) - 1, max(0, max_points - len(ends))).astype(np.int64)]
    return np.unique(np.concatenate([ends, spread]))


def build_grad_lines_figure(m: GradMatrix, layers, *, max_points: int = 5000,
                            clip: ClipWhatIf | None = None, selected_step=None,
                            failure_steps=(), title=None, others: dict | None = None):
    """Gradient norms over steps on a log axis: one line per layer, plus the total.

    ``others`` (``{run id: GradMatrix}``) draws the same layers of other runs over them,
    dashed, named ``"<layer> · <run>"`` (lines only: a click selects a step of this run).

    Every line is drawn with markers whose ``customdata`` is the step (so a click
    selects it) after :func:`debugkit.analysis.downsample.downsample_minmax` (extremes
    kept, at most about ``max_points`` per line). Every NaN/Inf value is a marker above
    the lines; exactly-zero values are markers below them. ``clip`` shades the steps
    ``clip_grad_norm_`` would have clipped and draws its ``max_norm``.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    names = [n for n in layers if n in m.names and n != TOTAL] + ([TOTAL] if TOTAL in m.names else [])
    finite_pos = m.present & np.isfinite(m.values) & (m.values > 0)
    rows = [m.names.index(n) for n in names]
    if rows and finite_pos[rows].any():
        vals = m.values[rows][finite_pos[rows]]
        top, bottom = float(vals.max()) * 3.0, float(vals.min()) / 3.0
    else:
        top, bottom = 10.0, 0.1
    for n in names:
        r = m.names.index(n)
        p = m.present[r]
        x, y = m.steps[p], m.values[r][p]
        good = np.isfinite(y) & (y > 0)
        xg, yg = x[good], y[good]
        keep = downsample_minmax(xg, yg, max_points) if len(xg) else np.zeros(0, np.int64)
        is_total = n == TOTAL
        label = "total" if is_total else n
        fig.add_trace(go.Scattergl(
            x=xg[keep], y=yg[keep].astype(np.float32), customdata=xg[keep], mode="lines+markers",
            name=label, legendgroup=label,
            line={"width": 2.5 if is_total else 1.4, **({"color": TOTAL_COLOR} if is_total else {})},
            marker={"size": 4},
            hovertemplate="step %{customdata}<br>%{y:.4g}<extra>" + label + "</extra>"))
        bad = np.flatnonzero(~np.isfinite(y))
        if len(bad):
            bad = _nonfinite_subset(bad, max_points)
            fig.add_trace(go.Scattergl(
                x=x[bad], y=np.full(len(bad), top, np.float32), customdata=x[bad], mode="markers",
                name=f"{label}: NaN/Inf", legendgroup=label, showlegend=False,
                text=[str(v) for v in y[bad]],
                marker={"symbol": "x", "color": NONFINITE_COLOR, "size": 9},
                hovertemplate="step %{customdata}: %{text}<extra>" + label + "</extra>"))
        zero = np.flatnonzero(y == 0)
        if len(zero):
            zero = _nonfinite_subset(zero, max_points)
            fig.add_trace(go.Scattergl(
                x=x[zero], y=np.full(len(zero), bottom, np.float32), customdata=x[zero],
                mode="markers", name=f"{label}: 0", legendgroup=label, showlegend=False,
                marker={"symbol": "triangle-down", "color": ZERO_COLOR, "size": 7},
                hovertemplate="step %{customdata}: exactly 0<extra>" + label + "</extra>"))
    last_step = float(m.steps[-1]) if m.n_steps else None
    for rid, om in (others or {}).items():
        for n in names:
            if n not in om.names:
                continue
            r = om.names.index(n)
            x, y = om.steps[om.present[r]], om.values[r][om.present[r]]
            good = np.isfinite(y) & (y > 0)
            xg, yg = x[good], y[good]
            keep = downsample_minmax(xg, yg, max_points) if len(xg) else np.zeros(0, np.int64)
            label = f"{'total' if n == TOTAL else n} · {rid}"
            fig.add_trace(go.Scattergl(
                x=xg[keep], y=yg[keep].astype(np.float32), mode="lines", name=label,
                line={"width": 2.0 if n == TOTAL else 1.2, "dash": "dash"},
                hovertemplate="step %{x}<br>%{y:.4g}<extra>" + label + "</extra>"))
        if om.n_steps:
            last_step = max(last_step if last_step is not None else -np.inf, float(om.steps[-1]))
    if any(tr.name.endswith("NaN/Inf") for tr in fig.data):
        _legend_swatch(fig, "NaN/Inf (drawn at the top)", NONFINITE_COLOR, "x")
    shapes = []
    if clip is not None:
        for a, b in clip.intervals():
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": a - 0.5, "x1": b + 0.5,
                           "y0": 0, "y1": 1, "fillcolor": CLIP_COLOR, "line": {"width": 0},
                           "layer": "below"})
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
                       "y0": clip.max_norm, "y1": clip.max_norm,
                       "line": {"color": "#ff9100", "dash": "dash", "width": 1.5}})
    for s in failure_steps:
        shapes.append({"type": "line", "x0": s, "x1": s, "xref": "x", "yref": "paper", "y0": 0,
                       "y1": 1, "line": {"color": FAILURE_COLOR, "dash": "dot", "width": 1}})
    if selected_step is not None:
        shapes.append({"type": "line", "x0": selected_step, "x1": selected_step, "xref": "x",
                       "yref": "paper", "y0": 0, "y1": 1,
                       "line": {"color": SELECTED_COLOR, "width": 1.5}})
    rng = [float(m.steps[0]), last_step + 1] if m.n_steps and last_step is not None else None
    fig.update_layout(
        title=title, height=420, shapes=shapes, hovermode="closest", clickmode="event+select",
        margin={"l": 60, "r": 20, "t": 40 if title else 10, "b": 40},
        xaxis={"title": "step", "range": rng},
        yaxis={"title": "gradient L2 norm", "type": "log"},
        legend={"orientation": "h", "y": -0.18}, uirevision="grad-lines")
    return fig


def figure_payload_points(fig) -> int:
    """Number of data values a figure sends to the browser (x/y/z/customdata arrays)."""
    n = 0
    for tr in fig.data:
        for attr in ("x", "y", "z", "customdata"):
            v = getattr(tr, attr, None)
            if v is not None:
                n += int(np.asarray(v, dtype=object).size) if not hasattr(v, "size") else int(v.size)
    return n
