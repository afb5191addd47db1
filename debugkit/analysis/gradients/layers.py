"""Layer filter: module prefixes and groups of parameter names, the layers to draw."""

from __future__ import annotations

import re

import numpy as np

from ...errors import InvalidInputError
from ..findings import Finding
from .matrix import TOTAL, GradMatrix

MSG_BAD_REGEX = "layer filter: {pattern!r} is not a valid regular expression ({detail})"


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
