"""Downsample long series for the browser while keeping what a person must see.

Each bucket of consecutive points keeps its first point, its minimum and its maximum
(so a single spike anywhere survives), and every non-finite point is kept separately
(so a NaN at step 123,457 of 1,000,000 is still drawn).
"""

from __future__ import annotations

import numpy as np


def downsample_minmax(x: np.ndarray, y: np.ndarray, max_points: int = 5000) -> np.ndarray:
    """Indices of the points to draw, sorted, at most about ``max_points`` of them
    (plus every non-finite point).

    Parameters
    ----------
    x : array
        Positions (e.g. steps), sorted ascending.
    y : array
        Values; NaN/Inf allowed.
    max_points : int
        Target number of finite points (>= 3).

    Returns
    -------
    numpy.ndarray of int64
        Indices into ``x``/``y``. The global minimum and maximum of the finite values and
        every index whose value is non-finite are always included.
    """
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    finite = np.isfinite(y)
    bad = np.flatnonzero(~finite)
    good = np.flatnonzero(finite)
    max_points = max(3, int(max_points))
    if len(good) <= max_points:
        return np.arange(n, dtype=np.int64)
    n_buckets = max(1, max_points // 3)
    yg = y[good]
    edges = np.linspace(0, len(good), n_buckets + 1).astype(np.int64)
    starts = edges[:-1]
    starts = starts[starts < len(good)]
    mins = np.minimum.reduceat(yg, starts)
    maxs = np.maximum.reduceat(yg, starts)
    # argmin/argmax within each bucket: compare against the broadcast bucket extreme.
    bucket = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(good))))
    is_min = yg == mins[bucket]
    is_max = yg == maxs[bucket]
    first_min = _first_per_bucket(np.flatnonzero(is_min), bucket)
    first_max = _first_per_bucket(np.flatnonzero(is_max), bucket)
    keep = np.concatenate([good[starts], good[first_min], good[first_max], [good[-1]], bad])
    return np.unique(keep)


def _first_per_bucket(pos: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    b = bucket[pos]
    first = np.ones(len(pos), dtype=bool)
    first[1:] = b[1:] != b[:-1]
    return pos[first]
