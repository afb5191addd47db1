"""Rolling latency percentiles, outcome counts and summaries of an inference run's
requests, on hand-checked numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis.request_windows import (
    compute_latency_windows,
    compute_outcome_counts,
    order_requests,
    place_leak_lines,
)


def _requests(latencies, outcomes=None, ranks=None, t0=1.7e9):
    n = len(latencies)
    return pd.DataFrame({
        "request": np.arange(n, dtype="int64"), "rank": ranks if ranks is not None else [0] * n,
        "wall_time": t0 + np.arange(n, dtype="float64") * 0.1,
        "latency_ms": np.asarray(latencies, dtype="float64"),
        "outcome": outcomes or ["ok"] * n, "failure_id": [None] * n})


def test_windows_are_trailing_percentiles_of_the_last_requests():
    df = _requests(list(range(1, 11)))  # 1 .. 10 ms
    w = compute_latency_windows(df, window=4, min_requests=4)
    assert w["seq"].tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert w["n"].tolist() == [4] * 7
    # the window ending at request 3 holds 1, 2, 3, 4: numpy's linear percentiles
    assert w.iloc[0][["p50_ms", "p95_ms", "p99_ms"]].tolist() == pytest.approx(
        [np.percentile([1, 2, 3, 4], q) for q in (50, 95, 99)])
    assert w.iloc[-1]["p99_ms"] == pytest.approx(np.percentile([7, 8, 9, 10], 99))


def test_a_latency_regression_moves_p99_before_p50():
    lat = [5.0] * 300 + [5.0] * 90 + [80.0] * 10 + [5.0] * 100
    w = compute_latency_windows(_requests(lat), window=200)
    at = w.set_index("seq")
    assert at.loc[399, "p50_ms"] == 5.0 and at.loc[399, "p99_ms"] == pytest.approx(80.0)
    assert at.loc[299, "p99_ms"] == 5.0


def test_points_are_thinned_but_the_last_window_is_kept():
    w = compute_latency_windows(_requests(np.arange(5000.0)), window=100, max_points=50)
    assert len(w) == 50 and w["seq"].iloc[-1] == 4999 and w["seq"].iloc[0] == 19


def test_requests_are_ordered_by_start_time_over_ranks():
    a = _requests([1.0, 2.0, 3.0], ranks=[0, 0, 0])
    b = _requests([10.0, 20.0], ranks=[1, 1], t0=1.7e9 + 0.05)
    o = order_requests(pd.concat([a, b]))
    assert o["seq"].tolist() == [0, 1, 2, 3, 4]
    assert o["latency_ms"].tolist() == [1.0, 10.0, 2.0, 20.0, 3.0]


def test_outcome_counts_per_window():
    outcomes = ["ok"] * 10
    outcomes[2] = "error"
    outcomes[3] = "fallback"
    outcomes[7] = "nonfinite"
    outcomes[8] = "error"
    df = _requests([float(i) for i in range(10)], outcomes)
    c = compute_outcome_counts(df, bins=2)
    assert c[["seq_start", "seq_end", "ok", "error", "nonfinite", "fallback", "failed"]].values.tolist() == [
        [0, 4, 3, 1, 0, 1, 2], [5, 9, 3, 1, 1, 0, 2]]


def test_no_requests():
    empty = _requests([])
    assert compute_latency_windows(empty).empty
    assert compute_outcome_counts(empty).empty


def test_a_rank_s_leak_is_placed_on_the_run_wide_request_axis():
    from debugkit.analysis.findings import Finding

    # two ranks interleaved: rank 1's requests are seq 1, 3, 5, ...
    a = _requests([1.0] * 50, ranks=[0] * 50)
    b = _requests([1.0] * 50, ranks=[1] * 50, t0=1.7e9 + 0.05)
    df = order_requests(pd.concat([a, b]))
    df["mem_after_bytes"] = pd.array([1000] * len(df), dtype="Int64")
    df["mem_kind"] = "rss"
    leak = Finding(kind="request_memory_leak", step=10, rank=1, layer=None, severity="warning",
                   message="", evidence={"mem_kind": "rss", "start_request": 10,
                                         "bytes_per_1000_requests": 2_000_000.0, "level_bytes": 5e6})
    other = Finding(kind="latency_regression", step=3, rank=0, layer=None, severity="warning",
                    message="", evidence={})
    (line,) = place_leak_lines([leak, other], df)
    assert (line["start_seq"], line["last_seq"]) == (21.0, 99.0)  # rank 1's 11th and 50th request
    # 2,000 B per rank-1 request = 1,000 B per request of the run (39 of them over 78 seqs)
    assert line["bytes_per_request"] == pytest.approx(1000.0)
    assert (line["level_bytes"], line["mem_kind"]) == (5e6, "rss")
