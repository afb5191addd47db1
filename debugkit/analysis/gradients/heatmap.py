"""Layer x step-bin summary of a :class:`~.matrix.GradMatrix` for the heatmap."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import InvalidInputError
from .matrix import GradMatrix


@dataclass
class HeatmapBins:
    """Layer x step-bin summary of a :class:`GradMatrix` for the heatmap.

    Attributes
    ----------
    names : list of str
        Row names (layers in model order, ``__total__`` last).
    start_step, end_step : ndarray of int64, shape (n_bins,)
        First and last logged step of each bin.
    edges : ndarray of float64, shape (n_bins + 1,)
        Cell edges on the step axis (start steps, then last step + 1).
    max_norm : ndarray of float64, shape (n_rows, n_bins)
        Largest finite norm in the bin (NaN when it has none).
    n_nan, n_inf : ndarray of int64
        NaN and +/-Inf values in the bin.
    all_zero : ndarray of bool
        Every logged value of the bin is exactly 0.0.
    count : ndarray of int64
        Logged values in the bin.
    """

    names: list
    start_step: np.ndarray
    end_step: np.ndarray
    edges: np.ndarray
    max_norm: np.ndarray
    n_nan: np.ndarray
    n_inf: np.ndarray
    all_zero: np.ndarray
    count: np.ndarray

    @property
    def nonfinite(self) -> np.ndarray:
        return (self.n_nan + self.n_inf) > 0


def bin_edges(n_steps: int, max_bins: int) -> np.ndarray:
    """Column offsets of at most ``max_bins`` bins of (nearly) equal numbers of steps."""
    nb = max(1, min(int(max_bins), n_steps))
    return np.unique(np.linspace(0, n_steps, nb + 1).round().astype(np.int64))


def compute_heatmap_bins(m: GradMatrix, max_bins: int = 300, rows: list | None = None) -> HeatmapBins:
    """Bin a gradient matrix along steps, keeping each bin's max and any non-finite value.

    Parameters
    ----------
    m : GradMatrix
    max_bins : int
        At most this many columns, whatever the run's length.
    rows : list of str, optional
        Names to keep (default: all), in the matrix's order.
    """
    if max_bins < 1:
        raise InvalidInputError(f"max_bins={max_bins!r}: expected an integer >= 1")
    idx = list(range(len(m.names))) if rows is None else [m.names.index(r) for r in rows if r in m.names]
    names = [m.names[i] for i in idx]
    if not m.n_steps:
        z = np.zeros((len(idx), 0))
        e = np.zeros(0, np.int64)
        return HeatmapBins(names, e, e, np.zeros(0), z, z.astype(np.int64), z.astype(np.int64),
                           z.astype(bool), z.astype(np.int64))
    v = m.values[idx] if rows is not None else m.values
    p = m.present[idx] if rows is not None else m.present
    edges = bin_edges(m.n_steps, max_bins)
    starts = edges[:-1]
    shape = (len(names), len(starts))
    fin = np.isfinite(v)
    all_fin = bool(fin.all())
    mx = np.fmax.reduceat(v if all_fin else np.where(fin, v, np.nan), starts, axis=1)
    if all_fin:  # the common case: skip the NaN/Inf passes
        n_nan = n_inf = np.zeros(shape, np.int64)
    else:
        n_nan = np.add.reduceat(np.isnan(v) & p, starts, axis=1, dtype=np.int64)
        n_inf = np.add.reduceat(np.isinf(v), starts, axis=1, dtype=np.int64)
    if p.all():
        count = np.broadcast_to(np.diff(edges)[None, :], shape).astype(np.int64)
    else:
        count = np.add.reduceat(p, starts, axis=1, dtype=np.int64)
    zero = v == 0
    nz = np.add.reduceat(p & zero, starts, axis=1, dtype=np.int64) if zero.any() else np.zeros(shape, np.int64)
    start_step = m.steps[starts]
    end_step = m.steps[edges[1:] - 1]
    cell_edges = np.append(start_step, end_step[-1] + 1).astype(np.float64)
    return HeatmapBins(names, start_step, end_step, cell_edges, mx, n_nan, n_inf,
                       (count > 0) & (nz == count), count)
