"""Figures of logged scalars (loss curves and the like)."""

from __future__ import annotations

import numpy as np

from ..analysis.downsample import downsample_minmax
from .traces import line_trace


def build_scalar_figure(scalars, keys=("loss",), *, title=None, max_points=5000, log_y=False,
                        failure_steps=()):
    """Line chart of scalars over steps, one trace per (key, rank).

    Parameters
    ----------
    scalars : DataFrame
        ``[step, rank, key, value, ...]`` as :meth:`Run.scalars` returns.
    keys : sequence of str
        Which keys to draw.
    max_points : int
        Points per trace after extreme-preserving downsampling; non-finite values are
        drawn as red ``x`` markers at the top of the axis.
    failure_steps : sequence of int
        Steps with a failure capture, drawn as vertical lines.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    df = scalars[scalars["key"].isin(list(keys))]
    multi_rank = df["rank"].nunique() > 1
    sizes = df.groupby(["key", "rank"], sort=True, observed=True).size().to_numpy()
    line = line_trace(int(np.minimum(sizes, max_points).sum()))  # SVG for short curves (charts.traces)
    for (key, rank), g in df.groupby(["key", "rank"], sort=True, observed=True):
        g = g.sort_values("step")
        x, y = g["step"].to_numpy(), g["value"].to_numpy(dtype=np.float64)
        idx = downsample_minmax(x, y, max_points)
        x, y = x[idx], y[idx]
        finite = np.isfinite(y)
        label = f"{key} (rank {rank})" if multi_rank else key
        fig.add_trace(line(x=x[finite], y=y[finite], mode="lines", name=label,
                           hovertemplate="step %{x}<br>%{y:.4g}<extra>" + label + "</extra>"))
        if (~finite).any():
            top = float(np.nanmax(y[finite])) if finite.any() else 1.0
            fig.add_trace(go.Scatter(
                x=x[~finite], y=[top] * int((~finite).sum()), mode="markers",
                marker={"symbol": "x", "color": "#d62728", "size": 10},
                name=f"{label}: NaN/Inf", customdata=[str(v) for v in y[~finite]],
                hovertemplate="step %{x}: %{customdata}<extra></extra>"))
    for s in sorted(set(failure_steps)):
        fig.add_vline(x=s, line={"color": "#d62728", "dash": "dot", "width": 1},
                      annotation_text=f"failure @ {s}", annotation_position="top left",
                      annotation_font={"color": "#d62728", "size": 11})
    fig.update_layout(title=title, xaxis_title="step", yaxis_title=", ".join(keys),
                      height=360, margin={"l": 50, "r": 20, "t": 40 if title else 20, "b": 40},
                      legend={"orientation": "h", "y": -0.2}, hovermode="x unified")
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def build_scalars_figure(smoothed, keys, *, log_y=False, max_points=5000, show_raw=True,
                         failure_steps=(), height=420):
    """Several scalar series on one chart, TensorBoard style: each series' smoothed line,
    and its raw values as a faint line of the same colour behind it.

    The learning rate (``lr``, ``lr/<group>``) is drawn as logged (never smoothed) and,
    beside other series, on its own axis at the right: a loss of 2.3 and a learning rate
    of 0.001 on one axis would flatten one of them. Non-finite values (NaN, inf) are red
    ``x`` markers at the top of the chart, named by their value in the hover.

    Parameters
    ----------
    smoothed : DataFrame
        :func:`debugkit.analysis.scalars.smooth_scalars` output (``step, rank, key,
        value, smoothed``).
    keys : sequence of str
        The series to draw (one trace pair per key and rank).
    log_y : bool
        Logarithmic y axis for the series other than the learning rate (non-positive
        values are left out by plotly).
    show_raw : bool
        Draw the unsmoothed values too.
    failure_steps : sequence of int
        Steps with a failure capture, as vertical lines.
    """
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    from ..analysis.scalars import base_key
    from ..analysis.scalars import is_lr_key as _is_lr

    def is_lr_key(k):  # a series of another run is "<key> · <run>" (analysis.scalars.overlay_runs)
        return _is_lr(base_key(k))

    fig = go.Figure()
    df = smoothed[smoothed["key"].isin(list(keys))]
    multi_rank = df["rank"].nunique() > 1
    lr_apart = any(is_lr_key(str(k)) for k in keys) and not all(is_lr_key(str(k)) for k in keys)
    palette = qualitative.Plotly
    nonfinite = []  # (x, raw values, label, axis)
    tops: dict[str, float] = {}  # axis -> largest finite value drawn on it
    sizes = df.groupby(["key", "rank"], sort=True, observed=True).size()
    line = line_trace(sum(min(int(n), max_points) * (2 if show_raw and not is_lr_key(str(k)) else 1)
                          for (k, _), n in sizes.items()))  # SVG for short curves (charts.traces)
    for i, ((key, rank), g) in enumerate(df.groupby(["key", "rank"], sort=True, observed=True)):
        color = palette[i % len(palette)]
        g = g.sort_values("step")
        x = g["step"].to_numpy()
        label = f"{key} (rank {rank})" if multi_rank else str(key)
        lr = is_lr_key(str(key))
        axis = "y2" if lr and lr_apart else "y"
        layers = [("smoothed", {"name": label, "line": {"color": color, "width": 2}})]
        if show_raw and not lr:  # the learning rate is drawn raw: no second line
            layers.insert(0, ("value", {"name": f"{label} (raw)", "opacity": 0.25, "showlegend": False,
                                        "line": {"color": color, "width": 1}}))
        for col, kw in layers:
            y = g[col].to_numpy(dtype=np.float64)
            idx = downsample_minmax(x, y, max_points)
            xs, ys = x[idx], y[idx]
            finite = np.isfinite(ys)
            fig.add_trace(line(x=xs[finite], y=ys[finite], mode="lines", legendgroup=label, yaxis=axis,
                               hovertemplate="step %{x}<br>%{y:.4g}<extra>" + kw["name"] + "</extra>",
                               **kw))
        raw = g["value"].to_numpy(dtype=np.float64)
        bad = ~np.isfinite(raw)
        if (~bad).any():
            tops[axis] = max(tops.get(axis, -np.inf), float(raw[~bad].max()))
        if bad.any():
            nonfinite.append((x[bad], raw[bad], label, axis))
    for xs, vals, label, axis in nonfinite:
        top = tops.get(axis, 1.0)  # at the largest finite value of their axis
        text = ["NaN" if np.isnan(v) else ("inf" if v > 0 else "-inf") for v in vals]
        fig.add_trace(go.Scatter(x=xs, y=[top] * len(xs), mode="markers", yaxis=axis,
                                 marker={"symbol": "x", "color": "#d62728", "size": 11},
                                 name=f"{label}: NaN/inf", customdata=text,
                                 hovertemplate="step %{x}: %{customdata}<extra>" + label + "</extra>"))
    for s in sorted(set(failure_steps)):
        fig.add_vline(x=s, line={"color": "#d62728", "dash": "dot", "width": 1},
                      annotation_text=f"failure @ {s}", annotation_position="top left",
                      annotation_font={"color": "#d62728", "size": 11})
    left = [str(k) for k in keys if not (lr_apart and is_lr_key(str(k)))]
    fig.update_layout(xaxis_title="step", yaxis_title=", ".join(left), height=height,
                      margin={"l": 50, "r": 60 if lr_apart else 20, "t": 20, "b": 40},
                      legend={"orientation": "h", "y": -0.2}, hovermode="x unified")
    if lr_apart:
        fig.update_layout(yaxis2={"title": {"text": ", ".join(str(k) for k in keys if is_lr_key(str(k)))},
                                  "overlaying": "y", "side": "right", "showgrid": False,
                                  "rangemode": "tozero",
                                  "exponentformat": "power"})
    if log_y:
        fig.layout.yaxis.type = "log"  # the learning rate's own axis stays linear
    return fig
