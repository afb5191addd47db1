"""The data a figure draws, as a table (the dashboard's CSV download of every chart)."""

from __future__ import annotations

import numpy as np


def figure_table(fig):
    """One row per drawn point of ``fig``: ``trace`` (its name), ``x``, ``y``, and ``z``
    for heatmaps (one row per cell), ``text`` and ``value`` where a trace carries one per
    point.

    Decorations are left out: vertical lines and annotations are layout shapes, not
    traces, and traces without ``x``/``y`` (a heatmap without axes) get their index.

    Returns
    -------
    DataFrame ``trace, x, y[, z][, text][, value]``; ``value`` is a marker's own value
    where the marker is drawn elsewhere (a NaN at the top of the axis: ``"NaN"``).
    """
    import pandas as pd

    parts = []
    for i, t in enumerate(fig.data):
        name = t.name if getattr(t, "name", None) else f"trace {i}"
        z = getattr(t, "z", None)
        if z is not None:
            z = np.asarray(z, dtype=object)
            if z.ndim == 2:
                ys = list(t.y) if t.y is not None else list(range(z.shape[0]))
                xs = list(t.x) if t.x is not None else list(range(z.shape[1]))
                rows = [(name, xs[c], ys[r], z[r, c]) for r in range(z.shape[0]) for c in range(z.shape[1])
                        if r < len(ys) and c < len(xs)]
                parts.append(pd.DataFrame(rows, columns=["trace", "x", "y", "z"]))
                continue
        x = getattr(t, "x", None)
        y = getattr(t, "y", None)
        if x is None and y is None:
            continue
        n = len(y) if y is not None else len(x)
        df = pd.DataFrame({"trace": name,
                           "x": list(x) if x is not None else list(range(n)),
                           "y": list(y) if y is not None else [None] * n})
        text = getattr(t, "text", None)
        if text is not None and not isinstance(text, str) and len(text) == n:
            df["text"] = list(text)
        custom = getattr(t, "customdata", None)
        if custom is not None and np.asarray(custom, dtype=object).ndim == 1 and len(custom) == n:
            df["value"] = [str(c) for c in custom]  # what a marker stands for ("NaN", "0")
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=["trace", "x", "y"])
    return pd.concat(parts, ignore_index=True)


def figure_csv(fig) -> str:
    """:func:`figure_table` as CSV text (NaN written as ``NaN``, infinities as ``inf``)."""
    return figure_table(fig).to_csv(index=False, na_rep="NaN")
