"""Inference-run figures: latency percentiles, outcome bars, memory per request with
the leak's projection to the warning level."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis.memory import GiB, MiB
from debugkit.analysis.request_windows import compute_latency_windows, compute_outcome_counts, order_requests
from debugkit.charts.requests import (
    build_latency_figure,
    build_outcome_figure,
    build_request_memory_figure,
    project_leak,
)


def _requests(n=400, leak=0, kind="rss"):
    outcome = ["ok"] * n
    fid = [None] * n
    if n > 120:
        outcome[50] = "error"
        outcome[120] = "fallback"
        fid[50] = "r0-000-req0000050-error"
    return order_requests(pd.DataFrame({
        "request": np.arange(n), "rank": 0, "wall_time": 1.7e9 + np.arange(n) * 0.01,
        "latency_ms": np.r_[np.full(n // 2, 5.0), np.full(n - n // 2, 9.0)],
        "outcome": outcome, "failure_id": fid, "mem_kind": kind,
        "mem_after_bytes": pd.array(GiB + np.arange(n) * leak, dtype="Int64")}))


def test_latency_figure_draws_percentiles_and_marks_failed_requests():
    df = _requests()
    fig = build_latency_figure(df, compute_latency_windows(df, window=100))
    names = [t.name for t in fig.data]
    assert names == ["request latency", "p50", "p95", "p99", "error", "fallback taken"]
    p50 = fig.data[1]
    assert list(p50.x)[-1] == 399 and list(p50.y)[-1] == 9.0
    err = fig.data[4]
    assert list(err.x) == [50] and list(err.customdata) == ["r0-000-req0000050-error"]
    assert fig.layout.xaxis.title.text == "request"
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.title.text == "Latency: rolling percentiles over 100 requests"


def test_outcome_bars_stack_errors_and_fallbacks():
    fig = build_outcome_figure(compute_outcome_counts(_requests(), bins=4))
    assert [t.name for t in fig.data] == ["error", "non-finite output", "fallback taken"]
    assert list(fig.data[0].y) == [1, 0, 0, 0] and list(fig.data[2].y) == [0, 1, 0, 0]
    assert fig.layout.barmode == "stack"


def test_projection_of_a_leak_to_the_warning_level():
    leak = {"last_seq": 999, "level_bytes": 2 * GiB, "bytes_per_request": MiB}
    assert project_leak(leak, 3 * GiB) == pytest.approx(999 + 1024)
    assert project_leak(dict(leak, bytes_per_request=0), 3 * GiB) is None
    assert project_leak(leak, None) is None
    assert project_leak(leak, GiB) == 999  # already above it


def test_memory_figure_projects_the_leak_to_the_host_threshold():
    df = _requests(n=1000, leak=MiB)
    bands = pd.DataFrame([{"rank": 0, "kind": "host", "capacity_bytes": 4.0 * GiB,
                           "warn_bytes": 3.0 * GiB, "threshold": 0.75}])
    leak = {"mem_kind": "rss", "start_seq": 0, "last_seq": 999,
            "level_bytes": float(GiB + 999 * MiB), "bytes_per_request": float(MiB)}
    fig = build_request_memory_figure(df, bands, leaks=[leak])
    names = [t.name for t in fig.data]
    assert names[1] == "leak: +1000.0 MiB per 1,000 requests"
    proj = fig.data[2]
    # 3 GiB - (1 GiB + 999 MiB) = 1049 MiB left at 1 MiB per request
    assert proj.name == "projection: 75% at request 2,048"
    assert list(proj.x) == [999, pytest.approx(2048)]
    assert list(proj.y) == pytest.approx([(GiB + 999 * MiB) / GiB, 3.0])  # GiB units
    assert fig.layout.yaxis.title.text == "GiB"
    assert fig.layout.annotations[0].text == "Host memory after each request (process RSS)"
    assert any(s.y0 == pytest.approx(3.0) for s in fig.layout.shapes if s.type == "line")


def test_a_projection_far_beyond_the_run_is_named_not_drawn():
    df = _requests(n=100, leak=1, kind="cuda_allocated")
    bands = pd.DataFrame([{"rank": 0, "kind": "device", "capacity_bytes": 80.0 * GiB,
                           "warn_bytes": 64.0 * GiB, "threshold": 0.8}])
    leak = {"mem_kind": "cuda_allocated", "start_seq": 0, "last_seq": 99,
            "level_bytes": float(GiB + 99), "bytes_per_request": 1.0}
    fig = build_request_memory_figure(df, bands, leaks=[leak])
    assert [t.name for t in fig.data] == ["GPU memory", "leak: +1000 B per 1,000 requests"]
    texts = [a.text for a in fig.layout.annotations]
    assert texts[0] == "GPU memory after each request (CUDA allocated)"
    assert texts[1].startswith("at this rate 80% (64.0 GiB) is reached at request ")
    assert texts[1].endswith("far right of this range")
