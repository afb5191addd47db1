"""One rank's gradient norms as a dense layer x step matrix (:class:`GradMatrix`), built
from :meth:`Run.grad_norms` rows by :func:`pivot_grad_norms`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import format as fmt
from ...errors import InvalidInputError
from .config import _check_columns

TOTAL = fmt.TOTAL_LAYER


@dataclass
class GradMatrix:
    """One rank's gradient norms as a dense layer x step matrix.

    Attributes
    ----------
    rank : int
    steps : ndarray of int64, shape (n_steps,)
        Logged steps, ascending, unique.
    names : list of str
        Parameter names in model order, then ``__total__`` (always the last row).
    values : ndarray of float64, shape (len(names), n_steps)
        The norms; NaN where a layer was not logged at a step (see ``present``), and the
        recorded NaN/Inf where it was.
    present : ndarray of bool, same shape
        Whether a value was logged.
    """

    rank: int
    steps: np.ndarray
    names: list
    values: np.ndarray
    present: np.ndarray

    @property
    def layers(self) -> list:
        """Parameter names without the total."""
        return self.names[:-1]

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def row(self, name: str) -> np.ndarray:
        return self.values[self.names.index(name)]

    def nonfinite(self) -> np.ndarray:
        """Bool matrix: logged and NaN/Inf."""
        return self.present & ~np.isfinite(self.values)

    def index_of_step(self, step: int) -> int:
        """Column of the logged step nearest to ``step`` (ties: the earlier one)."""
        if not self.n_steps:
            raise InvalidInputError(f"rank {self.rank}: no gradient norms were logged")
        i = int(np.searchsorted(self.steps, step))
        if i >= self.n_steps:
            return self.n_steps - 1
        if i > 0 and step - self.steps[i - 1] <= self.steps[i] - step:
            return i - 1
        return i


def _layer_codes(layer):
    """(codes, categories) of a layer column, categories in model order, total last."""
    import pandas as pd

    if isinstance(layer.dtype, pd.CategoricalDtype):
        cats = list(layer.cat.categories)
        codes = layer.cat.codes.to_numpy()
    else:
        codes, uniques = pd.factorize(layer, sort=False)
        cats = [str(u) for u in uniques]
    if TOTAL in cats and cats[-1] != TOTAL:
        t = cats.index(TOTAL)
        remap = np.arange(len(cats))
        remap[t] = len(cats) - 1
        remap[t + 1:] -= 1
        codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], codes)
        cats = [c for c in cats if c != TOTAL] + [TOTAL]
    return np.asarray(codes, dtype=np.int64), cats


def _dense_layout(s: np.ndarray, c: np.ndarray, v: np.ndarray, n_cats: int):
    """(steps, layer x step values) when the rows are whole steps holding every category
    in order, with strictly increasing steps; None otherwise (the general path)."""
    if n_cats == 0 or len(s) == 0 or len(s) % n_cats:
        return None
    n = len(s) // n_cats
    if not (c.reshape(n, n_cats) == np.arange(n_cats)).all():
        return None
    sm = s.reshape(n, n_cats)
    if not (sm == sm[:, :1]).all():
        return None
    steps = sm[:, 0].copy()
    if n > 1 and not bool(np.all(steps[1:] > steps[:-1])):
        return None
    return steps, np.ascontiguousarray(v.reshape(n, n_cats).T)


def _rank_slices(ranks):
    """``(rank, rows)`` for every rank in ascending order; ``rows`` a slice when the
    rank's rows are contiguous (as :meth:`Run.grad_norms` returns them, rank by rank),
    else the row indices in their original order. One pass, not one scan per rank
    (256 ranks x 7.7M rows were 2 s of comparisons)."""
    n = len(ranks)
    if not n:
        return []
    if bool(np.all(ranks[1:] >= ranks[:-1])):
        cut = np.flatnonzero(ranks[1:] != ranks[:-1]) + 1
        bounds = np.concatenate([[0], cut, [n]])
        return [(int(ranks[a]), slice(int(a), int(b))) for a, b in zip(bounds[:-1], bounds[1:])]
    order = np.argsort(ranks, kind="stable")
    sr = ranks[order]
    cut = np.flatnonzero(sr[1:] != sr[:-1]) + 1
    return [(int(ranks[part[0]]), part) for part in np.split(order, cut)]


def pivot_grad_norms(grads) -> dict[int, GradMatrix]:
    """Turn :meth:`Run.grad_norms` rows into one :class:`GradMatrix` per rank.

    A step logged twice (a resumed run that redid steps) keeps its last value. When no
    ``__total__`` row exists, the total is computed as the L2 norm of the layers at
    steps where every layer was logged.

    Parameters
    ----------
    grads : DataFrame
        Columns ``step``, ``rank``, ``layer``, ``grad_norm``.
    """
    _check_columns(grads, ["step", "rank", "layer", "grad_norm"], "gradient norms", "grad_norms")
    out: dict[int, GradMatrix] = {}
    if not len(grads):
        return out
    codes, cats = _layer_codes(grads["layer"])
    has_total = bool(len(cats)) and cats[-1] == TOTAL
    layer_cats = cats[:-1] if has_total else cats
    steps_all = grads["step"].to_numpy(dtype=np.int64)
    ranks_all = grads["rank"].to_numpy()
    vals_all = grads["grad_norm"].to_numpy(dtype=np.float64)
    for r, sel in _rank_slices(ranks_all):
        s, c, v = steps_all[sel], codes[sel], vals_all[sel]
        ok = c >= 0
        if not ok.all():
            s, c, v = s[ok], c[ok], v[ok]
        dense = _dense_layout(s, c, v, len(cats))
        if dense is not None:
            # The Recorder's layout (every step one full row of layers, in order): a
            # reshape instead of a scatter.
            steps, values = dense
            names = list(cats)
            if not has_total:
                with np.errstate(over="ignore", invalid="ignore"):
                    tot = np.sqrt(np.sum(np.square(values), axis=0))
                values = np.vstack([values, tot[None, :]])
                names.append(TOTAL)
            present = np.ones(values.shape, dtype=bool)
            out[int(r)] = GradMatrix(int(r), steps, names, values, present)
            continue
        if len(s) and bool(np.all(s[1:] >= s[:-1])):
            new = np.empty(len(s), dtype=bool)
            new[0] = True
            np.not_equal(s[1:], s[:-1], out=new[1:])
            steps = s[new]
            col = np.cumsum(new) - 1
        else:
            steps, col = np.unique(s, return_inverse=True)
        used = np.bincount(c, minlength=len(cats))[:len(cats)] > 0
        keep_layers = [i for i in range(len(layer_cats)) if used[i]]
        row_of = np.full(len(cats), -1, dtype=np.int64)
        row_of[keep_layers] = np.arange(len(keep_layers))
        n_rows = len(keep_layers) + 1
        row_of[len(cats) - 1] = n_rows - 1 if has_total else row_of[len(cats) - 1]
        values = np.full((n_rows, len(steps)), np.nan)
        present = np.zeros((n_rows, len(steps)), dtype=bool)
        rows = row_of[c]
        values[rows, col] = v
        present[rows, col] = True
        names = [layer_cats[i] for i in keep_layers] + [TOTAL]
        if not (has_total and used[len(cats) - 1]):
            full = present[:-1].all(axis=0)
            with np.errstate(over="ignore", invalid="ignore"):
                tot = np.sqrt(np.sum(np.square(values[:-1]), axis=0))
            values[-1] = np.where(full, tot, np.nan)
            present[-1] = full
        out[int(r)] = GradMatrix(int(r), steps, names, values, present)
    return out
