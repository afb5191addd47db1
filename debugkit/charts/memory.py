"""Figures of memory: the per-step timeline and the views of a PyTorch memory snapshot.

Every builder takes already aggregated data (see :mod:`debugkit.analysis.memory` and
:mod:`debugkit.analysis.memsnap`) and returns a plotly Figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.downsample import downsample_minmax
from ..analysis.memory import fmt_bytes
from .traces import line_trace

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#7f7f7f", "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94"]
OOM_COLOR = "#d62728"
BAND_COLOR = "rgba(255, 152, 0, 0.12)"

# metric -> (label, dash, panel)
SERIES = {
    "allocated_bytes": ("allocated", "solid", "device"),
    "reserved_bytes": ("reserved", "dash", "device"),
    "peak_bytes": ("peak allocated", "dot", "device"),
    "rss_bytes": ("RSS", "solid", "host"),
}
PANEL_TITLES = {"device": "GPU memory (CUDA caching allocator)", "host": "Host memory (process RSS)"}


def byte_unit(max_bytes: float) -> tuple[float, str]:
    """(divisor, name) of the binary unit that suits values up to ``max_bytes``."""
    for div, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if max_bytes >= div:
            return float(div), name
    return 1.0, "B"


def _panels(memory: pd.DataFrame) -> list[str]:
    out = []
    if any(memory[m].notna().any() for m in ("allocated_bytes", "reserved_bytes", "peak_bytes")):
        out.append("device")
    if memory["rss_bytes"].notna().any():
        out.append("host")
    return out


def build_memory_timeline_figure(memory: pd.DataFrame, bands: pd.DataFrame | None = None, *,
                                 metrics=("allocated_bytes", "reserved_bytes", "peak_bytes",
                                          "rss_bytes"),
                                 ranks=None, x: str = "step", layout: str = "overlay",
                                 oom_failures=(), leaks=(), scale_to_capacity: bool = False,
                                 max_points: int = 3000):
    """Memory per step (or wall time) with capacity lines and warning bands.

    Parameters
    ----------
    memory : DataFrame
        :meth:`Run.memory`.
    bands : DataFrame, optional
        :func:`debugkit.analysis.memory.compute_bands`: one capacity line and one shaded
        band (warning level to capacity) per distinct capacity. Pass None to leave them
        out (the y axis then fits the data).
    metrics : sequence of str
        Columns to draw (``allocated_bytes``, ``reserved_bytes``, ``peak_bytes``,
        ``rss_bytes``); GPU series go in the top panel, RSS in the bottom one.
    ranks : sequence of int, optional
        Ranks to draw (default all).
    x : ``"step"`` or ``"wall_time"``
    layout : ``"overlay"`` (ranks in one panel) or ``"side"`` (a column per rank)
    oom_failures : sequence of dict
        Out-of-memory failure captures (``step``, ``rank``, ``id``, ``error_type``): a red
        line and marker at each one's step.
    leaks : sequence of dict
        ``memory_leak`` evidence (with ``rank`` and ``metric``): the fitted trend, dashed.
    scale_to_capacity : bool
        Fit the y axis to the capacity. By default it fits the data, and a capacity far
        above the data is named in a note at the top of the panel instead of flattening
        the curves.
    max_points : int
        Points per trace after extreme-preserving downsampling.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    df = memory if ranks is None else memory[memory["rank"].isin(list(ranks))]
    panels = [p for p in _panels(df) if any(SERIES[m][2] == p for m in metrics)] or ["host"]
    rank_list = sorted(int(r) for r in df["rank"].unique()) or [0]
    side = layout == "side" and len(rank_list) > 1
    cols = rank_list if side else [None]
    fig = make_subplots(rows=len(panels), cols=len(cols), shared_xaxes=True, shared_yaxes="rows",
                        vertical_spacing=0.12 if len(panels) > 1 else 0.05, horizontal_spacing=0.03,
                        subplot_titles=[f"{PANEL_TITLES[p]}" + (f" · rank {r}" if side else "")
                                        for p in panels for r in cols])
    shapes: list[dict] = []  # layout shapes and annotations, set at the end in one update
    notes: list[dict] = []
    peak_by_panel, data_max = {}, {}
    for p in panels:
        cols_p = [m for m in metrics if SERIES[m][2] == p and m in df]
        vmax = max([float(df[m].max()) for m in cols_p if df[m].notna().any()] + [1.0])
        data_max[p] = vmax
        if scale_to_capacity and bands is not None and len(bands[bands["kind"] == p]):
            vmax = max(vmax, float(bands.loc[bands["kind"] == p, "capacity_bytes"].max()))
        peak_by_panel[p] = byte_unit(vmax)
    multi = len(rank_list) > 1
    drawn = [m for m in metrics if m in df]
    points = sum(min(int(n), max_points) for n in df[drawn].notna().groupby(df["rank"]).sum().to_numpy().ravel())
    line = line_trace(points)
    for pi, p in enumerate(panels):
        div, unit = peak_by_panel[p]
        for ci, col_rank in enumerate(cols):
            for ri, rank in enumerate(rank_list):
                if side and rank != col_rank:
                    continue
                g = df[df["rank"] == rank].sort_values(x)
                color = PALETTE[ri % len(PALETTE)]
                for m in metrics:
                    label, dash, panel = SERIES[m]
                    if panel != p or m not in g or not g[m].notna().any():
                        continue
                    gg = g[g[m].notna()]
                    xv = gg[x].to_numpy()
                    yv = gg[m].astype("float64").to_numpy()
                    idx = downsample_minmax(np.arange(len(xv)), yv, max_points)
                    xs = pd.to_datetime(xv[idx], unit="s") if x == "wall_time" else xv[idx]
                    name = f"{label} (rank {rank})" if multi else label
                    fig.add_trace(line(
                        x=xs, y=yv[idx] / div, mode="lines", name=name,
                        line={"color": color, "dash": dash, "width": 1.6},
                        legendgroup=f"r{rank}",
                        customdata=gg["step"].to_numpy()[idx],
                        hovertemplate=f"{name}<br>step %{{customdata}}<br>%{{y:.3f}} {unit}<extra></extra>"),
                        row=pi + 1, col=ci + 1)
                for leak in leaks:
                    if leak.get("rank") != rank or SERIES.get(leak.get("metric"), ("", "", ""))[2] != p:
                        continue
                    s0, s1 = leak["start_step"], leak["last_step"]
                    y1 = leak["level_bytes"]
                    y0 = y1 - leak["bytes_per_step"] * (s1 - s0)
                    if x == "step":
                        fig.add_trace(go.Scatter(
                            x=[s0, s1], y=[y0 / div, y1 / div], mode="lines",
                            line={"color": OOM_COLOR, "dash": "dash", "width": 2},
                            name=f"leak trend: +{fmt_bytes(leak['bytes_per_step'])}/step"
                                 + (f" (rank {rank})" if multi else ""),
                            hovertemplate=(f"leak from step {s0}: +{fmt_bytes(leak['bytes_per_step'])}"
                                           " per step<extra></extra>")),
                            row=pi + 1, col=ci + 1)
            ax = _axes(pi * len(cols) + ci + 1)
            _add_bands(shapes, notes, bands, p, div, side, col_rank, ax)
            off = _off_scale(bands, p, side, col_rank, data_max[p]) if not scale_to_capacity else None
            if off is not None:
                fig.update_yaxes(range=[0, data_max[p] * 1.15 / div], row=pi + 1, col=ci + 1)
                what = "GPU" if p == "device" else "host"
                notes.append({
                    "text": (f"↑ {what} capacity {fmt_bytes(off['capacity_bytes'])} "
                             f"({off['threshold']:.0%} band from {fmt_bytes(off['warn_bytes'])}) "
                             "is above this range"),
                    "xref": f"{ax[0]} domain", "yref": f"{ax[1]} domain",
                    "x": 0.0, "y": 1.0, "xanchor": "left", "yanchor": "top", "showarrow": False,
                    "bgcolor": "rgba(255,255,255,0.85)", "font": {"size": 11, "color": "#8a5a00"}})
        fig.update_yaxes(title_text=unit, rangemode="tozero", row=pi + 1, col=1)
    for f in oom_failures:
        step = f.get("step")
        if not isinstance(step, int):
            continue
        rows_ = df[(df["rank"] == f.get("rank")) & (df["step"] == step)]
        xpos = step if x == "step" else (pd.to_datetime(rows_["wall_time"].iloc[0], unit="s")
                                         if len(rows_) else None)
        if xpos is None:
            continue
        for pi in range(len(panels)):
            for ci, col_rank in enumerate(cols):
                if side and col_rank != f.get("rank"):
                    continue
                ax = _axes(pi * len(cols) + ci + 1)
                shapes.append({"type": "line", "xref": ax[0], "x0": xpos, "x1": xpos,
                               "yref": f"{ax[1]} domain", "y0": 0, "y1": 1,
                               "line": {"color": OOM_COLOR, "dash": "dot", "width": 1.5}})
        fig.add_trace(go.Scatter(
            x=[xpos], y=[0], mode="markers+text", text=["OOM"], textposition="top center",
            marker={"symbol": "x", "size": 12, "color": OOM_COLOR},
            textfont={"color": OOM_COLOR}, name=f"out of memory, step {step}",
            customdata=[f.get("id")],  # the capture id: a click on the marker opens it
            hovertemplate=(f"step {step}, rank {f.get('rank')}: {f.get('error_type') or 'OOM'}"
                           f"<br>capture {f.get('id')}<extra></extra>")),
            row=1, col=(cols.index(f.get("rank")) + 1) if side and f.get("rank") in cols else 1)
    fig.update_xaxes(title_text="step" if x == "step" else "time", row=len(panels))
    if x == "step" and len(df) and int(df["step"].max()) - int(df["step"].min()) <= 10:
        fig.update_xaxes(dtick=1)  # a short run: whole steps only
    # the bands' and failures' lines as layout shapes, set in one update: plotly's
    # add_hline / add_hrect / add_vline re-validate every shape of the layout on each call
    # (20-30 ms of each Memory visit's script run before its chart, warm or cold)
    fig.update_layout(height=300 * len(panels) + 80, margin={"l": 60, "r": 20, "t": 40, "b": 40},
                      legend={"orientation": "h", "y": -0.12}, hovermode="closest",
                      shapes=shapes, annotations=list(fig.layout.annotations) + notes)
    return fig


