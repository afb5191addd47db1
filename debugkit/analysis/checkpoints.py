"""Checkpoint analyses: how much each layer's weights moved between checkpoints, where
weights went non-finite, and which layers never moved.

DataFrames in (from :func:`debugkit.checkpoints.read_weight_stats` and
:func:`~debugkit.checkpoints.read_checkpoint_diff`), results out; no file I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class ChangeMatrix:
    """Relative weight change, layer (rows) x checkpoint (columns).

    ``rel[i, j]`` is ``||w_j - w_{j-1}|| / ||w_{j-1}||`` of layer ``i`` (NaN in the first
    column, where a tensor is new, or where either side is non-finite); ``nonfinite[i, j]``
    is True where checkpoint ``j`` holds NaN/Inf in layer ``i``; ``norm`` the weight norm.
    """

    layers: list
    labels: list
    steps: list
    rel: np.ndarray
    norm: np.ndarray
    nonfinite: np.ndarray
    unchanged: np.ndarray


def order_layers(names, model_order=None) -> list:
    """``names`` in the model's order (``model_order``, e.g. the run's layer list), the
    rest (buffers, unknown names) after them in their own order."""
    pos = {k: i for i, k in enumerate(model_order or [])}
    names = list(dict.fromkeys(names))
    return sorted(names, key=lambda k: (pos.get(k, len(pos)), names.index(k)))


def compute_change_matrix(stats: pd.DataFrame, model_order=None) -> ChangeMatrix:
    """The layer x checkpoint matrices drawn by the Checkpoints page heatmap."""
    if not len(stats):
        e = np.zeros((0, 0))
        return ChangeMatrix([], [], [], e, e, e.astype(bool), e.astype(bool))
    layers = order_layers(stats["layer"], model_order)
    cps = stats.drop_duplicates("order").sort_values("order")
    labels, steps = cps["checkpoint"].tolist(), cps["step"].tolist()
    li = {k: i for i, k in enumerate(layers)}
    shape = (len(layers), len(labels))
    rel = np.full(shape, np.nan)
    norm = np.full(shape, np.nan)
    bad = np.zeros(shape, bool)
    unchanged = np.zeros(shape, bool)
    r = stats["layer"].map(li).to_numpy()
    c = stats["order"].to_numpy()
    norm[r, c] = stats["norm"].to_numpy()
    bad[r, c] = (stats["nan_count"].to_numpy() + stats["inf_count"].to_numpy()) > 0
    delta = np.full(shape, np.nan)
    delta[r, c] = stats["delta_norm"].to_numpy()
    unchanged[r, c] = ~stats["changed"].to_numpy() & (c > 0)
    prev = np.concatenate([np.full((len(layers), 1), np.nan), norm[:, :-1]], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(prev > 0, delta / prev, np.where(delta == 0, 0.0, np.nan))
    rel[:, 0] = np.nan
    return ChangeMatrix(layers, labels, steps, rel, norm, bad, unchanged)


def detect_first_nonfinite(stats: pd.DataFrame, model_order=None) -> pd.DataFrame:
    """Per layer, the first checkpoint holding NaN/Inf in it.

    Returns
    -------
    DataFrame ``layer``, ``checkpoint``, ``step``, ``nan_count``, ``inf_count``, earliest
    checkpoint first (model order within one); empty when every checkpoint is finite.
    """
    cols = ["layer", "checkpoint", "step", "nan_count", "inf_count"]
    if not len(stats):
        return pd.DataFrame(columns=cols)
    bad = stats[(stats["nan_count"] + stats["inf_count"]) > 0].sort_values("order", kind="stable")
    first = bad.drop_duplicates("layer")
    pos = {k: i for i, k in enumerate(order_layers(first["layer"], model_order))}
    first = first.assign(_pos=first["layer"].map(pos)).sort_values(["order", "_pos"], kind="stable")
    return first[cols].reset_index(drop=True)


def compute_movement(diff: pd.DataFrame, model_order=None) -> dict:
    """Summary of a two-checkpoint comparison.

    Returns
    -------
    dict with ``moved``: DataFrame of the tensors that changed, largest relative change
    first; ``never_moved``: list of tensor names bit-identical in both (model order);
    ``nonfinite``: names non-finite in the second; ``only_a`` / ``only_b``: names present
    in one checkpoint only; ``total_rel_change``: ``||b - a|| / ||a||`` over all
    comparable tensors.
    """
    both = diff[(diff["shape_a"] != "") & (diff["shape_b"] != "")]
    moved = both[both["changed"]].sort_values("rel_change", ascending=False, na_position="first")
    still = order_layers(both.loc[~both["changed"], "layer"], model_order)
    ok = both[np.isfinite(both["diff_norm"]) & np.isfinite(both["norm_a"])]
    na = float(np.sqrt((ok["norm_a"] ** 2).sum()))
    total = float(np.sqrt((ok["diff_norm"] ** 2).sum()) / na) if na > 0 else float("nan")
    return {"moved": moved.reset_index(drop=True), "never_moved": still,
            "nonfinite": order_layers(diff.loc[diff["nonfinite_b"] > 0, "layer"], model_order),
            "only_a": diff.loc[diff["shape_b"] == "", "layer"].tolist(),
            "only_b": diff.loc[diff["shape_a"] == "", "layer"].tolist(),
            "total_rel_change": total}
