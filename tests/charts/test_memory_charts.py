"""Memory figures: traces, panels, capacity lines and bands, markers."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis import memsnap as ms
from debugkit.analysis.memory import GiB, MiB, compute_bands
from debugkit.charts.memory import (
    BAND_COLOR,
    build_largest_allocations_figure,
    build_leaked_sites_figure,
    build_memory_timeline_figure,
    build_segments_figure,
    build_snapshot_timeline_figure,
    byte_unit,
)
from debugkit.io.memsnap import parse_snapshot
from tests.memsnap_factory import leaky_training


def _mem(ranks=(0,), n=30, cuda=False):
    rows = []
    for r in ranks:
        for s in range(n):
            rows.append({"step": s, "rank": r, "wall_time": 1.7e9 + s, "device": f"cuda:{r}" if cuda else "cpu",
                         "allocated_bytes": (2 * GiB + s * 10 * MiB) if cuda else None,
                         "reserved_bytes": (3 * GiB) if cuda else None,
                         "peak_bytes": (2.5 * GiB + s * 10 * MiB) if cuda else None,
                         "rss_bytes": GiB + s * MiB * (r + 1)})
    df = pd.DataFrame(rows)
    for c in ("allocated_bytes", "reserved_bytes", "peak_bytes", "rss_bytes"):
        df[c] = df[c].astype("Float64").round().astype("Int64")
    return df


def _cap(ranks=(0,), device=None, host=16 * GiB):
    return pd.DataFrame({"rank": list(ranks), "device": ["x"] * len(ranks),
                         "device_capacity_bytes": pd.array([device] * len(ranks), "Int64"),
                         "host_capacity_bytes": pd.array([host] * len(ranks), "Int64")})


@pytest.mark.parametrize("n,unit", [(10, "B"), (4096, "KiB"), (5 * MiB, "MiB"), (3 * GiB, "GiB")])
def test_byte_unit(n, unit):
    assert byte_unit(n)[1] == unit


def test_cpu_run_has_one_host_panel_and_an_off_scale_note():
    fig = build_memory_timeline_figure(_mem(), compute_bands(_cap()))
    assert [t.name for t in fig.data] == ["RSS"]
    assert fig.layout.yaxis.title.text == "GiB"
    assert list(fig.layout.yaxis.range) == pytest.approx([0, (GiB + 29 * MiB) * 1.15 / GiB])
    notes = [a.text for a in fig.layout.annotations]
    assert any(t.startswith("↑ host capacity 16.0 GiB (75% band from 12.0 GiB)") for t in notes)


def test_scale_to_capacity_draws_the_line_and_band_in_range():
    fig = build_memory_timeline_figure(_mem(), compute_bands(_cap(host=2 * GiB)), scale_to_capacity=True)
    shapes = fig.layout.shapes
    rect = [s for s in shapes if s.type == "rect"]
    lines = [s for s in shapes if s.type == "line"]
    assert len(rect) == 1 and rect[0].y0 == pytest.approx(1.5) and rect[0].y1 == pytest.approx(2.0)
    assert sorted(round(s.y0, 3) for s in lines) == [1.5, 2.0]
    assert any(a.text == "host capacity 2.0 GiB" for a in fig.layout.annotations)
    assert fig.layout.yaxis.range is None


def test_cuda_run_has_gpu_and_host_panels_with_three_gpu_series():
    fig = build_memory_timeline_figure(_mem(cuda=True), compute_bands(_cap(device=80 * GiB)))
    assert [t.name for t in fig.data] == ["allocated", "reserved", "peak allocated", "RSS"]
    assert [t.line.dash for t in fig.data[:3]] == ["solid", "dash", "dot"]
    assert fig.data[0].yaxis == "y" and fig.data[3].yaxis == "y2"
    titles = [a.text for a in fig.layout.annotations]
    assert "GPU memory (CUDA caching allocator)" in titles and "Host memory (process RSS)" in titles


def test_ranks_overlaid_or_side_by_side():
    mem = _mem(ranks=(0, 1, 2))
    over = build_memory_timeline_figure(mem, None)
    assert [t.name for t in over.data] == ["RSS (rank 0)", "RSS (rank 1)", "RSS (rank 2)"]
    assert {t.xaxis for t in over.data} == {"x"}
    side = build_memory_timeline_figure(mem, None, layout="side")
    assert [t.xaxis for t in side.data] == ["x", "x2", "x3"]
    assert [a.text for a in side.layout.annotations] == [
        "Host memory (process RSS) · rank 0", "Host memory (process RSS) · rank 1",
        "Host memory (process RSS) · rank 2"]
    only = build_memory_timeline_figure(mem, None, ranks=[1])
    assert [t.name for t in only.data] == ["RSS"]


def test_wall_time_axis():
    fig = build_memory_timeline_figure(_mem(), None, x="wall_time")
    assert str(fig.data[0].x[0]).startswith("2023-11-14")  # 1.7e9 s since the epoch
    assert fig.layout.xaxis.title.text == "time"


def test_oom_marker_and_leak_trend():
    leak = {"rank": 0, "metric": "rss_bytes", "start_step": 5, "last_step": 29,
            "level_bytes": float(GiB + 29 * MiB), "bytes_per_step": float(MiB)}
    fig = build_memory_timeline_figure(
        _mem(), None, oom_failures=[{"step": 20, "rank": 0, "id": "r0-s0000020-exception",
                                     "error_type": "OutOfMemoryError"}], leaks=[leak])
    names = [t.name for t in fig.data]
    assert names == ["RSS", "leak trend: +1.0 MiB/step", "out of memory, step 20"]
    trend = fig.data[1]
    assert list(trend.x) == [5, 29]
    assert list(trend.y) == pytest.approx([(GiB + 5 * MiB) / GiB, (GiB + 29 * MiB) / GiB])
    oom = fig.data[2]
    assert list(oom.x) == [20] and "r0-s0000020-exception" in oom.hovertemplate
    assert list(oom.customdata) == ["r0-s0000020-exception"]
    assert any(s.type == "line" and s.x0 == 20 for s in fig.layout.shapes)


@pytest.fixture(scope="module")
def snap_views():
    b = leaky_training(20)
    b.oom(64 * MiB, MiB)
    snap = parse_snapshot(pickle.loads(pickle.dumps(b.snapshot())))
    sites = ms.site_labels(snap.stacks)
    return snap, sites


def test_snapshot_timeline_is_stacked_by_site(snap_views):
    snap, sites = snap_views
    tl = ms.compute_active_timeline(snap, sites=sites)
    fig = build_snapshot_timeline_figure(tl, peak=ms.find_peak(snap),
                                         oom_events=ms.compute_oom_events(snap, sites=sites))
    stacked = [t for t in fig.data if t.stackgroup == "sites"]
    assert [t.name for t in stacked] == list(tl["site"].cat.categories)
    assert fig.data[-1].name == "out of memory"
    assert fig.layout.xaxis.title.text == "seconds into the trace"
    assert any(a.text == "peak 120.0 MiB" for a in fig.layout.annotations)  # 32 + 20 x 3 + 28
    # the stack at the peak adds up to the peak
    i = int(np.argmax(np.sum([t.y for t in stacked], axis=0)))
    assert sum(t.y[i] for t in stacked) * MiB == pytest.approx(ms.find_peak(snap)["bytes"])


def test_empty_snapshot_views_say_so():
    empty_tl = pd.DataFrame({c: [] for c in ["seq", "time_s", "wall_time", "site", "bytes"]})
    assert build_snapshot_timeline_figure(empty_tl).layout.title.text == "No allocator history in this snapshot"
    assert build_largest_allocations_figure(pd.DataFrame({"size": []})).layout.title.text == "No live allocations"
    assert build_leaked_sites_figure(pd.DataFrame()).layout.title.text == "Nothing alive at the end"


def test_segment_heat_map_rows_and_hover(snap_views):
    snap, sites = snap_views
    segs, blocks = ms.compute_segments_at(snap, sites=sites)
    rows, z = ms.compute_segment_occupancy(segs, blocks, bins=10)
    fig = build_segments_figure(rows, z)
    hm = fig.data[0]
    assert np.asarray(hm.z).shape == (len(rows), 10)
    assert hm.y[0].startswith(f"{rows['address'].iloc[0]:#x} · ")
    assert np.asarray(hm.customdata).shape == (len(rows), 10, 2)
    assert "MiB: %{z:.0%} in use" in hm.hovertemplate


def test_largest_and_leaked_bars(snap_views):
    snap, sites = snap_views
    _, t = ms.compute_largest_at_peak(snap, sites=sites, n=6)
    fig = build_largest_allocations_figure(t)
    assert [tr.name for tr in fig.data] == ["train.py:10 main", "model.py:21 forward",
                                            "train.py:32 train_step"]
    lk = ms.compute_leaked_by_site(snap, sites=sites)
    fig2 = build_leaked_sites_figure(lk)
    assert list(fig2.data[0].y) == ["train.py:34 train_step", "train.py:10 main"]
    assert list(fig2.data[0].marker.color) == ["#d62728", "#1f77b4"]  # accumulating in red


def test_bands_and_failure_lines_are_set_in_one_layout_update(monkeypatch):
    """The timeline's capacity bands, capacity and warning lines and out-of-memory lines
    are layout shapes set in one update: plotly's add_hrect / add_hline / add_vline
    re-validated every shape of the layout on each call (20-30 ms of each Memory visit's
    script run before its chart). Each shape and label sits on its own subplot's axes."""
    import plotly.graph_objects as go

    def refused(*a, **k):
        raise AssertionError("a shape added one at a time")

    for name in ("add_hrect", "add_hline", "add_vline", "add_vrect", "add_shape", "add_annotation"):
        monkeypatch.setattr(go.Figure, name, refused)
    mem, cap = _mem(ranks=(0, 1), cuda=True), _cap(ranks=(0, 1), device=4 * GiB, host=2 * GiB)
    bands = compute_bands(cap, {"gpu_threshold": 0.9, "host_threshold": 0.9})
    fig = build_memory_timeline_figure(mem, bands, layout="side", scale_to_capacity=True,
                                       oom_failures=[{"step": 20, "rank": 1, "id": "f", "error_type": "OOM"}])
    # 2 panels (GPU, host) x 2 ranks: subplots 1-4, row by row
    lines = [(s.xref, s.yref, s.y0) for s in fig.layout.shapes if s.type == "line" and s.y0 == s.y1]
    assert {(x, y) for x, y, _ in lines} == {("x domain", "y"), ("x2 domain", "y2"), ("x3 domain", "y3"),
                                             ("x4 domain", "y4")}
    gpu = [y0 for x, _, y0 in lines if x == "x domain"]
    assert sorted(gpu) == pytest.approx([0.9 * 4, 4.0])  # the warning level and the capacity, in GiB
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 4 and all(s.fillcolor == BAND_COLOR and s.x0 == 0 and s.x1 == 1 for s in rects)
    oom = [(s.xref, s.yref) for s in fig.layout.shapes if s.type == "line" and s.x0 == 20 == s.x1]
    assert oom == [("x2", "y2 domain"), ("x4", "y4 domain")]  # rank 1's column, both panels
    labels = {(a.text, a.xref, a.yref) for a in fig.layout.annotations}
    assert ("GPU capacity 4.0 GiB", "x domain", "y") in labels and ("90%", "x4 domain", "y4") in labels
