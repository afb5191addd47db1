"""Figures of multi-rank runs: step time per rank, time split, divergence, trace lag."""

from __future__ import annotations

import numpy as np

RANK_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
SPLIT_COLORS = {"data_wait_s": "#ff7f0e", "compute_s": "#1f77b4", "comm_s": "#7f7f7f"}
SPLIT_LABELS = {"data_wait_s": "data wait", "compute_s": "compute", "comm_s": "waiting in collectives"}
VALUE_LABELS = {"step_time_s": "step time (s)", "busy_s": "own work: data wait + compute (s)",
                "data_wait_s": "data wait (s)", "compute_s": "compute (s)", "comm_s": "collectives (s)"}


def _layout(fig, height=340, **kw):
    fig.update_layout(height=height, margin={"l": 60, "r": 20, "t": 30, "b": 40},
                      legend={"orientation": "h", "y": -0.22}, **kw)
    return fig


def build_rank_heatmap_figure(times, value: str = "step_time_s", highlight=()):
    """Rank x step heatmap of ``value`` (a column of ``compute_rank_step_times``).

    ``highlight``: ranks whose row labels are marked (stragglers).
    """
    import plotly.graph_objects as go

    piv = times.pivot_table(index="rank", columns="step", values=value, aggfunc="last")
    labels = [f"rank {r}" + (" ◀" if r in set(highlight) else "") for r in piv.index]
    fig = go.Figure(go.Heatmap(
        z=piv.to_numpy(dtype=float), x=piv.columns.to_numpy(), y=labels, colorscale="Viridis",
        colorbar={"title": {"text": "s"}},
        hovertemplate="%{y}, step %{x}<br>" + VALUE_LABELS.get(value, value) + ": %{z:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, height=max(200, 60 + 28 * len(piv.index)), xaxis_title="step")


def build_rank_lines_figure(times, value: str = "step_time_s", highlight=()):
    """One line per rank of ``value`` over steps; highlighted ranks drawn thicker."""
    import plotly.graph_objects as go

    fig = go.Figure()
    hl = set(highlight)
    for i, (r, g) in enumerate(times.groupby("rank", sort=True)):
        g = g.sort_values("step")
        fig.add_trace(go.Scattergl(
            x=g["step"], y=g[value], mode="lines", name=f"rank {r}" + (" (straggler)" if r in hl else ""),
            line={"color": RANK_COLORS[i % len(RANK_COLORS)], "width": 3 if r in hl else 1.5},
            hovertemplate=f"rank {r}, step %{{x}}: %{{y:.4f}} s<extra></extra>"))
    return _layout(fig, xaxis_title="step", yaxis_title=VALUE_LABELS.get(value, value),
                   hovermode="x unified")


def build_time_split_figure(summary):
    """Stacked bars per rank: median data wait, compute and time waiting in collectives."""
    import plotly.graph_objects as go

    fig = go.Figure()
    x = [f"rank {r}" for r in summary["rank"]]
    for col in ("data_wait_s", "compute_s", "comm_s"):
        y = summary[col].astype(float).fillna(0.0) * 1000.0
        fig.add_trace(go.Bar(x=x, y=y, name=SPLIT_LABELS[col], marker_color=SPLIT_COLORS[col],
                             hovertemplate="%{x}: %{y:.2f} ms<extra>" + SPLIT_LABELS[col] + "</extra>"))
    return _layout(fig, barmode="stack", yaxis_title="median per step (ms)")


def build_grad_divergence_figure(divergence, rtol: float | None = None):
    """Largest relative spread across ranks of any layer's gradient norm, per step."""
    import plotly.graph_objects as go

    fig = go.Figure()
    if not divergence.empty:
        worst = divergence.groupby("step")["rel_spread"].max().reset_index()
        total = divergence[divergence["layer"].astype(str) == "__total__"]
        floor = 1e-12
        fig.add_trace(go.Scatter(x=worst["step"], y=np.maximum(worst["rel_spread"], floor),
                                 mode="lines+markers", name="worst layer",
                                 hovertemplate="step %{x}: %{y:.3g}<extra>worst layer</extra>"))
        if not total.empty:
            fig.add_trace(go.Scatter(x=total["step"], y=np.maximum(total["rel_spread"], floor),
                                     mode="lines", name="total norm", line={"dash": "dot"},
                                     hovertemplate="step %{x}: %{y:.3g}<extra>total norm</extra>"))
    if rtol:
        fig.add_hline(y=rtol, line={"color": "#d62728", "dash": "dash", "width": 1},
                      annotation_text=f"threshold {rtol:g}", annotation_position="top left")
    fig.update_yaxes(type="log")
    return _layout(fig, xaxis_title="step", yaxis_title="relative spread across ranks")


def build_trace_lag_figure(metric):
    """Rank x iteration heatmap of how late each rank starts its last collective
    (normalised start time minus the median rank's, in iterations)."""
    import plotly.graph_objects as go

    piv = metric.pivot_table(index="rank", columns="iteration", values="lag", aggfunc="last")
    z = piv.to_numpy(dtype=float)
    lim = float(np.nanmax(np.abs(z))) if z.size and np.isfinite(z).any() else 1.0
    fig = go.Figure(go.Heatmap(
        z=z, x=[f"step {i}" for i in piv.columns], y=[f"rank {r}" for r in piv.index],
        colorscale="RdBu_r", zmin=-lim, zmax=lim, colorbar={"title": {"text": "iterations"}},
        hovertemplate="%{y}, %{x}<br>late by %{z:.3f} iterations<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, height=max(200, 60 + 28 * len(piv.index)))


def build_overlap_figure(overlap):
    """Communication/computation overlap per rank (percent of communication time)."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=[f"rank {r}" for r in overlap["rank"]], y=overlap["overlap_pct"],
                           marker_color="#2ca02c",
                           hovertemplate="%{x}: %{y:.1f} % of communication overlapped<extra></extra>"))
    fig.update_yaxes(range=[0, 100])
    return _layout(fig, yaxis_title="comm overlapped with compute (%)")
