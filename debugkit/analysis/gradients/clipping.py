"""Clipping what-if: which steps a ``clip_grad_norm_(max_norm)`` would have clipped."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import InvalidInputError
from ._window import _runs
from .heatmap import bin_edges
from .matrix import GradMatrix


@dataclass
class ClipWhatIf:
    """What ``clip_grad_norm_(max_norm)`` would have done to each logged step.

    Attributes
    ----------
    max_norm : float
    steps : ndarray of int64
        Logged steps.
    clipped : ndarray of bool
        The total norm exceeded ``max_norm`` (the gradients would have been scaled down).
    scale : ndarray of float64
        The factor ``max_norm / (total + 1e-6)`` clipped to 1 (PyTorch's formula); NaN for a
        non-finite total, which clipping cannot repair.
    nonfinite : ndarray of bool
        The total was NaN/Inf.
    """

    max_norm: float
    steps: np.ndarray
    clipped: np.ndarray
    scale: np.ndarray
    nonfinite: np.ndarray

    @property
    def fraction(self) -> float:
        return float(self.clipped.mean()) if len(self.clipped) else 0.0

    def intervals(self, max_intervals: int = 200) -> list[tuple[int, int]]:
        """Clipped stretches as (first step, last step), merged into at most
        ``max_intervals`` by coarsening (a coarse interval may include unclipped steps)."""
        if not self.clipped.any():
            return []
        runs = _runs(self.clipped)
        if len(runs) > max_intervals:
            edges = bin_edges(len(self.steps), max_intervals)
            anyc = np.logical_or.reduceat(self.clipped, edges[:-1])
            out = []
            for a, b in _runs(anyc):
                out.append((int(self.steps[edges[a]]), int(self.steps[edges[b] - 1])))
            return out
        return [(int(self.steps[a]), int(self.steps[b - 1])) for a, b in runs]


def compute_clip_whatif(m: GradMatrix, max_norm: float) -> ClipWhatIf:
    """Which steps ``torch.nn.utils.clip_grad_norm_(params, max_norm)`` would have clipped.

    PyTorch scales every gradient by ``min(1, max_norm / (total_norm + 1e-6))``, so a step
    is clipped when ``total_norm + 1e-6 > max_norm``.
    """
    try:
        max_norm = float(max_norm)
    except (TypeError, ValueError):
        raise InvalidInputError(f"max_norm={max_norm!r}: expected a positive number") from None
    if not math.isfinite(max_norm) or max_norm <= 0:
        raise InvalidInputError(f"max_norm={max_norm!r}: expected a positive number")
    total = m.values[-1]
    present = m.present[-1]
    fin = np.isfinite(total) & present
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(fin, np.minimum(1.0, max_norm / (total + 1e-6)), np.nan)
    clipped = fin & (scale < 1.0)
    return ClipWhatIf(max_norm, m.steps, clipped, scale, present & ~np.isfinite(total))
