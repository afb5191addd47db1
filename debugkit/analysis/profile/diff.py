"""Two profiles compared: per function and as a flame tree of the differences.
"""

from __future__ import annotations

import numpy as np

from .flame import DEFAULT_FOLD, _build_trie, _tree_frame
from .functions import compute_function_table
from .selection import Selection, select


def _joint(base, new, base_threads, new_threads):
    """Both selections keyed by one function table (name, file)."""
    a = select(base, base_threads, "function")
    b = select(new, new_threads, "function")
    keys: dict[tuple[str, str], int] = {}
    maps = []
    for sel in (a, b):
        m = np.array([keys.setdefault((n, f), len(keys)) for n, f in zip(sel.key_name, sel.key_file)],
                     dtype=np.int64)
        maps.append(m)
    names = [k[0] for k in keys]
    files = [k[1] for k in keys]
    return a, b, maps, names, files


def compute_profile_diff(base, new, base_threads=None, new_threads=None):
    """Functions whose share of the samples changed from ``base`` to ``new``.

    Shares are compared (not seconds), so profiles of different lengths compare fairly.

    Returns
    -------
    DataFrame with columns ``name``, ``file``, ``base_self_fraction``,
    ``new_self_fraction``, ``self_delta`` (new - base), ``base_total_fraction``,
    ``new_total_fraction``, ``total_delta``, ``base_self_s``, ``new_self_s``, sorted
    by ``self_delta`` descending (what got slower first).
    """
    import pandas as pd

    tables = []
    for prof, th in ((base, base_threads), (new, new_threads)):
        t = compute_function_table(prof, th, by="function")
        tables.append(t.set_index(["name", "file"])[["self_fraction", "total_fraction", "self_s"]])
    a, b = tables
    j = a.add_suffix("_base").join(b.add_suffix("_new"), how="outer").fillna(0.0)
    df = pd.DataFrame({
        "name": [k[0] for k in j.index], "file": [k[1] for k in j.index],
        "base_self_fraction": j["self_fraction_base"].to_numpy(),
        "new_self_fraction": j["self_fraction_new"].to_numpy(),
        "base_total_fraction": j["total_fraction_base"].to_numpy(),
        "new_total_fraction": j["total_fraction_new"].to_numpy(),
        "base_self_s": j["self_s_base"].to_numpy(), "new_self_s": j["self_s_new"].to_numpy(),
    })
    df["self_delta"] = df["new_self_fraction"] - df["base_self_fraction"]
    df["total_delta"] = df["new_total_fraction"] - df["base_total_fraction"]
    cols = ["name", "file", "base_self_fraction", "new_self_fraction", "self_delta",
            "base_total_fraction", "new_total_fraction", "total_delta", "base_self_s", "new_self_s"]
    return df[cols].sort_values(["self_delta", "total_delta", "name"], ascending=[False, False, True],
                                kind="stable").reset_index(drop=True)


def compute_diff_tree(base, new, base_threads=None, new_threads=None, min_fraction: float = DEFAULT_FOLD):
    """The differential flame tree: the new profile's tree (by function), each node with
    its share in both profiles.

    Returns
    -------
    DataFrame as :func:`compute_flame_tree` (``samples``/``fraction`` of the new profile)
    plus ``base_samples``, ``base_fraction`` and ``delta`` (``fraction - base_fraction``:
    positive where the new profile spends a larger share). Nodes only in the base profile
    have no samples in the new one and are left out (see :func:`compute_profile_diff`).
    """
    a, b, maps, names, files = _joint(base, new, base_threads, new_threads)
    keys_flat = np.concatenate([maps[0][a.keys_flat] if len(a.keys_flat) else np.zeros(0, np.int64),
                                maps[1][b.keys_flat] if len(b.keys_flat) else np.zeros(0, np.int64)])
    offsets = np.concatenate([a.offsets, a.offsets[-1] + b.offsets[1:]])
    na, nb = len(a.offsets) - 1, len(b.offsets) - 1
    values = np.zeros((na + nb, 3))
    values[na:, 0] = b.samples
    values[na:, 1] = b.weight_s
    values[:na, 2] = a.samples
    parent, key, depth, total, selfv = _build_trie(keys_flat, offsets, values, len(names))
    sel = Selection(keys_flat, offsets, values[:, 0], values[:, 1], names, files, [None] * len(names),
                    b.total_samples, b.total_weight_s)
    # Fold by the new profile's samples; nodes with no new samples are dropped by it too.
    total_new = total.copy()
    tree = _tree_frame(parent, key, depth, total_new, selfv, sel, min_fraction, "all",
                       extra={"base_samples": 2})
    tree = tree[tree["samples"] > 0].reset_index(drop=True) if len(tree) > 1 else tree
    tree["base_fraction"] = tree["base_samples"] / max(a.total_samples, 1)
    tree["delta"] = tree["fraction"] - tree["base_fraction"]
    return tree
