"""Figures that compare runs: several runs' curves on one chart, one colour per run.

The colour of a run comes from :func:`run_colours` over the list of runs the page shows,
so a run keeps its colour on every chart of the page. The base run's band (learned by
:func:`debugkit.analysis.run_diff.compute_band`) is drawn as a shaded area behind it.
"""

from __future__ import annotations

import numpy as np

from ..analysis.downsample import downsample_minmax

# Plotly's default qualitative sequence without its red, which marks NaN/Inf and failures.
PALETTE = ("#636efa", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880",
           "#ff97ff", "#fecb52", "#1f77b4", "#2ca02c", "#9467bd")
NONFINITE = "#d62728"
BAND_FILL = "rgba(120, 120, 120, 0.18)"


def run_colours(names) -> dict[str, str]:
    """``{run name: colour}`` in the order given (the palette repeats after 12 runs)."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(dict.fromkeys(names))}


def _series(df, value_col: str, rank: int | None):
    if rank is not None and "rank" in df.columns:
        df = df[df["rank"] == rank]
    elif "rank" in df.columns and len(df):
        df = df[df["rank"] == df["rank"].min()]
    df = df.sort_values("step")
    return df["step"].to_numpy(), df[value_col].to_numpy(dtype=np.float64)


def build_overlay_figure(series: dict, *, colours: dict | None = None, title=None, y_title="",
                         band=None, band_name="base band", divergence_step=None, log_y=False,
                         max_points=5000, failure_steps: dict | None = None):
    """One line per run over steps.

    Parameters
    ----------
    series : dict
        ``{run name: (steps, values)}`` in drawing order.
    colours : dict, optional
        ``{run name: colour}`` (default: :func:`run_colours` of ``series``' names).
    band : DataFrame, optional
        ``step, lo, hi``: the base's band, drawn as a shaded area.
    divergence_step : int, optional
        Drawn as a vertical dashed line labelled "diverges @ N".
    failure_steps : dict, optional
        ``{run name: [steps]}``: failure captures, drawn as markers in the run's colour.
    """
    import plotly.graph_objects as go

    colours = colours or run_colours(series)
    fig = go.Figure()
    if band is not None and len(band):
        b = band.sort_values("step")
        fig.add_trace(go.Scatter(x=b["step"], y=b["hi"], mode="lines", line={"width": 0},
                                 hoverinfo="skip", showlegend=False, name=f"{band_name} (upper)"))
        fig.add_trace(go.Scatter(x=b["step"], y=b["lo"], mode="lines", line={"width": 0},
                                 fill="tonexty", fillcolor=BAND_FILL, name=band_name,
                                 hoverinfo="skip"))
    floor = _log_floor(series) if log_y else None
    for name, (x, y) in series.items():
        x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
        idx = downsample_minmax(x, y, max_points)
        x, y = x[idx], y[idx]
        finite = np.isfinite(y)
        colour = colours.get(name, PALETTE[0])
        fig.add_trace(go.Scattergl(x=x[finite], y=y[finite], mode="lines", name=name,
                                   line={"color": colour, "width": 2},
                                   hovertemplate="step %{x}<br>%{y:.4g}<extra>" + name + "</extra>"))
        zero = finite & (y <= 0)
        if floor is not None and zero.any():
            # a log axis cannot draw 0 (the line would just end): exactly-zero values are
            # open circles on the axis floor, in the run's colour, with their value
            fig.add_trace(go.Scatter(
                x=x[zero], y=[floor] * int(zero.sum()), mode="markers", name=f"{name}: 0",
                marker={"symbol": "circle-open", "size": 8, "color": colour},
                customdata=[f"{v:g}" for v in y[zero]],
                hovertemplate="step %{x}: %{customdata}<extra>" + name + "</extra>"))
        if (~finite).any():
            top = float(np.nanmax(y[finite])) if finite.any() else 1.0
            fig.add_trace(go.Scatter(
                x=x[~finite], y=[top] * int((~finite).sum()), mode="markers",
                marker={"symbol": "x", "color": NONFINITE, "size": 10, "line": {"color": colour}},
                name=f"{name}: NaN/Inf", customdata=[str(v) for v in y[~finite]],
                hovertemplate="step %{x}: %{customdata}<extra>" + name + "</extra>"))
    for name, steps in (failure_steps or {}).items():
        steps = sorted(set(steps))
        if steps:
            fig.add_trace(go.Scatter(x=steps, y=_y_at(series.get(name), steps),
                                     mode="markers", name=f"{name}: failure",
                                     marker={"symbol": "diamond", "size": 11,
                                             "color": colours.get(name, PALETTE[0]),
                                             "line": {"color": NONFINITE, "width": 2}},
                                     hovertemplate="failure @ step %{x}<extra>" + name + "</extra>"))
    if divergence_step is not None:
        fig.add_vline(x=divergence_step, line={"color": "#444", "dash": "dash", "width": 1},
                      annotation_text=f"diverges @ {divergence_step}",
                      annotation_position="top left", annotation_font={"size": 11})
    fig.update_layout(title=title, xaxis_title="step", yaxis_title=y_title, height=360,
                      margin={"l": 50, "r": 20, "t": 40 if title else 20, "b": 40},
                      legend={"orientation": "h", "y": -0.2}, hovermode="x unified")
    if log_y:
        fig.update_yaxes(type="log", **log_ticks(series, floor))
    return fig


def _log_floor(series: dict) -> float | None:
    """Where a log axis draws values it cannot (zeros): half the smallest positive value
    of every series, or None when no series has one."""
    pos = [np.asarray(y, dtype=np.float64) for _, y in series.values()]
    pos = [v[np.isfinite(v) & (v > 0)] for v in pos]
    pos = [v for v in pos if v.size]
    return float(min(v.min() for v in pos)) / 2 if pos else None


def log_ticks(series: dict, floor: float | None = None) -> dict:
    """``tickvals`` / ``ticktext`` for a log axis over the series' positive values: 1, 2
    and 5 of each decade, written in full (``0.5``, ``2e-05``), not as plotly's bare
    mantissa digits (a "5" that means 0.5); over more than four decades, one tick per
    decade."""
    vals = [np.asarray(y, dtype=np.float64) for _, y in series.values()]
    vals = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in vals] or [np.array([])])
    if floor is not None:
        vals = np.append(vals, floor)
    if not vals.size:
        return {}
    lo, hi = int(np.floor(np.log10(vals.min()))), int(np.ceil(np.log10(vals.max())))
    steps = (1,) if hi - lo > 4 else (1, 2, 5)
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in steps]
    ticks = [t for t in ticks if vals.min() / 1.01 <= t <= vals.max() * 1.01]
    if len(ticks) < 3:  # less than a decade: every digit
        ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in range(1, 10)]
        ticks = [t for t in ticks if vals.min() / 1.01 <= t <= vals.max() * 1.01] or [10.0 ** lo]
    return {"tickvals": ticks, "ticktext": [f"{t:.3g}" for t in ticks]}


def _y_at(xy, steps) -> list:
    """The run's value at each step (None where it has none or it is not finite)."""
    if xy is None:
        return [None] * len(steps)
    x, y = np.asarray(xy[0]), np.asarray(xy[1], dtype=np.float64)
    out = []
    for s in steps:
        hit = np.flatnonzero(x == s)
        v = float(y[hit[-1]]) if hit.size else None
        out.append(v if v is not None and np.isfinite(v) else None)
    return out


def build_scalar_overlay_figure(scalars: dict, key: str, *, colours=None, band=None,
                                divergence_step=None, rank=None, log_y=False,
                                failure_steps=None):
    """One scalar (``key``, e.g. ``loss``) of several runs on one chart.

    ``scalars`` is ``{run name: DataFrame}`` as :meth:`Run.scalars` returns; one rank is
    drawn (``rank``, default each run's lowest).
    """
    series = {n: _series(df[df["key"] == key], "value", rank) for n, df in scalars.items()}
    return build_overlay_figure(series, colours=colours, y_title=key, band=band,
                                divergence_step=divergence_step, log_y=log_y,
                                failure_steps=failure_steps)


def build_grad_overlay_figure(grads: dict, layer: str, *, colours=None, band=None,
                              divergence_step=None, rank=None, failure_steps=None):
    """One layer's gradient norm of several runs on one chart (log y axis).

    ``grads`` is ``{run name: DataFrame}`` as :meth:`Run.grad_norms` returns.
    """
    series = {n: _series(df[df["layer"] == layer], "grad_norm", rank) for n, df in grads.items()}
    return build_overlay_figure(series, colours=colours, y_title=f"grad norm: {layer}", band=band,
                                divergence_step=divergence_step, log_y=True,
                                failure_steps=failure_steps)