def _axes(k: int) -> tuple[str, str]:
    """The x and y axis names of make_subplots' ``k``-th subplot (row by row, from 1)."""
    return ("x", "y") if k == 1 else (f"x{k}", f"y{k}")


def _off_scale(bands, panel, side, col_rank, data_max: float):
    """The lowest band of a panel when even its warning level is far above the data."""
    if bands is None or not len(bands):
        return None
    b = bands[bands["kind"] == panel]
    if side:
        b = b[b["rank"] == col_rank]
    if not len(b):
        return None
    low = b.sort_values("warn_bytes").iloc[0]
    return low if low["warn_bytes"] > 1.3 * data_max else None


def _add_bands(shapes: list, notes: list, bands, panel, div, side, col_rank, ax) -> None:
    """A panel's warning bands (shaded from the warning level to capacity), capacity lines
    and their labels, appended to ``shapes`` and ``notes`` (layout shapes and annotations
    on the subplot whose axes are ``ax``)."""
    if bands is None or not len(bands):
        return
    b = bands[bands["kind"] == panel]
    if side:
        b = b[b["rank"] == col_rank]
    seen = set()
    xd, y = f"{ax[0]} domain", ax[1]
    for _, r in b.sort_values("capacity_bytes").iterrows():
        cap = r["capacity_bytes"]
        if cap in seen:
            continue
        seen.add(cap)
        what = "GPU" if panel == "device" else "host"
        warn, top = r["warn_bytes"] / div, cap / div
        shapes += [
            {"type": "rect", "xref": xd, "x0": 0, "x1": 1, "yref": y, "y0": warn, "y1": top,
             "fillcolor": BAND_COLOR, "line": {"width": 0}},
            {"type": "line", "xref": xd, "x0": 0, "x1": 1, "yref": y, "y0": top, "y1": top,
             "line": {"color": "#555", "width": 1.5}},
            {"type": "line", "xref": xd, "x0": 0, "x1": 1, "yref": y, "y0": warn, "y1": warn,
             "line": {"color": "#e69500", "width": 1, "dash": "dot"}},
        ]
        notes += [
            {"text": f"{what} capacity {fmt_bytes(cap)}", "xref": xd, "x": 0, "xanchor": "left",
             "yref": y, "y": top, "yanchor": "bottom", "showarrow": False, "font": {"size": 11}},
            {"text": f"{r['threshold']:.0%}", "xref": xd, "x": 0, "xanchor": "left",
             "yref": y, "y": warn, "yanchor": "top", "showarrow": False, "font": {"size": 10}},
        ]


