"""The data a figure draws, as a table (the dashboard's CSV download of every chart)."""

from __future__ import annotations

import numpy as np


def figure_table(fig):
    """One row per drawn point of ``fig``: ``trace`` (its name), ``x``, ``y``, and ``z``
    for heatmaps (one row per cell), ``text`` and ``value`` where a trace carries one per
    point.

    Decorations are left out: vertical lines and annotations are layout shapes, not
    traces, and traces without ``x``/``y`` (a heatmap without axes) get their index.

    An icicle (flamegraph), treemap or sunburst gives one row per node instead
    (``trace, id, label, parent, value``), and a trace that names its 2-D ``customdata``
    columns (``meta={"columns": [...]}``) gets them as columns; a bar with a ``base``
    (a timeline) gets its start as ``base``.

    Returns
    -------
    DataFrame ``trace, x, y[, z][, text][, value]``; ``value`` is a marker's own value
    where the marker is drawn elsewhere (a NaN at the top of the axis: ``"NaN"``).
    """
    import pandas as pd

    parts = []
    for i, t in enumerate(fig.data):
        name = t.name if getattr(t, "name", None) else f"trace {i}"
        if getattr(t, "labels", None) is not None and getattr(t, "parents", None) is not None:
            parts.append(_hierarchy_table(t, name))  # icicle, treemap, sunburst
            continue
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
        base = getattr(t, "base", None)
        if base is not None and not np.isscalar(base) and len(base) == n:
            df["base"] = list(base)  # where a bar starts (a timeline's start)
        custom = getattr(t, "customdata", None)
        if custom is not None and np.asarray(custom, dtype=object).ndim == 1 and len(custom) == n:
            df["value"] = [str(c) for c in custom]  # what a marker stands for ("NaN", "0")
        else:
            df = _named_custom(df, t, n)
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=["trace", "x", "y"])
    return pd.concat(parts, ignore_index=True)


def _custom_names(t) -> list:
    meta = getattr(t, "meta", None)
    return list(meta.get("columns") or []) if isinstance(meta, dict) else []


def _named_custom(df, t, n: int):
    """The columns of a 2-D ``customdata`` its trace names in ``meta={"columns": [...]}``."""
    names = _custom_names(t)
    custom = getattr(t, "customdata", None)
    if not names or custom is None:
        return df
    arr = np.asarray(custom, dtype=object)
    if arr.ndim != 2 or arr.shape[0] != n:
        return df
    for j, col in enumerate(names[:arr.shape[1]]):
        if col and col not in df.columns:
            df[col] = arr[:, j]
    return df


def _hierarchy_table(t, name: str):
    """One row per node of an icicle / treemap / sunburst: ``trace, id, label, parent,
    value`` and the ``customdata`` columns the trace names."""
    import pandas as pd

    labels = list(t.labels)
    n = len(labels)
    df = pd.DataFrame({"trace": name,
                       "id": list(t.ids) if t.ids is not None else list(range(n)),
                       "label": labels, "parent": list(t.parents),
                       "value": list(t.values) if t.values is not None else [None] * n})
    return _named_custom(df, t, n)


def figure_csv(fig) -> str:
    """:func:`figure_table` as CSV text (NaN written as ``NaN``, infinities as ``inf``)."""
    return figure_table(fig).to_csv(index=False, na_rep="NaN")
