"""Gradient and loss detectors: NaN/Inf, explosions, vanishing and dead layers, loss spikes.

Every function here is pure: it takes the DataFrames that :meth:`debugkit.Run.grad_norms`
and :meth:`debugkit.Run.scalars` return (or the :class:`GradMatrix` built from them) and
returns findings or arrays. Thresholds come from a ``config`` dict whose keys and
defaults are :data:`DEFAULTS` (documented in ``docs/gradients.md``).

All windows count *logged* steps (rows), so a run recorded with ``log_every=10`` has a
20-step window spanning 200 training steps.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import format as fmt
from ..errors import InvalidInputError, MissingDependencyError
from .findings import Finding, sort_findings

TOTAL = fmt.TOTAL_LAYER

#: Thresholds of the detectors (override any of them through ``config``).
DEFAULTS: dict[str, Any] = {
    # exploding_grad: a norm above explode_factor x its median over the previous
    # explode_window logged steps (judged once explode_min_history of them exist) ...
    "explode_factor": 10.0,
    "explode_window": 20,
    "explode_min_history": 5,
    # ... or growing by at least growth_ratio x per logged step for growth_steps
    # consecutive steps.
    "growth_ratio": 1.5,
    "growth_steps": 5,
    # vanishing_grad: a layer's norm below vanish_abs, or below vanish_rel x the largest
    # layer norm of the same step, for vanish_window consecutive logged steps (the whole
    # run when it is shorter, if it has at least vanish_min_steps).
    "vanish_abs": 1e-7,
    "vanish_rel": 1e-4,
    "vanish_window": 50,
    "vanish_min_steps": 10,
    # dead_layer: a gradient norm of exactly 0.0 for dead_window consecutive logged steps
    # (the whole run when it is shorter, if it has at least dead_min_steps).
    "dead_window": 20,
    "dead_min_steps": 5,
    # loss_spike: a loss more than spike_mads robust standard deviations (1.4826 x the
    # median absolute step-to-step change / sqrt 2) above its median over the previous spike_window logged steps, and at least
    # spike_min_rise (a fraction) above that median.
    "spike_mads": 6.0,
    "spike_window": 50,
    "spike_min_history": 10,
    "spike_min_rise": 0.5,
    # Which scalars are losses: None means every key whose last '/'-part contains "loss".
    "loss_keys": None,
    # At most this many findings of one kind per rank (the largest are kept).
    "max_findings": 20,
}

MSG_UNKNOWN_KEY = "gradients config: unknown key {key!r}; known keys: {known}"
MSG_BAD_VALUE = "gradients config: {key}={value!r}: expected {expected}"
MSG_BAD_REGEX = "layer filter: {pattern!r} is not a valid regular expression ({detail})"
MSG_BAD_FRAME = "{what}: missing column(s) {missing}; expected the columns of Run.{method}()"

_POSITIVE = ("explode_factor", "growth_ratio", "vanish_abs", "vanish_rel", "spike_mads")
_INTS = {"explode_window": 2, "explode_min_history": 1, "growth_steps": 2, "vanish_window": 2,
         "vanish_min_steps": 2, "dead_window": 2, "dead_min_steps": 1, "spike_window": 3,
         "spike_min_history": 3, "max_findings": 1}


def resolve_config(config: dict | None) -> dict:
    """Merge ``config`` over :data:`DEFAULTS`, checking every key and value.

    Raises
    ------
    InvalidInputError
        An unknown key, or a value of the wrong type or range.
    """
    cfg = dict(DEFAULTS)
    for key, value in (config or {}).items():
        if key not in DEFAULTS:
            raise InvalidInputError(MSG_UNKNOWN_KEY.format(key=key, known=", ".join(DEFAULTS)))
        if key in _INTS:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) \
                    or float(value) != int(value) or int(value) < _INTS[key]:
                raise InvalidInputError(MSG_BAD_VALUE.format(
                    key=key, value=value, expected=f"an integer >= {_INTS[key]}"))
            value = int(value)
        elif key in _POSITIVE or key == "spike_min_rise":
            ok = isinstance(value, (int, float, np.number)) and not isinstance(value, bool) \
                and math.isfinite(float(value))
            low_ok = ok and (float(value) >= 0 if key == "spike_min_rise" else float(value) > 0)
            if not low_ok:
                raise InvalidInputError(MSG_BAD_VALUE.format(
                    key=key, value=value,
                    expected="a finite number >= 0" if key == "spike_min_rise" else "a finite number > 0"))
            value = float(value)
        elif key == "loss_keys":
            if value is not None and (isinstance(value, str) or not all(isinstance(k, str) for k in value)):
                raise InvalidInputError(MSG_BAD_VALUE.format(
                    key=key, value=value, expected="null or a list of scalar keys"))
            value = None if value is None else list(value)
        cfg[key] = value
    if cfg["growth_ratio"] <= 1:
        raise InvalidInputError(MSG_BAD_VALUE.format(key="growth_ratio", value=cfg["growth_ratio"],
                                                     expected="a number > 1"))
    if cfg["explode_factor"] <= 1:
        raise InvalidInputError(MSG_BAD_VALUE.format(key="explode_factor", value=cfg["explode_factor"],
                                                     expected="a number > 1"))
    return cfg


def _bn():
    try:
        import bottleneck
    except ImportError as exc:  # pragma: no cover - it is a requirement
        raise MissingDependencyError("bottleneck", "The gradient detectors") from exc
    return bottleneck


def _check_columns(df, columns, what, method):
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InvalidInputError(MSG_BAD_FRAME.format(what=what, missing=missing, method=method))


# =============================================================================== the matrix
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
    r0 = ranks_all[0]
    rank_list = [r0] if (ranks_all == r0).all() else sorted(int(r) for r in np.unique(ranks_all))
    for r in rank_list:
        if len(rank_list) == 1:
            s, c, v = steps_all, codes, vals_all
        else:
            sel = ranks_all == r
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


# =============================================================================== helpers
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


# =============================================================================== losses
def loss_keys(scalars, chosen: list[str] | None = None) -> list[str]:
    """The scalar keys treated as losses: ``chosen`` (those present), or every key whose
    last ``/``-part contains "loss"."""
    keys = [str(k) for k in scalars["key"].unique()] if len(scalars) else []
    if chosen is not None:
        return [k for k in chosen if k in keys]
    return sorted(k for k in keys if "loss" in k.rsplit("/", 1)[-1].lower())


def _loss_series(scalars, keys) -> dict[tuple[int, str], tuple[np.ndarray, np.ndarray]]:
    """{(rank, key): (steps, values)} sorted by step, one value per step (the last)."""
    out = {}
    if not keys or not len(scalars):
        return out
    df = scalars[scalars["key"].isin(keys)]
    for (rank, key), g in df.groupby(["rank", "key"], sort=True, observed=True):
        g = g.drop_duplicates("step", keep="last").sort_values("step", kind="stable")
        out[(int(rank), str(key))] = (g["step"].to_numpy(np.int64), g["value"].to_numpy(np.float64))
    return out


def detect_nonfinite_loss(scalars, config: dict | None = None) -> list[Finding]:
    """``nonfinite_loss``: the first step (per rank) whose loss is NaN or Inf.

    Parameters
    ----------
    scalars : DataFrame
        :meth:`Run.scalars` rows (``step``, ``rank``, ``key``, ``value``).
    """
    _check_columns(scalars, ["step", "rank", "key", "value"], "scalars", "scalars")
    cfg = resolve_config(config)
    by_rank: dict[int, list] = {}
    for (rank, key), (steps, values) in _loss_series(scalars, loss_keys(scalars, cfg["loss_keys"])).items():
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            by_rank.setdefault(rank, []).append((int(steps[i]), key, i, steps, values, bad))
    out = []
    for rank, hits in sorted(by_rank.items()):
        hits.sort()
        step, key, i, steps, values, bad = hits[0]
        prev = np.flatnonzero(~bad[:i])
        last = (int(steps[prev[-1]]), float(values[prev[-1]])) if len(prev) else (None, None)
        out.append(Finding(
            kind="nonfinite_loss", step=step, rank=rank, layer=None, severity="error",
            message=(f"Loss {key!r} became {values[i]} at step {step} on rank {rank}"
                     + (f" (it was {_fmt(last[1])} at step {last[0]})" if last[0] is not None else "")
                     + "; look at that step's gradients and batch, lower the learning rate or "
                       "clip gradients, and replay the captured step."),
            evidence={"key": key, "value": _jsonable(values[i]),
                      "keys": sorted({h[1] for h in hits if h[0] == step}),
                      "last_finite_step": last[0], "last_finite_value": last[1],
                      "nonfinite_steps": int(bad.sum())},
        ))
    return out


def detect_loss_spikes(scalars, config: dict | None = None) -> list[Finding]:
    """``loss_spike``: a loss above its trailing median by a robust multiple of the MAD.

    A step is a spike when ``loss - median > spike_mads * sigma`` and
    ``loss > median * (1 + spike_min_rise)``, over the previous ``spike_window`` finite
    values (at least ``spike_min_history``): ``median`` is their median and ``sigma`` the
    robust standard deviation of their noise, ``1.4826 * MAD(diff) / sqrt(2)`` (the
    median absolute step-to-step change, which a smooth downward trend does not inflate). Consecutive spike
    steps make one finding (its step is the first; evidence gives the peak).
    """
    _check_columns(scalars, ["step", "rank", "key", "value"], "scalars", "scalars")
    cfg = resolve_config(config)
    w, k, rise = cfg["spike_window"], cfg["spike_mads"], cfg["spike_min_rise"]
    out = []
    for (rank, key), (steps, values) in _loss_series(scalars, loss_keys(scalars, cfg["loss_keys"])).items():
        finite = np.isfinite(values)
        x, st = values[finite], steps[finite]
        if len(x) <= cfg["spike_min_history"]:
            continue
        med = _trailing_median(x, w, cfg["spike_min_history"])
        with np.errstate(invalid="ignore"):
            cand = np.flatnonzero(np.isfinite(med) & (x > med * (1 + rise)) & (x > med))
        if not len(cand):
            continue
        from numpy.lib.stride_tricks import sliding_window_view

        pad = np.concatenate([np.full(w, np.nan), x])
        win = sliding_window_view(pad, w)[cand]  # the w values before each candidate
        # The spread of the window's step-to-step changes: a smooth trend (a loss still
        # falling fast) does not inflate it the way the spread around the median would.
        mad = np.nanmedian(np.abs(np.diff(win, axis=1)), axis=1)
        scale = 1.4826 * mad / math.sqrt(2)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(scale > 0, (x[cand] - med[cand]) / scale, np.inf)
        hit = cand[z > k]
        zs = dict(zip(cand.tolist(), z.tolist()))
        if not len(hit):
            continue
        episodes = []
        start = prev = int(hit[0])
        for i in hit[1:].tolist() + [None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            idx = np.arange(start, prev + 1)
            peak = int(idx[np.argmax(x[idx])])
            after = np.flatnonzero(x[prev + 1:] <= med[start] * (1 + rise))
            episodes.append((start, prev, peak, int(st[prev + 1 + after[0]] - st[prev]) if len(after) else None))
            if i is not None:
                start = prev = i
        episodes.sort(key=lambda e: -zs[e[2]] if math.isfinite(zs[e[2]]) else -1e300)
        kept = sorted(episodes[:cfg["max_findings"]])
        for start, end, peak, recovered in kept:
            m0 = float(med[start])
            out.append(Finding(
                kind="loss_spike", step=int(st[start]), rank=rank, layer=None, severity="warning",
                # the finding's step (where the spike starts) is the step the message names first
                message=(f"Loss {key!r} spiked at step {st[start]} on rank {rank}"
                         + (f" ({end - start + 1} steps in a row, peaking at {_fmt(x[peak])} at step "
                            f"{st[peak]})" if end > start else f" to {_fmt(x[peak])}")
                         + f", {_fmt(x[peak] / m0)}x its recent median of {_fmt(m0)}"
                         + "; check that step's gradient norms and batch (an outlier or mislabelled "
                           "batch, or a learning rate too high for it)."),
                evidence={"key": key, "value": float(x[peak]), "peak_step": int(st[peak]),
                          "median": m0, "ratio": float(x[peak] / m0),
                          "robust_z": _jsonable(zs[peak]), "window": w,
                          "steps": int(end - start + 1), "recovered_after_steps": recovered,
                          "spikes_in_series": len(episodes)},
            ))
    return out


def _loss_lookup(scalars, cfg) -> dict[int, tuple[str, np.ndarray, np.ndarray]]:
    """{rank: (key, steps, values)} of the first loss key (sorted) of each rank."""
    out = {}
    for (rank, key), (steps, values) in _loss_series(scalars, loss_keys(scalars, cfg["loss_keys"])).items():
        out.setdefault(rank, (key, steps, values))
    return out


# =============================================================================== gradients
def detect_nonfinite_grad(m: GradMatrix, scalars=None, config: dict | None = None) -> list[Finding]:
    """``nonfinite_grad``: the first step whose gradient norms hold NaN/Inf.

    ``layer`` is the first affected parameter in model order (``__total__`` when only
    the total overflowed); evidence lists every affected layer and whether the loss was
    still finite at that step (a finite loss points at the backward pass).
    """
    cfg = resolve_config(config)
    bad = m.nonfinite()
    cols = np.flatnonzero(bad.any(axis=0))
    if not len(cols):
        return []
    j = int(cols[0])
    step = int(m.steps[j])
    rows = np.flatnonzero(bad[:-1, j])
    layers = [m.names[i] for i in rows] or [TOTAL]
    first = layers[0]
    loss_finite, loss_value, loss_key = None, None, None
    if scalars is not None and len(scalars):
        lk = _loss_lookup(scalars, cfg).get(m.rank)
        if lk is not None:
            loss_key, ls, lv = lk
            hit = np.flatnonzero(ls == step)
            if len(hit):
                loss_value = float(lv[hit[-1]])
                loss_finite = bool(math.isfinite(loss_value))
    vals = {m.names[i]: _jsonable(m.values[i, j]) for i in (rows if len(rows) else [len(m.names) - 1])}
    if loss_finite:
        why = (f"while the loss was still finite ({_fmt(loss_value)}): the backward pass made it; look "
               "for log/sqrt/division of zero or an overflowing custom op in those layers, and replay "
               "the step with torch.autograd.detect_anomaly")
    elif loss_finite is False:
        why = ("and the loss was already non-finite: the forward pass overflowed; lower the learning "
               "rate, clip gradients or check the inputs of that batch")
    else:
        why = "(no loss logged at that step); look at the step's batch and the learning rate"
    n_total = len(m.layers)
    where = (f"first in {first!r} ({len(rows)} of {n_total} layers)" if len(rows)
             else f"in the total only (every one of the {n_total} layers was finite: the sum of squares overflowed)")
    message = f"Gradient norms became non-finite at step {step} on rank {m.rank}, {where}, {why}."
    return [Finding(
        kind="nonfinite_grad", step=step, rank=m.rank, layer=first, severity="error",
        message=message,
        evidence={"layers": layers, "values": vals, "loss_finite": loss_finite,
                  "loss": _jsonable(loss_value) if loss_value is not None else None,
                  "loss_key": loss_key,
                  "last_finite_step": int(m.steps[j - 1]) if j > 0 else None,
                  "nonfinite_steps": int(len(cols))},
    )]


def _significant(m: GradMatrix, cfg) -> np.ndarray:
    """Bool matrix: finite values that are not negligible (above the vanishing floors)."""
    v = m.values
    with np.errstate(invalid="ignore"):
        fin = np.isfinite(v)
        lay = np.where(fin[:-1], v[:-1], -np.inf)
        rowmax = lay.max(axis=0) if lay.shape[0] else np.full(v.shape[1], -np.inf)
        sig = fin & (v >= cfg["vanish_abs"]) & (v >= cfg["vanish_rel"] * rowmax[None, :])
    return sig


def detect_exploding_grad(m: GradMatrix, config: dict | None = None) -> list[Finding]:
    """``exploding_grad``: the first step where the total or a layer's norm jumps above
    ``explode_factor`` x its trailing median, or has grown by ``growth_ratio`` x per step
    for ``growth_steps`` consecutive steps.

    Reports the first such step; ``layer`` is the parameter with the largest factor at
    that step (``__total__`` when only the total jumped). Negligible norms (below the
    vanishing floors) are never called explosions.
    """
    cfg = resolve_config(config)
    if m.n_steps < 2:
        return []
    v = np.where(np.isfinite(m.values), m.values, np.nan)
    sig = _significant(m, cfg)
    jump = _trailing_jumps(v, sig, cfg["explode_window"], cfg["explode_min_history"],
                           cfg["explode_factor"])
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = v[:, 1:] / v[:, :-1]
        up = np.zeros_like(sig)
        up[:, 1:] = (ratio >= cfg["growth_ratio"]) & sig[:, 1:] & (v[:, :-1] > 0)
    n = cfg["growth_steps"]
    grow_end = _sustained(up, n)  # True at the last step of n consecutive increases
    jump_cols = np.flatnonzero(jump.any(axis=0))
    grow_cols = np.flatnonzero(grow_end.any(axis=0))
    first_jump = int(jump_cols[0]) if len(jump_cols) else None
    # A geometric run is reported at its start (the step before its first increase).
    first_grow_end = int(grow_cols[0]) if len(grow_cols) else None
    first_grow = first_grow_end - n if first_grow_end is not None else None
    if first_jump is None and first_grow is None:
        return []
    use_jump = first_grow is None or (first_jump is not None and first_jump <= first_grow)
    if use_jump:
        j = first_jump
        rows = np.flatnonzero(jump[:, j])
        meds = _window_medians(v, rows, np.full(len(rows), j), cfg["explode_window"],
                               cfg["explode_min_history"])
        f = v[rows, j] / meds
        reason = "jump"
    else:
        j = first_grow
        end = first_grow_end
        rows = np.flatnonzero(grow_end[:, end])
        with np.errstate(invalid="ignore", divide="ignore"):
            f = v[rows, end] / v[rows, j]
        reason = "geometric"
    layer_rows = [r for r in rows if r != len(m.names) - 1]
    pick = layer_rows if layer_rows else list(rows)
    best = max(pick, key=lambda r: float(f[list(rows).index(r)]))
    best_f = float(f[list(rows).index(best)])
    name = m.names[best]
    step = int(m.steps[j])
    total_row = len(m.names) - 1
    med_total = (_window_medians(v, np.array([total_row]), np.array([j]), cfg["explode_window"],
                                 cfg["explode_min_history"])[0] if reason == "jump" else v[total_row, j])
    suggest = float(f"{2 * med_total:.2g}") if np.isfinite(med_total) and med_total > 0 else None
    flagged = {m.names[r]: round(float(ff), 3) for r, ff in zip(rows, f)}
    if reason == "jump":
        med_best = float(meds[list(rows).index(best)])
        what = (f"jumped to {_fmt(v[best, j])} at step {step} on rank {m.rank}, {_fmt(best_f)}x its median "
                f"of {_fmt(med_best)} over the previous {cfg['explode_window']} logged steps")
        evidence = {"reason": "jump", "factor": best_f, "value": float(v[best, j]),
                    "trailing_median": med_best, "window": cfg["explode_window"]}
    else:
        end_step = int(m.steps[first_grow_end])
        what = (f"grew {_fmt(best_f)}x in {n} consecutive logged steps from step {step} to {end_step} on "
                f"rank {m.rank} (at least {cfg['growth_ratio']:g}x per step)")
        evidence = {"reason": "geometric", "factor": best_f, "value": float(v[best, first_grow_end]),
                    "start_value": float(v[best, j]), "end_step": end_step, "growth_steps": n}
    advice = "lower the learning rate or add warmup, and clip with clip_grad_norm_"
    if suggest:
        advice += f"(max_norm={suggest:g})"
    later = np.flatnonzero((jump | grow_end).any(axis=0))
    evidence.update({"layers": flagged, "steps_flagged": int(len(later)),
                     "last_flagged_step": int(m.steps[later[-1]]), "suggested_max_norm": suggest})
    return [Finding(kind="exploding_grad", step=step, rank=m.rank, layer=name, severity="warning",
                    message=f"Gradient norm of {name!r} {what}; {advice}.", evidence=evidence)]


def with_lr_context(findings: list[Finding], scalars) -> list[Finding]:
    """Exploding-gradient findings that also say what the learning rate did before them
    ("lr grew 100x since step 0, from 0.1 to 10"), from the ``lr`` scalars the Recorder logs;
    the numbers go to ``evidence["lr"]``. Findings are returned unchanged without them."""
    import dataclasses

    from .scalars import describe_lr_before

    out = []
    for f in findings:
        lr = describe_lr_before(scalars, f.step, f.rank) if f.step is not None else None
        if lr is None:
            out.append(f)
            continue
        head, sep, advice = f.message.partition("; ")
        msg = f"{head} ({lr['text']}){sep}{advice}" if sep else f"{f.message} ({lr['text']})"
        out.append(dataclasses.replace(f, message=msg, evidence={**f.evidence, "lr": lr}))
    return out


def detect_vanishing_grad(m: GradMatrix, config: dict | None = None) -> list[Finding]:
    """``vanishing_grad``: layers whose norm stays below ``vanish_abs`` or below
    ``vanish_rel`` x the largest layer's norm of each step over ``vanish_window`` logged
    steps. One finding per rank names them all (``layer``: the earliest in model order).
    Layers that are exactly zero throughout are left to :func:`detect_dead_layers`."""
    cfg = resolve_config(config)
    if len(m.layers) < 1:
        return []
    w = _effective_window(m.n_steps, cfg["vanish_window"], cfg["vanish_min_steps"])
    if w is None:
        return []
    v = m.values[:-1]
    fin = np.isfinite(v) & m.present[:-1]
    lay = np.where(fin, v, -np.inf)
    rowmax = lay.max(axis=0)
    argmax = lay.argmax(axis=0)
    with np.errstate(invalid="ignore"):
        tiny = fin & ((v < cfg["vanish_abs"]) | (v < cfg["vanish_rel"] * rowmax[None, :]))
    zero = fin & (v == 0)
    sustained = _sustained(tiny, w)
    dead = _sustained(zero, _effective_window(m.n_steps, cfg["dead_window"], cfg["dead_min_steps"]) or w)
    rows = [i for i in range(len(m.layers)) if sustained[i].any()]
    hits = []
    for i in rows:
        ends = np.flatnonzero(sustained[i])
        # A layer that is exactly zero over every one of its vanishing windows is dead.
        nonzero_windows = [e for e in ends if not dead[i, e]]
        if not nonzero_windows:
            continue
        start = int(nonzero_windows[0]) - w + 1
        sel = tiny[i] & fin[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(sel, v[i] / rowmax, np.nan)
        hits.append((start, i, float(np.nanmedian(np.where(sel, v[i], np.nan))), float(np.nanmedian(ratio))))
    if not hits:
        return []
    start = min(h[0] for h in hits)
    first = min(hits, key=lambda h: h[1])
    big = int(np.bincount(argmax[np.isfinite(rowmax)], minlength=len(m.layers)).argmax())
    names = [m.names[h[1]] for h in sorted(hits, key=lambda h: h[1])]
    listing = ", ".join(repr(n) for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    message = (f"Gradients vanish in {len(names)} of {len(m.layers)} layers on rank {m.rank} from step "
               f"{int(m.steps[start])} ({listing}): the earliest, {m.names[first[1]]!r}, has a median norm "
               f"of {_fmt(first[2])}, {_fmt(first[3])} of the largest layer ({m.names[big]!r}), so those "
               "layers barely learn; use ReLU/GELU instead of sigmoid/tanh, add normalisation or "
               "residual connections, or fix the initialisation.")
    return [Finding(
        kind="vanishing_grad", step=int(m.steps[start]), rank=m.rank, layer=m.names[first[1]],
        severity="warning", message=message,
        evidence={"layers": names, "window": w, "vanish_abs": cfg["vanish_abs"],
                  "vanish_rel": cfg["vanish_rel"], "largest_layer": m.names[big],
                  "per_layer": {m.names[i]: {"first_step": int(m.steps[s]), "median_norm": mn,
                                             "median_ratio_to_largest": mr}
                                for s, i, mn, mr in sorted(hits, key=lambda h: h[1])}},
    )]


def detect_dead_layers(m: GradMatrix, config: dict | None = None) -> list[Finding]:
    """``dead_layer``: parameters whose gradient norm is exactly 0.0 for ``dead_window``
    consecutive logged steps (unused in the forward pass, detached, or frozen by mistake).
    One finding per rank names them all (``layer``: the first in model order)."""
    cfg = resolve_config(config)
    w = _effective_window(m.n_steps, cfg["dead_window"], cfg["dead_min_steps"])
    if w is None or not m.layers:
        return []
    v = m.values[:-1]
    zero = m.present[:-1] & (v == 0)
    sustained = _sustained(zero, w)
    rows = [i for i in range(len(m.layers)) if sustained[i].any()]
    if not rows:
        return []
    starts = {i: int(np.argmax(sustained[i])) - w + 1 for i in rows}
    always = [i for i in rows if zero[i].sum() == m.present[i].sum()]
    names = [m.names[i] for i in rows]
    step = int(m.steps[min(starts.values())])
    listing = ", ".join(repr(n) for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    message = (f"{len(names)} parameter(s) got an exactly-zero gradient for {w}+ consecutive logged steps "
               f"from step {step} on rank {m.rank} ({listing}): they are unused in the forward pass, cut "
               "off from the loss (a .detach() or no_grad), or their units are dead; remove them, "
               "reconnect them, or set requires_grad=False on purpose.")
    return [Finding(
        kind="dead_layer", step=step, rank=m.rank, layer=names[0], severity="warning",
        message=message,
        evidence={"layers": names, "window": w,
                  "first_zero_step": {m.names[i]: int(m.steps[starts[i]]) for i in rows},
                  "zero_in_every_logged_step": [m.names[i] for i in always]},
    )]


def detect_gradient_findings(grads, scalars, config: dict | None = None, *,
                             matrices: dict[int, GradMatrix] | None = None) -> list[Finding]:
    """Every gradient and loss finding of a run, ordered by step.

    Parameters
    ----------
    grads : DataFrame
        :meth:`Run.grad_norms` rows (not read when ``matrices`` is given).
    scalars : DataFrame
        :meth:`Run.scalars` rows.
    config : dict, optional
        Overrides of :data:`DEFAULTS`.
    matrices : dict, optional
        ``pivot_grad_norms(grads)``, when the caller already has it.
    """
    cfg = resolve_config(config)
    out: list[Finding] = []
    out += detect_nonfinite_loss(scalars, cfg)
    out += detect_loss_spikes(scalars, cfg)
    for m in (pivot_grad_norms(grads) if matrices is None else matrices).values():
        out += detect_nonfinite_grad(m, scalars, cfg)
        out += with_lr_context(detect_exploding_grad(m, cfg), scalars)
        out += detect_vanishing_grad(m, cfg)
        out += detect_dead_layers(m, cfg)
    return sort_findings(out)


# =============================================================================== heatmap bins
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


# =============================================================================== clipping what-if
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


# =============================================================================== step details
def compute_step_details(m: GradMatrix, step: int, *, window: int = 20):
    """Every layer's norm at the logged step nearest to ``step``.

    Returns
    -------
    (int, DataFrame)
        The logged step shown, and a frame with columns ``layer`` (model order, total
        last), ``grad_norm``, ``trailing_median`` (of the previous ``window`` logged
        steps), ``ratio`` (norm / trailing median), ``status`` (``ok``, ``nan``, ``inf``,
        ``zero``, ``missing``).
    """
    import pandas as pd

    j = m.index_of_step(int(step))
    lo = max(0, j - window)
    prev = np.where(np.isfinite(m.values[:, lo:j]), m.values[:, lo:j], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"), _quiet():
        med = np.nanmedian(prev, axis=1) if j > lo else np.full(len(m.names), np.nan)
        v = m.values[:, j]
        ratio = v / med
    status = np.where(~m.present[:, j], "missing",
                      np.where(np.isnan(v), "nan", np.where(np.isinf(v), "inf",
                                                             np.where(v == 0, "zero", "ok"))))
    return int(m.steps[j]), pd.DataFrame({"layer": m.names, "grad_norm": v, "trailing_median": med,
                                          "ratio": ratio, "status": status})


class _quiet:
    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *a):
        return self._w.__exit__(*a)


def scalars_at_step(scalars, step: int, rank: int) -> dict[str, float]:
    """``{key: value}`` of every scalar logged at ``step`` on ``rank`` (the last value)."""
    if not len(scalars):
        return {}
    df = scalars[(scalars["step"] == int(step)) & (scalars["rank"] == int(rank))]
    return {str(k): float(v) for k, v in zip(df["key"], df["value"])}


def nearest_failure(failures: list[dict], step: int, rank: int | None = None) -> dict | None:
    """The failure capture at or nearest to ``step`` (same rank preferred; ties: earlier)."""
    cands = [f for f in failures if isinstance(f.get("step"), int)]
    if not cands:
        return None
    same = [f for f in cands if rank is None or f.get("rank") == rank]
    pool = same or cands
    return min(pool, key=lambda f: (abs(f["step"] - int(step)), f["step"], str(f.get("id"))))


# =============================================================================== layer filter
def module_of(name: str) -> str:
    """The module that owns a parameter: its name without the last component."""
    return name.rsplit(".", 1)[0] if "." in name else ""


def module_prefixes(layers: list[str]) -> list[tuple[str, int, int]]:
    """Every module prefix of the parameter names, in model order, as
    ``(prefix, depth, n_parameters)``: a flattened module tree (``encoder`` at depth 1,
    ``encoder.layers`` at depth 2, ...)."""
    seen: dict[str, list] = {}
    for name in layers:
        parts = name.split(".")[:-1]
        for d in range(1, len(parts) + 1):
            p = ".".join(parts[:d])
            if p not in seen:
                seen[p] = [d, 0]
            seen[p][1] += 1
    return [(p, d, n) for p, (d, n) in seen.items()]


def group_rows(layers: list[str], max_groups: int = 20) -> list[tuple[str, int, int]]:
    """Group consecutive parameters by module prefix for the heatmap's separators:
    ``(prefix, first row, n rows)``, at the deepest depth giving at most ``max_groups``."""
    if not layers:
        return []
    best = None
    for depth in range(1, 1 + max((len(n.split(".")) - 1 for n in layers), default=0)):
        keys = [".".join(n.split(".")[:-1][:depth]) or n for n in layers]
        groups = []
        for i, k in enumerate(keys):
            if groups and groups[-1][0] == k:
                groups[-1][2] += 1
            else:
                groups.append([k, i, 1])
        if len(groups) <= max_groups:
            best = groups
        else:
            break
    if best is None:
        best = [["", 0, len(layers)]]  # parameters of the root module only
    return [tuple(g) for g in best]


def select_layers(layers: list[str], modules=(), regex: str | None = None) -> list[str]:
    """Parameters under any of ``modules`` (all when empty) whose name matches ``regex``
    (``re.search``; empty for all), in model order.

    Raises
    ------
    InvalidInputError
        ``regex`` is not a valid regular expression.
    """
    modules = [m for m in (modules or []) if m]
    out = list(layers)
    if modules:
        out = [n for n in out if any(n == m or n.startswith(m + ".") for m in modules)]
    if regex:
        try:
            rx = re.compile(regex)
        except re.error as exc:
            raise InvalidInputError(MSG_BAD_REGEX.format(pattern=regex, detail=exc)) from None
        out = [n for n in out if rx.search(n)]
    return out


def default_line_layers(m: GradMatrix, findings: list[Finding], candidates: list[str],
                        limit: int = 6) -> list[str]:
    """Layers to draw by default: those named by findings, then the largest by peak norm."""
    chosen = []
    for f in findings:
        if f.layer and f.layer in candidates and f.layer != TOTAL and f.layer not in chosen:
            chosen.append(f.layer)
    if len(chosen) < limit:
        idx = [m.names.index(n) for n in candidates if n in m.names and n != TOTAL]
        if idx:
            vals = np.where(np.isfinite(m.values[idx]), m.values[idx], -np.inf).max(axis=1)
            for k in np.argsort(-vals, kind="stable"):
                n = m.names[idx[k]]
                if n not in chosen:
                    chosen.append(n)
                if len(chosen) >= limit:
                    break
    order = {n: i for i, n in enumerate(m.names)}
    return sorted(chosen[:limit], key=lambda n: order.get(n, 0))
