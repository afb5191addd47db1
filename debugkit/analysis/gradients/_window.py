"""Helpers the detectors share: trailing-window medians, runs of True, number formatting.

All windows count *logged* steps (rows)."""

from __future__ import annotations

import math

import numpy as np

from ...errors import MissingDependencyError


def _bn():
    try:
        import bottleneck
    except ImportError as exc:  # pragma: no cover - it is a requirement
        raise MissingDependencyError("bottleneck", "The gradient detectors") from exc
    return bottleneck


def _fmt(v: float) -> str:
    if v is None:
        return "—"
    if not math.isfinite(v):
        return str(v)
    return f"{v:.3g}"


def _jsonable(v: float):
    """A float for JSON evidence: finite floats as floats, NaN/Inf as 'nan'/'inf'/'-inf'."""
    v = float(v)
    return v if math.isfinite(v) else str(v)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end_exclusive) of each run of True in a 1-d bool array."""
    if not len(mask):
        return []
    m = np.concatenate([[False], mask.astype(bool), [False]])
    d = np.flatnonzero(m[1:] != m[:-1])
    return list(zip(d[0::2].tolist(), d[1::2].tolist()))


def _sustained(cond: np.ndarray, window: int) -> np.ndarray:
    """For each row of a bool matrix, True at column t when cond holds on t-window+1..t."""
    out = np.zeros_like(cond)
    if cond.shape[1] < window:
        return out
    rows = np.flatnonzero(np.count_nonzero(cond, axis=1) >= window)  # only rows that can
    if not len(rows):
        return out
    sub = cond[rows]
    c = np.cumsum(sub, axis=1, dtype=np.int32)
    prev = np.concatenate([np.zeros((len(rows), 1), np.int32), c[:, :-window]], axis=1)
    out[rows, window - 1:] = (c[:, window - 1:] - prev) == window
    return out


def _effective_window(n_steps: int, window: int, min_steps: int) -> int | None:
    if n_steps >= window:
        return window
    if n_steps >= min_steps:
        return n_steps
    return None


def _window_medians(x: np.ndarray, rows: np.ndarray, cols: np.ndarray, window: int,
                    min_count: int) -> np.ndarray:
    """Median of the ``window`` values before ``x[rows[k], cols[k]]`` (NaN ignored; NaN
    when fewer than ``min_count``), for a few cells only."""
    from numpy.lib.stride_tricks import sliding_window_view

    if not len(rows):
        return np.zeros(0)
    window = max(1, min(window, x.shape[-1]))
    pad = np.concatenate([np.full((x.shape[0], window), np.nan), x], axis=1)
    win = sliding_window_view(pad, window, axis=1)[rows, cols]  # pad[c:c+w] = x[c-w:c]
    with _quiet():
        med = np.nanmedian(win, axis=1)
    med[np.count_nonzero(np.isfinite(win), axis=1) < min(min_count, window)] = np.nan
    return med


def _trailing_jumps(v: np.ndarray, sig: np.ndarray, window: int, min_count: int,
                    factor: float) -> np.ndarray:
    """Bool mask of ``sig & (v >= factor x median(previous window))``.

    The median is exact, but computed only where the jump is possible at all: a value
    below ``factor`` x the window's minimum cannot be ``factor`` x its median (the
    median is at least the minimum), and on healthy runs that cheap moving minimum rules
    out almost every cell.
    """
    bn = _bn()
    prev_min = np.empty_like(v)
    prev_min[:, :1] = np.nan
    if v.shape[1] > 1:  # the minimum of the previous w values, ending one step back
        w = max(1, min(window, v.shape[1] - 1))
        prev_min[:, 1:] = bn.move_min(v[:, :-1], w, min_count=1, axis=-1)
    with np.errstate(invalid="ignore"):
        np.multiply(prev_min, factor, out=prev_min)
        cand = sig & (v >= prev_min)
    del prev_min
    if np.count_nonzero(cand) > 0.05 * v.size:
        med = _trailing_median(v, window, min_count)
        with np.errstate(invalid="ignore", divide="ignore"):
            return cand & (med > 0) & (v / med >= factor)
    r, c = np.nonzero(cand)
    med = _window_medians(v, r, c, window, min_count)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (med > 0) & (v[r, c] / med >= factor)
    jump = np.zeros(v.shape, dtype=bool)
    jump[r[ok], c[ok]] = True
    return jump


def _trailing_median(x: np.ndarray, window: int, min_count: int) -> np.ndarray:
    """Median of the previous ``window`` values (not including the current one), per row,
    ignoring NaN; NaN where fewer than ``min_count`` values exist."""
    bn = _bn()
    window = max(1, min(window, x.shape[-1]))  # bottleneck refuses a window longer than x
    med = bn.move_median(x, window, min_count=min(min_count, window), axis=-1)
    out = np.full_like(med, np.nan)
    out[..., 1:] = med[..., :-1]
    return out


class _quiet:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *a):
        return self._w.__exit__(*a)
