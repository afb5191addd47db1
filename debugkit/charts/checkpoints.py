"""Figures of checkpoints: the layer x checkpoint heatmap of relative weight change, the
per-layer weight norms, and the layers that moved most between two checkpoints."""

from __future__ import annotations

import numpy as np

from ..analysis.checkpoints import ChangeMatrix
from .gradients import NONFINITE_COLOR, ZERO_COLOR, _legend_swatch

MOVED_COLOR = "#1f77b4"


def build_change_heatmap_figure(m: ChangeMatrix, *, title=None):
    """Heatmap of log10 relative weight change ``||w_j - w_{j-1}|| / ||w_{j-1}||``,
    layer (rows, model order) x checkpoint (columns, oldest first).

    Cells of a checkpoint holding NaN/Inf in that layer are drawn in
    :data:`~debugkit.charts.gradients.NONFINITE_COLOR`; layers bit-identical to the
    previous checkpoint in :data:`~debugkit.charts.gradients.ZERO_COLOR`. Column ``j`` is
    labelled ``"→ <checkpoint j>"``; the first checkpoint, with no previous one, has no
    column (NaN/Inf in it shows on the weight-norm figure and in the findings).
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    # Column j is the change from checkpoint j-1 to j: the first checkpoint has none and
    # is left out.
    x = [f"→ {lab}" for lab in m.labels[1:]]
    m = ChangeMatrix(m.layers, m.labels[1:], m.steps[1:], m.rel[:, 1:], m.norm[:, 1:],
                     m.nonfinite[:, 1:], m.unchanged[:, 1:])
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(m.rel > 0, np.log10(m.rel), np.nan)
    fig.add_trace(go.Heatmap(
        z=z, x=x, y=list(m.layers), customdata=m.norm, colorscale="Viridis", name="log10 change",
        colorbar={"title": {"text": "log10<br>relative<br>change"}, "thickness": 12},
        hovertemplate=("%{y}<br>%{x}<br>relative change 10^%{z:.2f}"
                       "<br>weight norm %{customdata:.4g}<extra></extra>"),
        zsmooth=False, xgap=1, ygap=1))
    if m.unchanged.any():
        fig.add_trace(go.Heatmap(
            z=np.where(m.unchanged & ~m.nonfinite, 1.0, np.nan), x=x, y=list(m.layers),
            colorscale=[[0, ZERO_COLOR], [1, ZERO_COLOR]], showscale=False, zmin=0, zmax=1,
            name="unchanged", xgap=1, ygap=1,
            hovertemplate="%{y}<br>%{x}<br>bit-identical to the previous checkpoint<extra></extra>"))
        _legend_swatch(fig, "unchanged", ZERO_COLOR)
    if m.nonfinite.any():
        fig.add_trace(go.Heatmap(
            z=np.where(m.nonfinite, 1.0, np.nan), x=x, y=list(m.layers),
            colorscale=[[0, NONFINITE_COLOR], [1, NONFINITE_COLOR]], showscale=False, zmin=0,
            zmax=1, name="NaN/Inf", xgap=1, ygap=1,
            hovertemplate="%{y}<br>%{x}<br>holds NaN/Inf<extra></extra>"))
        _legend_swatch(fig, "NaN/Inf", NONFINITE_COLOR)
    height = int(min(1400, max(260, 22 * len(m.layers) + 120)))
    fig.update_layout(
        title=title, height=height, plot_bgcolor="white",
        margin={"l": 10, "r": 20, "t": 40 if title else 10, "b": 40},
        xaxis={"title": "change since the previous checkpoint", "type": "category"},
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        uirevision="checkpoint-heatmap")
    return fig


def build_weight_norm_figure(m: ChangeMatrix, layers=None):
    """One line per layer: its weight norm (L2, finite values) at each checkpoint; a
    checkpoint holding NaN/Inf in the layer is marked with an X."""
    import plotly.graph_objects as go

    fig = go.Figure()
    steps = [s if s == s else None for s in m.steps]
    x = steps if all(s is not None for s in steps) else list(m.labels)
    pick = list(layers) if layers is not None else list(m.layers)
    for name in pick:
        i = m.layers.index(name)
        fig.add_trace(go.Scatter(x=x, y=m.norm[i], mode="lines+markers", name=name,
                                 hovertemplate=f"{name}<br>%{{x}}<br>norm %{{y:.4g}}<extra></extra>"))
        bad = np.flatnonzero(m.nonfinite[i])
        if len(bad):
            fig.add_trace(go.Scatter(x=[x[j] for j in bad], y=m.norm[i][bad], mode="markers",
                                     marker={"symbol": "x", "size": 12, "color": NONFINITE_COLOR},
                                     name=f"{name}: NaN/Inf", showlegend=False,
                                     hovertemplate=f"{name}<br>%{{x}}<br>holds NaN/Inf<extra></extra>"))
    fig.update_layout(height=380, margin={"l": 10, "r": 10, "t": 10, "b": 40},
                      xaxis={"title": "step" if x is steps else "checkpoint"},
                      yaxis={"title": "weight norm (L2)", "type": "log"},
                      legend={"orientation": "h", "y": -0.2})
    return fig


def build_movement_figure(moved, *, top: int = 20, label_a: str = "A", label_b: str = "B"):
    """Horizontal bars: the ``top`` tensors with the largest relative change from A to B
    (``moved`` from :func:`debugkit.analysis.checkpoints.compute_movement`)."""
    import plotly.graph_objects as go

    d = moved.head(top)
    rel = d["rel_change"].to_numpy(dtype=float)
    colors = [NONFINITE_COLOR if not np.isfinite(v) else MOVED_COLOR for v in rel]
    shown = np.where(np.isfinite(rel), rel, np.nan)
    fig = go.Figure(go.Bar(
        x=shown, y=d["layer"].tolist(), orientation="h", marker={"color": colors},
        customdata=np.stack([d["norm_a"], d["norm_b"]], axis=-1) if len(d) else None,
        hovertemplate=("%{y}<br>relative change %{x:.3g}<br>norm " + label_a + " %{customdata[0]:.4g}"
                       "<br>norm " + label_b + " %{customdata[1]:.4g}<extra></extra>")))
    fig.update_layout(height=int(max(220, 24 * len(d) + 80)), margin={"l": 10, "r": 10, "t": 10, "b": 40},
                      # linear from 0: bar lengths compare as the values do (on a log axis
                      # that starts at 0.6, 0.62 looked 20x shorter than 1.37)
                      xaxis={"title": f"||{label_b} - {label_a}|| / ||{label_a}||", "type": "linear",
                             "rangemode": "tozero"},
                      yaxis={"autorange": "reversed", "automargin": True, "type": "category"})
    return fig
