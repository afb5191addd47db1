"""Figures of a bias audit: group metrics, disparities, SHAP summaries and dependence.

Every builder takes plain data (the audit document's dicts, the rows DataFrame) and
returns a plotly Figure; none reads files or calls Streamlit.
"""

from __future__ import annotations

import numpy as np

# Colour-blind-safe qualitative palette (Okabe & Ito) for groups.
GROUP_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
                "#000000"]
SENSITIVE_COLOR = "#C0392B"
PROXY_COLOR = "#E67E22"
OTHER_COLOR = "#4C78A8"
BAND_COLOR = "rgba(0, 158, 115, 0.12)"
METRIC_LABELS = {"selection_rate": "Selection rate", "tpr": "True positive rate",
                 "fpr": "False positive rate", "fnr": "False negative rate",
                 "precision": "Precision", "accuracy": "Accuracy", "base_rate": "Base rate"}
JUDGEMENT_LABELS = {"within": "within the band", "outside": "outside the band (significant)",
                    "outside_uncertain": "outside the band (interval overlaps it)",
                    "outside_too_few": "outside the band (too few rows to judge)",
                    "undefined": "undefined"}
BAR_METRICS = ("base_rate", "selection_rate", "tpr", "fpr", "fnr", "precision", "accuracy")


def short(name: str, limit: int = 32) -> str:
    """A tick label that fits: long feature names are cut in the middle."""
    name = str(name)
    if len(name) <= limit:
        return name
    keep = (limit - 1) // 2
    return name[:keep] + "…" + name[-(limit - 1 - keep):]


def group_color(i: int) -> str:
    return GROUP_COLORS[i % len(GROUP_COLORS)]


def _layout(fig, *, height, title=None, **kw):
    fig.update_layout(title=title, height=height, template="plotly_white",
                      margin={"l": 10, "r": 20, "t": 50 if title else 20, "b": 40},
                      legend={"orientation": "h", "y": -0.18, "x": 0}, **kw)
    return fig


