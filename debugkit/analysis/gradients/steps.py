"""Step details: every layer's norm at one step, the scalars and the failure capture there."""

from __future__ import annotations

import numpy as np

from ._window import _quiet
from .matrix import GradMatrix

#: The status a finding gives the layers it names at its step (over ``ok`` / ``zero``).
FINDING_STATUS = {"exploding_grad": "exploding", "vanishing_grad": "vanishing", "dead_layer": "dead"}


def compute_step_details(m: GradMatrix, step: int, *, window: int = 20, findings=()):
    """Every layer's norm at the logged step nearest to ``step``.

    Parameters
    ----------
    findings : sequence of Finding
        The run's findings: a layer that a finding of :data:`FINDING_STATUS` names at
        the step shown (its ``layer``, and for ``exploding_grad`` every layer of its
        ``evidence["layers"]``) gets that status instead of ``ok``, so the table agrees
        with the finding it was opened from.

    Returns
    -------
    (int, DataFrame)
        The logged step shown, and a frame with columns ``layer`` (model order, total
        last), ``grad_norm``, ``trailing_median`` (of the previous ``window`` logged
        steps), ``ratio`` (norm / trailing median), ``status`` (``ok``, ``nan``, ``inf``,
        ``zero``, ``missing``, ``exploding``, ``vanishing``, ``dead``).
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
    shown = int(m.steps[j])
    status = status.astype(object)
    row = {name: i for i, name in enumerate(m.names)}
    for f in findings:
        label = FINDING_STATUS.get(getattr(f, "kind", None))
        if label is None or f.step != shown or (f.rank is not None and f.rank != m.rank):
            continue
        named = [f.layer] if f.layer else []
        if f.kind == "exploding_grad":
            named += list((f.evidence or {}).get("layers") or {})
        for name in named:
            i = row.get(name)
            if i is not None and status[i] in ("ok", "zero"):
                status[i] = label
    return shown, pd.DataFrame({"layer": m.names, "grad_norm": v, "trailing_median": med,
                                "ratio": ratio, "status": status.astype(str)})


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
