"""Per-stack totals of the threads a view shows, keyed by frame or by function (see
:mod:`debugkit.analysis.profile`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Selection:
    """Per-stack totals of the chosen threads, keyed the chosen way.

    ``keys_flat`` / ``offsets`` hold each stack's keys root first; ``samples`` and
    ``weight_s`` its totals; ``key_name``, ``key_file``, ``key_line`` describe each key.
    """

    keys_flat: np.ndarray
    offsets: np.ndarray
    samples: np.ndarray
    weight_s: np.ndarray
    key_name: list
    key_file: list
    key_line: list
    total_samples: int
    total_weight_s: float


def _opt_int(v):
    """An int, or None for None/NaN/pd.NA."""
    if v is None:
        return None
    try:
        import pandas as pd

        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return int(v)


def _key_map(profile, by: str):
    """frame id -> key id, and the key's (name, file, line)."""
    fr = profile.frames
    if by == "frame":
        lines = [_opt_int(v) for v in fr["line"].astype(object).tolist()]
        return (np.arange(len(fr), dtype=np.int64), fr["name"].tolist(), fr["file"].tolist(), lines)
    if by != "function":
        raise ValueError(f"by={by!r}: expected 'frame' or 'function'")
    keys: dict[tuple[str, str], int] = {}
    mapping = np.empty(len(fr), dtype=np.int64)
    for i, (n, f) in enumerate(zip(fr["name"].tolist(), fr["file"].tolist())):
        mapping[i] = keys.setdefault((n, f), len(keys))
    names = [k[0] for k in keys]
    files = [k[1] for k in keys]
    return mapping, names, files, [None] * len(keys)


def select(profile, thread_ids=None, by: str = "frame") -> Selection:
    """The stacks of ``thread_ids`` (all threads when None), summed over threads."""
    c = profile.counts
    if thread_ids is not None:
        c = c[c["thread_id"].isin(list(thread_ids))]
    n_stacks = profile.n_stacks
    samples = np.bincount(c["stack_id"].to_numpy(), weights=c["samples"].to_numpy(),
                          minlength=n_stacks).astype(np.int64)
    weight = np.bincount(c["stack_id"].to_numpy(), weights=c["weight_s"].to_numpy(), minlength=n_stacks)
    mapping, names, files, lines = _key_map(profile, by)
    keys_flat = mapping[profile.stack_frames] if len(profile.stack_frames) else np.zeros(0, np.int64)
    return Selection(keys_flat, profile.stack_offsets, samples, weight, names, files, lines,
                     int(samples.sum()), float(weight.sum()))


def _unique(a) -> np.ndarray:
    """Sorted distinct values (numpy 2.4's hash-based ``np.unique`` is many times slower
    than sorting for these integer arrays)."""
    a = np.sort(np.asarray(a), kind="stable")
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _stack_of_pos(offsets: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
