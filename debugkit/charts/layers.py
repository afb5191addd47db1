"""Figures of the layer statistics: a module x step heatmap of one statistic and a
quantile fan chart of one parameter's weights or gradients over the sampled steps.

Both take what :mod:`debugkit.analysis.layer_health` computed and only draw it.
"""

from __future__ import annotations

import numpy as np

#: (outer quantile, inner quantile, opacity) of the fan's bands, widest first.
FAN_BANDS = (("q01", "q99", 0.15), ("q05", "q95", 0.25), ("q25", "q75", 0.4))
FAN_COLOR = "31, 119, 180"


def build_layer_stat_heatmap_figure(modules, steps, values, *, stat: str, log: bool = False,
                                    focus=None):
    """Heatmap of ``stat``: modules (rows, forward order) x sampled steps (columns).

    ``focus``: ``(module, step)`` of a cell to outline (a finding's), or None.

    ``log`` draws log10 of the absolute value (for ``max_abs`` and the quantiles); an
    exact zero (a dead module's output) is drawn at the bottom of the colour scale, one
    decade under the smallest non-zero value, never left blank; the hover shows the real
    value. NaN cells (no value) stay empty.
    """
    import plotly.graph_objects as go

    raw = np.asarray(values, dtype=float)
    z = raw.copy()
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.log10(np.abs(raw))
        finite = z[np.isfinite(z)]
        floor = (finite.min() - 1.0) if finite.size else -1.0
        z[raw == 0] = floor
        z[~np.isfinite(z)] = np.nan
    fig = go.Figure(go.Heatmap(
        z=z, x=[str(s) for s in steps], y=list(modules), colorscale="Viridis", customdata=raw,
        colorbar={"title": f"log10 |{stat}|" if log else stat},
        hovertemplate="step %{x}<br>%{y}<br>" + stat + " %{customdata:.4g}<extra></extra>"))
    # Categories: module names such as "0", "3" (nn.Sequential) and step labels are names,
    # not numbers to space on a linear axis.
    fig.update_layout(title=f"{stat} by module and sampled step",
                      xaxis={"title": "step", "type": "category"},
                      yaxis={"autorange": "reversed", "title": "module", "type": "category"},
                      height=max(320, 22 * len(modules) + 140))
    if focus is not None and focus[0] in list(modules) and focus[1] in list(steps):
        x, y = list(steps).index(focus[1]), list(modules).index(focus[0])
        fig.add_shape(type="rect", x0=x - 0.5, x1=x + 0.5, y0=y - 0.5, y1=y + 0.5,
                      line={"color": "#d62728", "width": 3}, name="focus")
    return fig


def build_quantile_fan_figure(bands, *, param: str, which: str = "w"):
    """Fan chart of a parameter's quantiles over sampled steps: 1-99 %, 5-95 % and
    25-75 % bands around the median (``bands``: :func:`quantile_bands`' frame)."""
    import plotly.graph_objects as go

    label = "weights" if which == "w" else "gradients"
    x = [int(s) for s in bands.index]
    fig = go.Figure()
    for lo, hi, alpha in FAN_BANDS:
        if lo not in bands or hi not in bands:
            continue
        fig.add_trace(go.Scatter(x=x, y=bands[hi].tolist(), mode="lines", line={"width": 0},
                                 showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=x, y=bands[lo].tolist(), mode="lines", line={"width": 0},
                                 fill="tonexty", fillcolor=f"rgba({FAN_COLOR}, {alpha})",
                                 name=f"{lo[1:]}-{hi[1:]} %"))
    if "q50" in bands:
        fig.add_trace(go.Scatter(x=x, y=bands["q50"].tolist(), mode="lines+markers",
                                 line={"color": f"rgb({FAN_COLOR})"}, name="median"))
    fig.update_layout(title=f"{param}: {label} quantiles over sampled steps", xaxis_title="step",
                      yaxis_title=label)
    return fig
