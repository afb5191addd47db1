"""Figures of an inference run: latency percentiles, outcomes and memory per request.

The x axis is the request (``seq``: its position in the run by start time, see
:mod:`debugkit.analysis.request_windows`). Builders take what the analysis returned and
draw it; nothing here reads a run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.downsample import downsample_minmax
from ..analysis.memory import fmt_bytes
from .memory import BAND_COLOR, OOM_COLOR, byte_unit

#: Colours of the percentile lines and the outcome bars.
PCT_COLORS = {"p50_ms": "#1f77b4", "p95_ms": "#ff7f0e", "p99_ms": "#d62728"}
OUTCOME_COLORS = {"error": "#d62728", "nonfinite": "#9467bd", "fallback": "#ff9800", "ok": "#2ca02c"}
OUTCOME_LABELS = {"error": "error", "nonfinite": "non-finite output", "fallback": "fallback taken",
                  "ok": "ok"}
#: The memory counter of each ``mem_kind``: its panel and title.
MEM_PANELS = {"cuda_allocated": ("device", "GPU memory after each request (CUDA allocated)"),
              "rss": ("host", "Host memory after each request (process RSS)")}
#: A projection further out than this many times the run's length is named, not drawn.
MAX_PROJECTION_FACTOR = 20


def build_latency_figure(requests: pd.DataFrame, windows: pd.DataFrame, *,
                         max_points: int = 3000):
    """Each request's latency (light points), the rolling p50/p95/p99 lines, and a marker
    on each failed request (error, non-finite output, fallback) that carries its capture id;
    the y axis is logarithmic (latency is heavy-tailed).

    Parameters
    ----------
    requests : DataFrame
        :func:`~debugkit.analysis.request_windows.order_requests` (``seq``,
        ``latency_ms``, ``outcome``, ``failure_id``, ``request``, ``rank``).
    windows : DataFrame
        :func:`~debugkit.analysis.request_windows.compute_latency_windows`.
    max_points : int
        Points of the per-request scatter after extreme-preserving downsampling.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    if len(requests):
        x = requests["seq"].to_numpy()
        y = requests["latency_ms"].astype("float64").to_numpy()
        idx = downsample_minmax(x, y, max_points)
        fig.add_trace(go.Scattergl(
            x=x[idx], y=y[idx], mode="markers", name="request latency",
            marker={"size": 3, "color": "rgba(120,120,120,0.35)"},
            hovertemplate="request %{x}<br>%{y:.2f} ms<extra></extra>"))
    win = windows["n"].max() if len(windows) else 0
    for col, color in PCT_COLORS.items():
        if col in windows and len(windows):
            fig.add_trace(go.Scatter(
                x=windows["seq"], y=windows[col], mode="lines", name=col.split("_")[0],
                line={"color": color, "width": 2},
                hovertemplate=(f"{col.split('_')[0]} of the last %{{customdata}} requests"
                               "<br>at request %{x}: %{y:.2f} ms<extra></extra>"),
                customdata=windows["n"]))
    bad = requests[requests["outcome"] != "ok"] if len(requests) else requests
    for outcome in ("error", "nonfinite", "fallback"):
        b = bad[bad["outcome"] == outcome] if len(bad) else bad
        if not len(b):
            continue
        fig.add_trace(go.Scatter(
            x=b["seq"], y=b["latency_ms"], mode="markers", name=OUTCOME_LABELS[outcome],
            marker={"symbol": "x" if outcome != "fallback" else "triangle-up", "size": 9,
                    "color": OUTCOME_COLORS[outcome]},
            customdata=b["failure_id"].fillna("").to_numpy(),  # a click opens the capture in Replay
            hovertemplate=(f"request %{{x}}: {OUTCOME_LABELS[outcome]}<br>%{{y:.2f}} ms"
                           "<br>capture %{customdata}<extra></extra>")))
    fig.update_xaxes(title_text="request")
    # latency is heavy-tailed: a log axis keeps a warm-up request of 500 ms from flattening
    # the 0.2 ms p50 and the 5 ms p99 into the floor
    fig.update_yaxes(title_text="latency (ms, log scale)", type="log")
    fig.update_layout(height=380, margin={"l": 60, "r": 20, "t": 40, "b": 40}, hovermode="closest",
                      legend={"orientation": "h", "y": -0.2},
                      title={"text": f"Latency: rolling percentiles over {int(win)} requests"
                             if len(windows) else "Latency per request", "font": {"size": 14}})
    return fig