def build_group_metrics_figure(attr: dict, metrics=BAR_METRICS, *, title=None):
    """Grouped bars of each metric per group, with bootstrap confidence intervals.

    Parameters
    ----------
    attr : dict
        One entry of the audit's ``sensitive`` (``groups``, ``groups_ci``, ``order``,
        ``reference_group``).
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    order = attr.get("order") or list(attr["groups"])
    ref = attr.get("reference_group")
    labels = [METRIC_LABELS[m] for m in metrics]
    for i, g in enumerate(order):
        vals = [attr["groups"][g].get(m) for m in metrics]
        ci = [(attr.get("groups_ci", {}).get(g, {}).get(m) or [None, None]) for m in metrics]
        plus = [(c[1] - v) if (v is not None and c[1] is not None) else 0 for v, c in zip(vals, ci)]
        minus = [(v - c[0]) if (v is not None and c[0] is not None) else 0 for v, c in zip(vals, ci)]
        n = attr["groups"][g].get("count")
        name = f"{g} (n={n})" + (" · reference" if g == ref else "")
        fig.add_trace(go.Bar(
            x=labels, y=[v if v is not None else None for v in vals], name=name,
            marker={"color": group_color(i), "line": {"width": 2 if g == ref else 0, "color": "#222"}},
            error_y={"type": "data", "array": plus, "arrayminus": minus, "visible": True,
                     "thickness": 1.2, "width": 3},
            customdata=[[c[0], c[1]] for c in ci],
            hovertemplate=f"{g}<br>%{{x}}: %{{y:.3f}}<br>CI %{{customdata[0]:.3f}}–%{{customdata[1]:.3f}}"
                          "<extra></extra>"))
    fig.update_yaxes(range=[0, 1.05], title="rate")
    return _layout(fig, height=380, title=title, barmode="group", bargap=0.25)


def build_disparity_figure(attr: dict, band=(0.8, 1.25), metrics=("selection_rate", "tpr", "fpr",
                                                                    "fnr", "precision"), *, title=None):
    """Each group's metric divided by the reference group's, with its interval, on a
    log axis; the acceptable band is shaded and 1 (parity) marked."""
    import plotly.graph_objects as go

    fig = go.Figure()
    all_order = attr.get("order") or list(attr["groups"])
    order = [g for g in all_order if g in attr.get("disparities", {})]
    ref = attr.get("reference_group")
    labels = [METRIC_LABELS[m] for m in metrics]
    xs_all = [band[0], band[1], 1.0]
    k = len(order)
    for j, g in enumerate(order):
        i = all_order.index(g)
        # Rows are metrics (top to bottom); groups sit side by side within a row.
        shift = (j - (k - 1) / 2) * (0.6 / max(k, 1)) if k > 1 else 0.0
        d = attr["disparities"][g]
        x, y, lo, hi, text = [], [], [], [], []
        for mi, m in enumerate(metrics):
            e = d.get(m) or {}
            r = e.get("ratio")
            if r is None or r <= 0:
                continue
            ci = e.get("ratio_ci") or [None, None]
            x.append(r)
            y.append(len(metrics) - 1 - mi - shift)
            lo.append(r - ci[0] if ci[0] is not None and ci[0] > 0 else 0)
            hi.append(ci[1] - r if ci[1] is not None else 0)
            xs_all += [v for v in (r, ci[0], ci[1]) if v is not None and v > 0]
            text.append(f"{labels[mi]}: {JUDGEMENT_LABELS.get(e.get('judgement'), '')}")
        fig.add_trace(go.Scatter(
            x=x, y=y, mode="markers", name=f"{g} vs {ref}",
            marker={"color": group_color(i), "size": 10, "symbol": "diamond"},
            error_x={"type": "data", "array": hi, "arrayminus": lo, "visible": True, "thickness": 1.4},
            customdata=text,
            hovertemplate=f"{g} / {ref}<br>%{{customdata}}<br>ratio %{{x:.2f}}<extra></extra>"))
    fig.update_yaxes(tickvals=list(range(len(metrics))), ticktext=list(reversed(labels)),
                     range=[-0.6, len(metrics) - 0.4], showgrid=False, zeroline=False)
    lo_x = max(min(xs_all) * 0.8, 0.05)
    hi_x = min(max(xs_all) * 1.25, 20)
    # The row separators, the band and parity as layout shapes in one update: plotly's
    # add_hline / add_vrect / add_vline re-validate the layout's shapes on each call
    # (0.14 s of a new server's first Bias audit visit, before its first chart)
    rows = [{"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": yi + 0.5,
             "y1": yi + 0.5, "line": {"color": "#eee", "width": 1}} for yi in range(len(metrics) - 1)]
    fig.update_layout(shapes=rows + [
        {"type": "rect", "xref": "x", "x0": band[0], "x1": band[1], "yref": "y domain", "y0": 0, "y1": 1,
         "fillcolor": BAND_COLOR, "line": {"width": 0}, "layer": "below"},
        {"type": "line", "xref": "x", "x0": 1.0, "x1": 1.0, "yref": "y domain", "y0": 0, "y1": 1,
         "line": {"color": "#555", "width": 1, "dash": "dot"}},
    ], annotations=[{"text": f"band {band[0]:g}–{band[1]:g}", "xref": "x", "x": band[0], "yref": "y domain",
                     "y": 1, "xanchor": "left", "yanchor": "top", "showarrow": False, "font": {"size": 11}}])
    ticks = [t for t in (0.05, 0.1, 0.2, 0.5, band[0], 1.0, band[1], 2, 5, 10, 20) if lo_x <= t <= hi_x]
    fig.update_xaxes(type="log", range=[np.log10(lo_x), np.log10(hi_x)], tickvals=ticks,
                     ticktext=[f"{t:g}" for t in ticks], title=f"ratio to the reference group ({ref})")
    return _layout(fig, height=max(300, 60 * len(metrics) + 120), title=title)


def build_mean_abs_figure(mean_abs: dict, *, sensitive=(), proxies=None, top: int = 20,
                          output: str = "", title=None):
    """Horizontal bars of mean |SHAP| per feature, sensitive features and likely proxies
    coloured (``proxies``: ``{feature: attribute it stands for}``)."""
    import plotly.graph_objects as go

    proxies = proxies or {}
    items = list(mean_abs.items())[:top]
    feats = [f for f, _ in items]
    fig = go.Figure()
    cats = [("sensitive feature", SENSITIVE_COLOR, lambda f: f in sensitive),
            ("likely proxy", PROXY_COLOR, lambda f: f in proxies and f not in sensitive),
            ("other feature", OTHER_COLOR, lambda f: f not in sensitive and f not in proxies)]
    for label, color, pick in cats:
        sel = [(f, v) for f, v in items if pick(f)]
        if not sel:
            continue
        fig.add_trace(go.Bar(
            x=[v for _, v in sel], y=[short(f) for f, _ in sel], orientation="h", name=label,
            marker={"color": color},
            customdata=[[proxies.get(f, ""), f] for f, _ in sel],
            hovertemplate="%{customdata[1]}: %{x:.4f}" + (f" ({output})" if output else "") +
                          ("<br>proxy of %{customdata[0]}" if label == "likely proxy" else "") +
                          "<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed([short(f) for f in feats])),
                     automargin=True)
    fig.update_xaxes(title=f"mean |SHAP|{' (' + output + ')' if output else ''}")
    return _layout(fig, height=max(260, 22 * len(feats) + 110), title=title, barmode="overlay")


def beeswarm_offsets(x: np.ndarray, nbins: int = 80, width: float = 0.4) -> np.ndarray:
    """Vertical offsets that spread points of similar x, like shap's beeswarm: points in
    the same x bin alternate above and below the axis, outward by rank."""
    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return np.zeros(0)
    lo, hi = float(np.nanmin(x)), float(np.nanmax(x))
    span = hi - lo or 1.0
    bins = np.clip(((x - lo) / span * nbins).astype(int), 0, nbins - 1)
    order = np.lexsort((np.arange(len(x)), bins))
    ranks = np.empty(len(x), dtype=int)
    counts = np.bincount(bins, minlength=nbins)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ranks[order] = np.arange(len(x)) - starts[bins[order]]
    offset = np.where(ranks % 2 == 0, 1, -1) * ((ranks + 1) // 2)
    peak = max(1, int(counts.max()) // 2)
    return offset / peak * width


def build_beeswarm_figure(shap_values, feature_values, features, *, max_display: int = 15,
                          sensitive=(), proxies=None, output: str = "", title=None):
    """SHAP summary plot: one row per feature (most important on top), a dot per row of
    data at its SHAP value, coloured by the feature's value (low blue, high red; grey for
    categorical features, whose category shows on hover).

    Parameters
    ----------
    shap_values : DataFrame
        One column of SHAP values per feature.
    feature_values : DataFrame
        The features' values (same columns).
    features : list of str
        Features in importance order.
    """
    import plotly.graph_objects as go

    proxies = proxies or {}
    feats = list(features)[:max_display]
    fig = go.Figure()
    # One trace per feature, its name once in ``meta`` (not in every point's hover text:
    # that repeated name was over half the figure's bytes), the two kinds in one legend
    # entry each.
    ticks = []
    scale = {"cmin": 0, "cmax": 1, "colorscale": [[0, "#1E88E5"], [0.5, "#A05EB5"], [1, "#FF0D57"]]}
    shown = set()
    for pos, f in enumerate(feats):
        yv = len(feats) - 1 - pos
        sv = np.asarray(shap_values[f], dtype=float)
        off = beeswarm_offsets(sv)
        vals = feature_values[f]
        mark = " ●" if f in sensitive else (" ◆" if f in proxies else "")
        ticks.append((yv, short(f) + mark))
        numeric = np.asarray(vals).dtype.kind in "fiu"
        group = "numeric feature" if numeric else "categorical feature (value on hover)"
        # float32 on the wire (7 significant digits; the hover shows 4 decimals): half the bytes
        common = {"x": sv.astype(np.float32), "y": (yv + off).astype(np.float32), "mode": "markers", "name": group, "legendgroup": group,
                  "showlegend": group not in shown, "meta": str(f)}
        if numeric:
            v = np.asarray(vals, dtype=float)
            # each point's rank among the feature's values, as whole numbers on a colour
            # scale from 0 to the last rank: uint16 on the wire (a quarter of the float64
            # fractions this sent), the same colours
            top = max(len(v) - 1, 1)
            ranks = np.argsort(np.argsort(v, kind="stable"), kind="stable").astype(
                np.uint16 if top <= np.iinfo(np.uint16).max else np.uint32)
            marker = {"size": 4, "color": ranks, **scale, "cmax": top, "showscale": group not in shown}
            if group not in shown:
                marker["colorbar"] = {"title": "feature value", "tickvals": [0, top],
                                      "ticktext": ["low", "high"], "len": 0.6, "thickness": 12}
            fig.add_trace(go.Scattergl(**common, customdata=v.astype(np.float32), marker=marker,
                                       hovertemplate="%{meta} = %{customdata:.6~g}<br>SHAP %{x:.4f}<extra></extra>"))
        else:
            fig.add_trace(go.Scattergl(**common, text=[str(x) for x in np.asarray(vals, dtype=object)],
                                       marker={"size": 4, "color": "#8C8C8C"},
                                       hovertemplate="%{meta} = %{text}<br>SHAP %{x:.4f}<extra></extra>"))
        shown.add(group)
    fig.add_vline(x=0, line={"color": "#999", "width": 1})
    fig.update_yaxes(tickvals=[t for t, _ in ticks], ticktext=[s for _, s in ticks],
                     range=[-0.7, len(feats) - 0.3], automargin=True, showgrid=False, zeroline=False)
    fig.update_xaxes(title=f"SHAP value{' (' + output + ')' if output else ''}: "
                           "← toward the negative outcome · toward the positive →")
    fig.update_layout(legend={"orientation": "h", "y": -0.12 if len(feats) > 8 else -0.25})
    return _layout(fig, height=max(320, 34 * len(feats) + 120), title=title)


def build_dependence_figure(x, shap, groups, order, *, feature: str, attribute: str,
                            output: str = "", title=None):
    """SHAP value of a sensitive feature against its value, coloured by group: does the
    feature push some groups toward the negative outcome? A categorical feature is drawn
    as one box of SHAP values per category."""
    import plotly.graph_objects as go

    x = np.asarray(x)
    shap = np.asarray(shap, dtype=float)
    groups = np.asarray(groups, dtype=object)
    fig = go.Figure()
    numeric = x.dtype.kind in "fiu"
    for i, g in enumerate(order):
        m = groups == g
        if not m.any():
            continue
        if numeric:
            fig.add_trace(go.Scattergl(
                x=x[m], y=shap[m], mode="markers", name=f"{attribute}={g}",
                marker={"size": 6, "color": group_color(i), "opacity": 0.75},
                hovertemplate=f"{attribute}={g}<br>{feature} %{{x}}<br>SHAP %{{y:.4f}}<extra></extra>"))
        else:
            fig.add_trace(go.Box(
                x=x[m].astype(str), y=shap[m], name=f"{attribute}={g}", boxpoints="all",
                jitter=0.4, pointpos=0, marker={"color": group_color(i), "size": 4},
                line={"width": 1}))
    fig.add_hline(y=0, line={"color": "#999", "width": 1})
    fig.update_xaxes(title=feature, type=None if numeric else "category")
    fig.update_yaxes(title=f"SHAP of {feature}{' (' + output + ')' if output else ''}")
    kw = {} if numeric else {"boxmode": "overlay"}
    return _layout(fig, height=360, title=title, **kw)


def build_group_attribution_figure(by_group: dict, order, features, *, attribute: str,
                                   highlight=(), output: str = "", title=None):
    """Mean SHAP of each feature within each group (horizontal grouped bars): which
    features push which group toward the negative or the positive outcome."""
    import plotly.graph_objects as go

    fig = go.Figure()
    feats = list(features)
    labels = [short(f) + (" ●" if f in highlight else "") for f in feats]
    for i, g in enumerate(order):
        if g not in by_group:
            continue
        fig.add_trace(go.Bar(
            y=labels, x=[by_group[g].get(f) for f in feats], orientation="h",
            name=f"{attribute}={g}", marker={"color": group_color(i)},
            hovertemplate=f"{attribute}={g}<br>%{{y}}: mean SHAP %{{x:+.4f}}<extra></extra>"))
    fig.add_vline(x=0, line={"color": "#999", "width": 1})
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(labels)), automargin=True)
    fig.update_xaxes(title=f"mean SHAP within the group{' (' + output + ')' if output else ''}")
    return _layout(fig, height=max(300, 18 * len(feats) * max(1, len(order)) // 2 + 140),
                   title=title, barmode="group")