# ---------------------------------------------------------------------------- snapshots
def build_snapshot_timeline_figure(timeline: pd.DataFrame, *, peak: dict | None = None,
                                   oom_events: pd.DataFrame | None = None, steps=None,
                                   title: str | None = None):
    """Active memory over the trace, stacked by allocation site.

    Parameters
    ----------
    timeline : DataFrame
        :func:`debugkit.analysis.memsnap.compute_active_timeline`.
    peak : dict, optional
        :func:`debugkit.analysis.memsnap.find_peak`, marked with a line.
    oom_events : DataFrame, optional
        :func:`debugkit.analysis.memsnap.compute_oom_events`, marked in red.
    steps : array-like, optional
        The training step at each sample moment (same order as the timeline's moments),
        shown on hover.
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    if not len(timeline):
        fig.update_layout(title=title or "No allocator history in this snapshot", height=200)
        return fig
    use_time = timeline["time_s"].notna().all()
    xcol = "time_s" if use_time else "seq"
    total = timeline.groupby("seq", sort=True)["bytes"].sum()
    div, unit = byte_unit(float(total.max()) if len(total) else 1.0)
    sites = list(timeline["site"].cat.categories)
    for i, site in enumerate(sites):
        g = timeline[timeline["site"] == site].sort_values("seq")
        custom = np.stack([g["seq"].to_numpy(),
                           np.asarray(steps, dtype=np.float64) if steps is not None and len(steps) == len(g)
                           else np.full(len(g), np.nan)], axis=-1)
        color = "#bbbbbb" if site.startswith("(") else PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Scatter(
            x=g[xcol], y=g["bytes"] / div, mode="lines", name=site, stackgroup="sites",
            line={"width": 0.5, "color": color}, customdata=custom,
            hovertemplate=(f"<b>{site}</b><br>%{{y:.3f}} {unit}<br>event %{{customdata[0]}}"
                           "<br>step %{customdata[1]}<extra></extra>")))
    if peak is not None:
        px = peak["time_s"] if use_time else peak["seq"]
        fig.add_vline(x=px, line={"color": "#333", "dash": "dot", "width": 1},
                      annotation_text=f"peak {fmt_bytes(peak['bytes'])}", annotation_position="top")
    if oom_events is not None and len(oom_events):
        xs = oom_events["time_s"] if use_time else oom_events["seq"]
        for xv in xs:
            fig.add_vline(x=xv, line={"color": OOM_COLOR, "dash": "dash", "width": 1.5})
        fig.add_trace(go.Scatter(
            x=xs, y=[0] * len(xs), mode="markers", marker={"symbol": "x", "size": 12, "color": OOM_COLOR},
            name="out of memory", customdata=np.stack([oom_events["requested_bytes"].to_numpy() / MiB,
                                                       oom_events["device_free_bytes"].to_numpy() / MiB], -1),
            hovertemplate="OOM: asked for %{customdata[0]:.1f} MiB, %{customdata[1]:.1f} MiB free"
                          "<extra></extra>"))
    fig.update_layout(title=title, height=420, margin={"l": 60, "r": 20, "t": 40 if title else 20, "b": 40},
                      xaxis_title="seconds into the trace" if use_time else "allocator event",
                      yaxis_title=f"active memory ({unit})", hovermode="closest",
                      legend={"orientation": "h", "y": -0.2, "font": {"size": 11}})
    return fig


def build_segments_figure(rows: pd.DataFrame, z: np.ndarray, *, title: str | None = None):
    """The allocator's segments as a heat map: one row per segment, its length cut in
    equal slices, colour = share of the slice in use.

    Parameters
    ----------
    rows, z
        :func:`debugkit.analysis.memsnap.compute_segment_occupancy`.
    """
    import plotly.graph_objects as go

    labels = [f"{a:#x} · {fmt_bytes(t)} · {st} · {fr / max(t, 1):.0%} free, largest free "
              f"{fmt_bytes(big)}" for a, t, st, fr, big in
              zip(rows["address"].tolist(), rows["total_size"].tolist(),
                  rows["segment_type"].astype(str).tolist(), rows["free_bytes"].tolist(),
                  rows["largest_free_bytes"].tolist())]
    bins = z.shape[1] if z.ndim == 2 and z.size else 1
    # Offsets of each cell in MiB, as numbers (the hover template formats them).
    totals = rows["total_size"].to_numpy(dtype=np.float64)[:, None] / MiB
    frac = np.arange(bins + 1, dtype=np.float64)[None, :] / bins
    custom = np.stack([np.broadcast_to(totals * frac[:, :-1], z.shape),
                       np.broadcast_to(totals * frac[:, 1:], z.shape)], axis=-1).round(3)
    fig = go.Figure(go.Heatmap(
        z=z.round(4), y=labels, x=np.round(np.arange(bins) / max(bins, 1) * 100, 3), zmin=0, zmax=1,
        colorscale=[[0, "#f2f2f2"], [0.001, "#c6dbef"], [1, "#08306b"]],
        colorbar={"title": "in use", "tickformat": ".0%"}, customdata=custom,
        hovertemplate="%{y}<br>%{customdata[0]:.2f}–%{customdata[1]:.2f} MiB: %{z:.0%} in use"
                      "<extra></extra>", xgap=0, ygap=2))
    fig.update_layout(title=title, height=max(220, 26 * len(rows) + 90),
                      margin={"l": 20, "r": 20, "t": 40 if title else 20, "b": 40},
                      xaxis_title="position in segment (%)", yaxis={"automargin": True})
    return fig


def build_largest_allocations_figure(table: pd.DataFrame, *, title: str | None = None):
    """The largest live allocations as horizontal bars, coloured by site."""
    import plotly.graph_objects as go

    fig = go.Figure()
    if not len(table):
        fig.update_layout(title=title or "No live allocations", height=200)
        return fig
    div, unit = byte_unit(float(table["size"].max()))
    sites = list(dict.fromkeys(table["site"].tolist()))
    labels = [f"#{i + 1} {a:#x}" for i, a in enumerate(table["addr"].tolist())]
    for k, site in enumerate(sites):
        m = (table["site"] == site).to_numpy()
        fig.add_trace(go.Bar(
            y=np.asarray(labels)[m], x=table["size"].to_numpy()[m] / div, orientation="h", name=site,
            marker_color="#bbbbbb" if site.startswith("(") else PALETTE[k % len(PALETTE)],
            customdata=np.stack([table["share"].to_numpy()[m] * 100,
                                 table["stack"].str.replace("\n", "<br>").to_numpy()[m]], -1),
            hovertemplate=(f"%{{x:.2f}} {unit} (%{{customdata[0]:.1f}} % of active)<br>"
                           "%{customdata[1]}<extra>" + site + "</extra>")))
    fig.update_layout(title=title, barmode="stack", height=max(240, 22 * len(table) + 100),
                      yaxis={"autorange": "reversed", "automargin": True},
                      xaxis_title=f"size ({unit})", margin={"l": 20, "r": 20, "t": 40 if title else 20, "b": 40},
                      legend={"orientation": "h", "y": -0.25, "font": {"size": 11}})
    return fig


def build_leaked_sites_figure(leaked: pd.DataFrame, *, top: int = 15, title: str | None = None):
    """Memory still alive at the end, by site; accumulating sites (allocated all along
    the trace and never freed) in red."""
    import plotly.graph_objects as go

    fig = go.Figure()
    if not len(leaked):
        fig.update_layout(title=title or "Nothing alive at the end", height=200)
        return fig
    t = leaked.head(int(top))
    div, unit = byte_unit(float(t["live_bytes"].max()))
    colors = np.where(t["accumulating"].to_numpy(), OOM_COLOR, "#1f77b4")
    share = t["still_alive_share"].fillna(np.nan).to_numpy() * 100
    fig.add_trace(go.Bar(
        y=t["site"], x=t["live_bytes"] / div, orientation="h", marker_color=colors,
        text=[f"{c:,} alive" for c in t["live_count"].tolist()], textposition="auto",
        customdata=np.stack([t["live_count"].to_numpy(), share,
                             t["span_share"].to_numpy() * 100,
                             t["stack"].str.replace("\n", "<br>").to_numpy()], -1),
        hovertemplate=(f"%{{x:.2f}} {unit} in %{{customdata[0]}} allocations<br>"
                       "%{customdata[1]:.0f} % of this site's traced allocations still alive<br>"
                       "made over %{customdata[2]:.0f} % of the trace<br>%{customdata[3]}"
                       "<extra></extra>"), showlegend=False))
    fig.update_layout(title=title, height=max(220, 28 * len(t) + 90),
                      yaxis={"autorange": "reversed", "automargin": True},
                      xaxis_title=f"still alive at the end ({unit})",
                      margin={"l": 20, "r": 20, "t": 40 if title else 20, "b": 40})
    return fig
