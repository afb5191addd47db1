"""for_dark_theme: charts drawn for a white page stay legible on a dark one."""

from __future__ import annotations

import numpy as np
import pandas as pd

from debugkit.charts.theme import DARK_BACKGROUND, for_dark_theme


def test_the_gradient_heatmaps_white_frame_and_gaps_become_the_dark_page():
    from debugkit.analysis.gradients.heatmap import compute_heatmap_bins
    from debugkit.analysis.gradients.layers import group_rows
    from debugkit.analysis.gradients.matrix import pivot_grad_norms
    from debugkit.charts.gradients import build_grad_heatmap_figure

    df = pd.DataFrame({"step": np.repeat(np.arange(20), 4), "rank": 0,
                       "layer": ["a.0.weight", "a.0.bias", "b.1.weight", "b.1.bias"] * 20,
                       "grad_norm": 1.0})
    m = pivot_grad_norms(df)[0]
    light = build_grad_heatmap_figure(compute_heatmap_bins(m, 300), groups=group_rows(m.layers))
    assert light.layout.plot_bgcolor == "white"
    dark = for_dark_theme(build_grad_heatmap_figure(compute_heatmap_bins(m, 300), groups=group_rows(m.layers)))
    assert dark.layout.plot_bgcolor == "rgba(0,0,0,0)"
    lines = [s.line.color for s in dark.layout.shapes]
    assert lines and "white" not in lines and DARK_BACKGROUND in lines
    np.testing.assert_array_equal(np.asarray(dark.data[0].z, dtype=float),
                                  np.asarray(light.data[0].z, dtype=float))  # the data as it was


def test_dark_grey_rules_turn_light_and_near_white_blocks_dark():
    from debugkit.charts.theme import dark_color

    assert dark_color("#F2F2F2") == "#2f2f2f" and dark_color("#DDDDDD") == "#4a4a4a"  # flamegraph blocks
    assert dark_color("#4C78A8") == "#4C78A8"  # data colours kept
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1], line={"color": "#444"}))
    fig.add_vline(x=0.5, line={"color": "#444"})
    fig.add_annotation(x=0, y=0, text="a", font={"color": "#555"})
    d = for_dark_theme(fig)
    assert d.data[0].line.color == "#bbbbbb" and d.layout.shapes[0].line.color == "#bbbbbb"
    assert d.layout.annotations[0].font.color == "#b0b0b0"


def test_the_memory_charts_capacity_note_is_dark_with_light_text():
    from debugkit.charts.memory import build_memory_timeline_figure

    mem = pd.DataFrame({"step": np.arange(10), "rank": 0, "wall_time": np.arange(10.0),
                        "allocated_bytes": np.nan, "reserved_bytes": np.nan, "peak_bytes": np.nan,
                        "rss_bytes": 1e8 + 1e6 * np.arange(10)})
    bands = pd.DataFrame({"rank": [0], "kind": ["host"], "capacity_bytes": [64e9], "warn_bytes": [48e9],
                          "threshold": [0.75]})
    light = build_memory_timeline_figure(mem, bands, metrics=["rss_bytes"])
    notes = [a for a in light.layout.annotations if "above this range" in (a.text or "")]
    assert notes and notes[0].bgcolor == "rgba(255,255,255,0.85)"
    dark = for_dark_theme(light)
    note = next(a for a in dark.layout.annotations if "above this range" in (a.text or ""))
    assert note.bgcolor == "rgba(23,22,20,0.85)" and note.font.color == "#e0a040"
