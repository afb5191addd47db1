"""An inference run's requests in order: rolling latency percentiles and outcome counts
per window of requests (for the Overview and Memory pages; the run's totals are
:func:`debugkit.analysis.serving.summarize_requests`).

Pure functions over :meth:`debugkit.io.run.Run.requests` (columns ``request, rank,
wall_time, latency_ms, outcome, fallback, error_type, signature, input_numel,
mem_before_bytes, mem_after_bytes, mem_kind, device, failure_id``). The x axis of every
view is ``seq``: the request's position in the run by start time (0-based, over all
ranks and writer processes), since ``request`` restarts at 0 in each writer process.
The findings (leak rate, latency regression, error rates by signature) are
:mod:`debugkit.diagnose`'s; these functions only shape the rows for drawing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Outcomes of a request, in drawing order (``ok`` last: the others are what to see).
OUTCOMES = ("error", "nonfinite", "fallback", "ok")
#: Percentiles of the rolling latency windows.
PERCENTILES = (50, 95, 99)

DEFAULTS = {
    # Requests per rolling latency window: p99 of fewer than ~100 values is the maximum
    # of a handful; a serving dashboard's usual one-minute window holds a few hundred.
    "window": 200,
    # Windows with fewer requests than this (the run's first ones) are not drawn.
    "min_requests": 20,
    # Points drawn per percentile line (evenly spaced windows; the last is always kept).
    "max_points": 600,
}


def order_requests(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests by start time with ``seq`` (int64, 0-based) as the first column
    (recomputed when ``requests`` has one already)."""
    df = requests.drop(columns=["seq"], errors="ignore").sort_values(["wall_time", "rank", "request"], kind="stable").reset_index(drop=True)
    df.insert(0, "seq", np.arange(len(df), dtype=np.int64))
    return df


def compute_latency_windows(requests: pd.DataFrame, window: int | None = None,
                            min_requests: int | None = None,
                            max_points: int | None = None) -> pd.DataFrame:
    """Latency percentiles over the trailing ``window`` requests, at evenly spaced requests.

    Returns
    -------
    DataFrame with columns ``seq`` (the window's last request), ``wall_time`` (its start,
    seconds since the epoch), ``n`` (requests in the window), ``p50_ms``, ``p95_ms``,
    ``p99_ms`` (float64; linear interpolation between the window's values, as
    ``numpy.percentile``). Failed requests count: their latency is the time the service
    spent on them.
    """
    window = int(window or DEFAULTS["window"])
    min_n = min(int(min_requests or DEFAULTS["min_requests"]), window)
    cols = ["seq", "wall_time", "n"] + [f"p{p}_ms" for p in PERCENTILES]
    df = order_requests(requests)
    lat = df["latency_ms"].astype("float64")
    if len(df) < 1:
        return pd.DataFrame(columns=cols)
    min_n = min(min_n, len(df))
    roll = lat.rolling(window, min_periods=min_n)
    out = pd.DataFrame({"seq": df["seq"], "wall_time": df["wall_time"].astype("float64"),
                        "n": roll.count().astype("float64")})
    for p in PERCENTILES:
        out[f"p{p}_ms"] = roll.quantile(p / 100.0, interpolation="linear")
    out = out[out["n"] >= min_n]
    limit = int(max_points or DEFAULTS["max_points"])
    if len(out) > limit:
        keep = np.unique(np.linspace(0, len(out) - 1, limit).round().astype(int))
        out = out.iloc[keep]
    out = out.reset_index(drop=True)
    out["n"] = out["n"].astype("int64")
    return out[cols]


def compute_outcome_counts(requests: pd.DataFrame, bins: int = 60) -> pd.DataFrame:
    """Requests of each outcome per window of consecutive requests.

    Returns
    -------
    DataFrame with columns ``seq_start``, ``seq_end`` (inclusive), ``wall_time`` (the
    window's first start), ``ok``, ``error``, ``nonfinite``, ``fallback`` (int64 counts)
    and ``failed`` (all but ``ok``); at most ``bins`` rows of equal width (the last
    may be shorter).
    """
    df = order_requests(requests)
    cols = ["seq_start", "seq_end", "wall_time", *OUTCOMES[:-1], "ok", "failed"]
    if not len(df):
        return pd.DataFrame(columns=cols)
    width = max(1, int(np.ceil(len(df) / max(1, int(bins)))))
    b = df["seq"] // width
    counts = pd.crosstab(b, df["outcome"]).reindex(columns=list(OUTCOMES), fill_value=0)
    g = df.groupby(b)
    out = pd.DataFrame({"seq_start": g["seq"].min(), "seq_end": g["seq"].max(),
                        "wall_time": g["wall_time"].min()})
    for o in OUTCOMES:
        out[o] = counts[o].astype("int64")
    out["failed"] = out["error"] + out["nonfinite"] + out["fallback"]
    return out.reset_index(drop=True)[cols]


def place_leak_lines(findings, requests: pd.DataFrame) -> list[dict]:
    """The ``request_memory_leak`` findings' fitted lines on the run-wide request axis.

    A finding (:mod:`debugkit.analysis.serving`) counts one rank's requests with a memory
    reading from 0 (``start_request``) and gives its rate per 1,000 of them; the chart's x
    axis is ``seq`` over every rank. Each line starts at the ``seq`` of the rank's
    ``start_request``-th reading and ends at its last, and its rate is spread over the
    run's requests between them (two interleaved ranks: half the rank's rate per ``seq``).

    Parameters
    ----------
    findings : list of Finding
        Any findings; only ``request_memory_leak`` ones are placed.
    requests : DataFrame
        :func:`order_requests`.

    Returns
    -------
    list of dict
        ``mem_kind``, ``start_seq``, ``last_seq``, ``level_bytes`` (the fitted level at
        the rank's last reading) and ``bytes_per_request`` (per ``seq``), as
        :func:`debugkit.charts.requests.build_request_memory_figure` takes them.
    """
    out = []
    for f in findings:
        ev = f.evidence
        if f.kind != "request_memory_leak" or ev.get("bytes_per_1000_requests") is None:
            continue
        rows = requests[(requests["rank"] == f.rank) & requests["mem_after_bytes"].notna()]
        if not len(rows):
            continue
        seqs = rows["seq"].to_numpy()
        start = min(max(int(ev.get("start_request") or 0), 0), len(seqs) - 1)
        rate = float(ev["bytes_per_1000_requests"]) / 1000.0
        seq_span = float(seqs[-1] - seqs[start])
        out.append({"mem_kind": ev.get("mem_kind"), "start_seq": float(seqs[start]),
                    "last_seq": float(seqs[-1]), "level_bytes": float(ev["level_bytes"]),
                    "bytes_per_request": (rate * (len(seqs) - 1 - start) / seq_span
                                          if seq_span > 0 else rate)})
    return out