def build_outcome_figure(counts: pd.DataFrame):
    """Failed requests per window of consecutive requests, stacked by outcome (error,
    non-finite output, fallback), with each window's share of failed requests on hover.

    Parameters
    ----------
    counts : DataFrame
        :func:`~debugkit.analysis.request_windows.compute_outcome_counts`.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    if len(counts):
        total = counts[["ok", "error", "nonfinite", "fallback"]].sum(axis=1).clip(lower=1)
        width = (counts["seq_end"] - counts["seq_start"] + 1).astype("float64")
        mid = counts["seq_start"] + (width - 1) / 2
        for outcome in ("error", "nonfinite", "fallback"):
            fig.add_trace(go.Bar(
                x=mid, y=counts[outcome], width=width * 0.9, name=OUTCOME_LABELS[outcome],
                marker_color=OUTCOME_COLORS[outcome],
                customdata=np.stack([counts["seq_start"], counts["seq_end"],
                                     (100.0 * counts[outcome] / total).round(2)], axis=-1),
                hovertemplate=(f"requests %{{customdata[0]}}–%{{customdata[1]}}: %{{y}} "
                               f"{OUTCOME_LABELS[outcome]} (%{{customdata[2]}} %)<extra></extra>")))
    fig.update_layout(barmode="stack", height=260, margin={"l": 60, "r": 20, "t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.3},
                      title={"text": "Errors and fallbacks per window of requests", "font": {"size": 14}})
    fig.update_xaxes(title_text="request")
    fig.update_yaxes(title_text="requests", rangemode="tozero")
    return fig


def project_leak(leak: dict, warn_bytes: float | None) -> float | None:
    """The request at which a leak's fitted line reaches ``warn_bytes`` (None when it
    does not grow, or there is no warning level). ``leak``: ``last_seq``,
    ``level_bytes`` (the fitted level there) and ``bytes_per_request``."""
    rate = float(leak.get("bytes_per_request") or 0.0)
    if warn_bytes is None or not rate > 0:
        return None
    level = float(leak["level_bytes"])
    if level >= warn_bytes:
        return float(leak["last_seq"])
    return float(leak["last_seq"]) + (warn_bytes - level) / rate


def build_request_memory_figure(requests: pd.DataFrame, bands: pd.DataFrame | None = None, *,
                                leaks=(), max_points: int = 3000):
    """Memory after each request (one panel per counter: CUDA allocated, process RSS), the
    warning level and capacity, and for each leak its fitted trend (dashed) and its
    projection (dotted) to the warning level, with the request where it gets there.

    Parameters
    ----------
    requests : DataFrame
        :func:`~debugkit.analysis.request_windows.order_requests` (``seq``,
        ``mem_after_bytes``, ``mem_kind``, ``rank``).
    bands : DataFrame, optional
        :func:`debugkit.analysis.memory.compute_bands` with the run's thresholds (the
        manifest's ``serve.gpu_mem_threshold`` / ``host_mem_threshold``).
    leaks : sequence of dict
        One per leaking counter: ``mem_kind``, ``start_seq``, ``last_seq``,
        ``level_bytes`` (the fitted level at ``last_seq``) and ``bytes_per_request``.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = requests[requests["mem_after_bytes"].notna()] if len(requests) else requests
    kinds = [k for k in MEM_PANELS if len(df) and (df["mem_kind"] == k).any()] or ["rss"]
    fig = make_subplots(rows=len(kinds), cols=1, shared_xaxes=True, vertical_spacing=0.14,
                        subplot_titles=[MEM_PANELS[k][1] for k in kinds])
    n_seq = float(df["seq"].max()) + 1 if len(df) else 1.0
    for row, kind in enumerate(kinds, start=1):
        panel = MEM_PANELS[kind][0]
        g = df[df["mem_kind"] == kind] if len(df) else df
        b = bands[bands["kind"] == panel] if bands is not None and len(bands) else None
        warn = float(b["warn_bytes"].min()) if b is not None and len(b) else None
        thr = float(b["threshold"].min()) if b is not None and len(b) else 0.0
        leak_list = [lk for lk in leaks if lk.get("mem_kind") == kind]
        projections = [(lk, project_leak(lk, warn)) for lk in leak_list]
        x_end = max([n_seq] + [p for _, p in projections
                               if p is not None and p <= MAX_PROJECTION_FACTOR * n_seq])
        vmax = max([float(g["mem_after_bytes"].max()) if len(g) else 1.0]
                   + ([warn] if warn is not None and any(p is not None and p <= x_end for _, p in projections)
                      else []))
        div, unit = byte_unit(vmax)
        if len(g):
            x = g["seq"].to_numpy()
            y = g["mem_after_bytes"].astype("float64").to_numpy()
            idx = downsample_minmax(x, y, max_points)
            fig.add_trace(go.Scattergl(
                x=x[idx], y=y[idx] / div, mode="lines", name=MEM_PANELS[kind][1].split(" after")[0],
                line={"color": "#1f77b4", "width": 1.6},
                hovertemplate=f"request %{{x}}<br>%{{y:.3f}} {unit}<extra></extra>"), row=row, col=1)
        for lk, proj in projections:
            s0, s1 = float(lk["start_seq"]), float(lk["last_seq"])
            y1 = float(lk["level_bytes"])
            rate = float(lk["bytes_per_request"])
            y0 = y1 - rate * (s1 - s0)
            per_k = fmt_bytes(rate * 1000)
            fig.add_trace(go.Scatter(
                x=[s0, s1], y=[y0 / div, y1 / div], mode="lines", name=f"leak: +{per_k} per 1,000 requests",
                line={"color": OOM_COLOR, "dash": "dash", "width": 2},
                hovertemplate=f"leak from request {int(s0)}: +{per_k} per 1,000 requests<extra></extra>"),
                row=row, col=1)
            if proj is not None and warn is not None and proj <= x_end:
                fig.add_trace(go.Scatter(
                    x=[s1, proj], y=[y1 / div, warn / div], mode="lines+markers",
                    name=f"projection: {thr:.0%} at request {int(round(proj)):,}",
                    line={"color": OOM_COLOR, "dash": "dot", "width": 1.5},
                    marker={"size": [0, 10], "symbol": "x", "color": OOM_COLOR},
                    hovertemplate=(f"at this rate the {thr:.0%} warning level "
                                   f"({fmt_bytes(warn)}) is reached at request {int(round(proj)):,}"
                                   "<extra></extra>")), row=row, col=1)
            elif proj is not None and warn is not None:
                fig.add_annotation(
                    text=(f"at this rate {thr:.0%} ({fmt_bytes(warn)}) is reached at "
                          f"request {int(round(proj)):,}, far right of this range"),
                    xref="x domain" if row == 1 else f"x{row} domain",
                    yref="y domain" if row == 1 else f"y{row} domain", x=0.0, y=1.0,
                    xanchor="left", yanchor="top", showarrow=False, font={"size": 11, "color": OOM_COLOR},
                    bgcolor="rgba(255,255,255,0.85)")
        if b is not None and len(b) and warn is not None and warn <= vmax * 1.05:
            cap = float(b["capacity_bytes"].min())
            fig.add_hrect(y0=warn / div, y1=max(cap, warn) / div, fillcolor=BAND_COLOR, line_width=0,
                          row=row, col=1)
            fig.add_hline(y=warn / div, line={"color": "#e69500", "width": 1, "dash": "dot"},
                          row=row, col=1, annotation_text=f"{thr:.0%} of {fmt_bytes(cap)}",
                          annotation_position="bottom left", annotation_font_size=10)
        fig.update_yaxes(title_text=unit, rangemode="tozero", row=row, col=1)
        if warn is not None and warn <= vmax * 1.05:
            fig.update_yaxes(range=[0, vmax * 1.08 / div], row=row, col=1)
    fig.update_xaxes(title_text="request", row=len(kinds), col=1)
    fig.update_layout(height=300 * len(kinds) + 80, margin={"l": 60, "r": 20, "t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.15}, hovermode="closest")
    return fig
