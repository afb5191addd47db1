"""Self and total samples per frame or per function: the Profiler's function table.
"""

from __future__ import annotations

import numpy as np

from .idle import idle_stacks
from .selection import Selection, _stack_of_pos, _unique, select


def compute_function_table(profile, thread_ids=None, by: str = "frame", include_idle: bool = True):
    """Self and total samples per frame (``by="frame"``: name, file and line, as the
    profiler recorded them) or per function (``by="function"``: name and file).

    With ``include_idle=False`` the samples of waiting threads (innermost frame a
    blocking call: :data:`IDLE_LEAVES`, e.g. ``Condition.wait``, ``socket.accept``,
    ``select``) are left out of both columns; fractions stay of all samples.

    Returns
    -------
    DataFrame with columns ``name``, ``file``, ``line`` (Int64; null for functions),
    ``self_samples``, ``total_samples`` (int64), ``self_fraction``, ``total_fraction``
    (of all samples of the threads), ``self_s``, ``total_s`` (seconds; samples when the
    profile has no time unit), sorted by self samples, then total, descending. Keys with
    no samples are left out.
    """
    import pandas as pd

    sel = select(profile, thread_ids, by)
    if not include_idle:
        busy = ~idle_stacks(sel)
        total_samples = sel.total_samples
        sel = Selection(sel.keys_flat, sel.offsets, np.where(busy, sel.samples, 0), np.where(busy, sel.weight_s, 0.0),
                        sel.key_name, sel.key_file, sel.key_line, total_samples, sel.total_weight_s)
    n_keys = len(sel.key_name)
    lengths = np.diff(sel.offsets)
    nonempty = np.flatnonzero(lengths > 0)
    leaf = sel.keys_flat[sel.offsets[1:][nonempty] - 1] if len(nonempty) else np.zeros(0, np.int64)
    self_s = np.bincount(leaf, weights=sel.samples[nonempty], minlength=n_keys)
    self_w = np.bincount(leaf, weights=sel.weight_s[nonempty], minlength=n_keys)
    stack_of = _stack_of_pos(sel.offsets)
    pair = _unique(stack_of.astype(np.int64) * max(n_keys, 1) + sel.keys_flat) if len(stack_of) else np.zeros(0, np.int64)
    ps, pk = pair // max(n_keys, 1), pair % max(n_keys, 1)
    tot_s = np.bincount(pk, weights=sel.samples[ps], minlength=n_keys)
    tot_w = np.bincount(pk, weights=sel.weight_s[ps], minlength=n_keys)
    keep = np.flatnonzero(tot_s > 0)
    total = max(sel.total_samples, 1)
    df = pd.DataFrame({
        "name": [sel.key_name[i] for i in keep],
        "file": [sel.key_file[i] for i in keep],
        "line": pd.array([sel.key_line[i] for i in keep], dtype="Int64"),
        "self_samples": self_s[keep].round().astype(np.int64),
        "total_samples": tot_s[keep].round().astype(np.int64),
        "self_fraction": self_s[keep] / total,
        "total_fraction": tot_s[keep] / total,
        "self_s": self_w[keep],
        "total_s": tot_w[keep],
    })
    return df.sort_values(["self_samples", "total_samples", "name"], ascending=[False, False, True],
                          kind="stable").reset_index(drop=True)
