"""The flame tree of a profile: stacks merged level by level with numpy, frames under a
fraction of the samples folded into one box; frame packages and search.
"""

from __future__ import annotations

import re

import numpy as np

from ..._fsutil import in_debugkit
from .selection import _stack_of_pos, _unique, select

DEFAULT_FOLD = 0.001  # frames under 0.1 % of the samples are folded


FOLDED_LABEL = "{n} frame{s} under {pct}"


def _build_trie(keys_flat, offsets, values: np.ndarray, n_keys: int):
    """Merge stacks into a prefix tree, level by level with numpy.

    Returns (parent, key, depth, total values [n_nodes, k], self values [n_nodes, k]);
    node 0 is the root (key -1).
    """
    n_stacks = len(offsets) - 1
    k = values.shape[1]
    lengths = np.diff(offsets)
    node_of = np.zeros(n_stacks, dtype=np.int64)
    parents, keys, depths = [np.array([-1])], [np.array([-1])], [np.array([0])]
    totals = [values.sum(axis=0, keepdims=True)]
    next_id = 1
    base = max(n_keys, 1)
    max_len = int(lengths.max()) if n_stacks else 0
    for d in range(max_len):
        alive = np.flatnonzero(lengths > d)
        sym = keys_flat[offsets[alive] + d]
        code = node_of[alive] * base + sym
        uniq, inv = np.unique(code, return_inverse=True)
        ids = next_id + np.arange(len(uniq))
        node_of[alive] = ids[inv]
        parents.append(uniq // base)
        keys.append(uniq % base)
        depths.append(np.full(len(uniq), d + 1))
        tot = np.zeros((len(uniq), k))
        np.add.at(tot, inv, values[alive])
        totals.append(tot)
        next_id += len(uniq)
    parent = np.concatenate(parents)
    key = np.concatenate(keys)
    depth = np.concatenate(depths)
    total = np.concatenate(totals)
    selfv = np.zeros_like(total)
    np.add.at(selfv, node_of, values)
    return parent, key, depth, total, selfv


def compute_flame_tree(profile, thread_ids=None, by: str = "function", min_fraction: float = DEFAULT_FOLD,
                       root_label: str = "all"):
    """The flame tree of the selected threads, frames under ``min_fraction`` folded.

    Children of a node whose samples are under ``min_fraction`` of all samples are
    merged into one ``"N frames under 0.1 %"`` node (their subtrees dropped), so the
    figure stays small; every node's samples still add up to its parent's.

    Returns
    -------
    DataFrame with columns ``node_id`` (0 = root), ``parent_id`` (-1 for the root),
    ``depth``, ``name``, ``file``, ``line`` (Int64), ``samples`` (int64: total samples
    through the node), ``self_samples``, ``weight_s``, ``fraction`` (of all samples),
    ``folded`` (int: frames merged into this node; 0 for a real frame), ``package``
    (see :func:`frame_package`). Ordered parents-before-children.
    """
    sel = select(profile, thread_ids, by)
    values = np.stack([sel.samples.astype(np.float64), sel.weight_s], axis=1)
    parent, key, depth, total, selfv = _build_trie(sel.keys_flat, sel.offsets, values, len(sel.key_name))
    return _tree_frame(parent, key, depth, total, selfv, sel, min_fraction, root_label)


def _tree_frame(parent, key, depth, total, selfv, sel, min_fraction, root_label,
                extra: dict | None = None):
    import pandas as pd

    grand = max(float(total[0, 0]), 1.0)
    threshold = min_fraction * grand
    n = len(parent)
    big = total[:, 0] >= threshold
    big[0] = True
    keep = big.copy()
    # A node is kept when it and its parent are big (ancestors of a big node are big).
    keep[1:] &= big[parent[1:]]
    small_child = ~big & (total[:, 0] > 0)
    small_child[0] = False
    small_child &= keep[np.where(parent >= 0, parent, 0)] & (parent >= 0)
    kept = np.flatnonzero(keep)
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[kept] = np.arange(len(kept))
    rows = {
        "node_id": np.arange(len(kept), dtype=np.int64),
        "parent_id": np.where(parent[kept] >= 0, new_id[np.maximum(parent[kept], 0)], -1),
        "depth": depth[kept].astype(np.int64),
        "name": [root_label if key[i] < 0 else sel.key_name[key[i]] for i in kept],
        "file": ["" if key[i] < 0 else sel.key_file[key[i]] for i in kept],
        "line": [None if key[i] < 0 else sel.key_line[key[i]] for i in kept],
        "samples": total[kept, 0],
        "self_samples": selfv[kept, 0],
        "weight_s": total[kept, 1],
        "folded": np.zeros(len(kept), dtype=np.int64),
    }
    extra_cols = {name: list(total[kept, col]) for name, col in (extra or {}).items()}
    # One folded node per parent that has small children.
    sc = np.flatnonzero(small_child)
    if len(sc):
        par = parent[sc]
        upar, inv = np.unique(par, return_inverse=True)
        cnt = np.bincount(inv)
        sums = np.zeros((len(upar), total.shape[1]))
        np.add.at(sums, inv, total[sc])
        pct = f"{min_fraction * 100:g} %"
        start = len(kept)
        rows["node_id"] = np.concatenate([rows["node_id"], start + np.arange(len(upar))])
        rows["parent_id"] = np.concatenate([rows["parent_id"], new_id[upar]])
        rows["depth"] = np.concatenate([rows["depth"], depth[upar] + 1])
        rows["name"] += [FOLDED_LABEL.format(n=int(c), s="" if c == 1 else "s", pct=pct) for c in cnt]
        rows["file"] += [""] * len(upar)
        rows["line"] += [None] * len(upar)
        rows["samples"] = np.concatenate([rows["samples"], sums[:, 0]])
        rows["self_samples"] = np.concatenate([rows["self_samples"], np.zeros(len(upar))])
        rows["weight_s"] = np.concatenate([rows["weight_s"], sums[:, 1]])
        rows["folded"] = np.concatenate([rows["folded"], cnt.astype(np.int64)])
        for name, col in (extra or {}).items():
            extra_cols[name] += list(sums[:, col])
    df = pd.DataFrame(rows)
    df["line"] = pd.array(df["line"].tolist(), dtype="Int64")
    df["package"] = [frame_package(f) for f in df["file"].tolist()]
    df["samples"] = df["samples"].round().astype(np.int64)
    df["self_samples"] = df["self_samples"].round().astype(np.int64)
    df["fraction"] = df["samples"] / grand
    for name, vals in extra_cols.items():
        df[name] = np.asarray(vals, dtype=np.float64)
    return df.sort_values(["depth", "node_id"], kind="stable").reset_index(drop=True)


_SITE = re.compile(r"(?:site|dist)-packages/([^/]+)")
_STDLIB = re.compile(r"/lib/python3\.\d+/([^/]+)")


def frame_package(file: str) -> str:
    """Which package a frame's file belongs to: a site-packages package (``torch``,
    ``numpy`` ...), ``python`` (the standard library), ``importlib`` (imports),
    ``debugkit``, or ``your code`` (the profiled program's own files).

    py-spy writes full paths in speedscope files and shortened ones
    (``torch/nn/functional.py``, ``threading.py``) in raw files; both are understood.
    """
    import sys

    if not file:
        return ""
    if file.startswith("<frozen"):
        return "importlib" if "importlib" in file else "python"
    m = _SITE.search(file)
    if m:
        return m.group(1).split(".", 1)[0]
    if in_debugkit(file):
        return "debugkit"
    if _STDLIB.search(file):
        return "python"
    if file.startswith("/") or file.startswith("<"):
        return "your code"
    head = file.split("/", 1)[0]
    head = head[:-3] if head.endswith(".py") else head
    if head in getattr(sys, "stdlib_module_names", ()):
        return "python"
    return head if "/" in file else "your code"


def match_frames(tree, query: str):
    """Boolean mask of the nodes whose name or file contains ``query`` (case-insensitive);
    an empty query matches nothing. Folded nodes never match."""
    q = (query or "").strip().lower()
    if not q:
        return np.zeros(len(tree), dtype=bool)
    text = (tree["name"].astype(str) + " " + tree["file"].astype(str)).str.lower()
    return (text.str.contains(q, regex=False) & (tree["folded"] == 0)).to_numpy()


def search_summary(profile, query: str, thread_ids=None) -> dict:
    """How many samples pass through a frame matching ``query``: ``{matches (distinct
    functions), samples, fraction}``."""
    q = (query or "").strip().lower()
    sel = select(profile, thread_ids, "function")
    if not q:
        return {"matches": 0, "samples": 0, "fraction": 0.0}
    hit_key = np.array([q in f"{n} {f}".lower() for n, f in zip(sel.key_name, sel.key_file)], dtype=bool)
    if not hit_key.any() or not len(sel.keys_flat):
        return {"matches": int(hit_key.sum()), "samples": 0, "fraction": 0.0}
    stack_of = _stack_of_pos(sel.offsets)
    hit_stacks = _unique(stack_of[hit_key[sel.keys_flat]])
    samples = int(sel.samples[hit_stacks].sum())
    used = _unique(sel.keys_flat[hit_key[sel.keys_flat]])
    return {"matches": int(len(used)), "samples": samples,
            "fraction": samples / max(sel.total_samples, 1)}
