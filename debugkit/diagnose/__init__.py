"""Run every detector over a run: the engine behind ``debugkit diagnose``.

Each source is a module of this package with ``collect(run, config) -> list[Finding]``;
it reads the run's DataFrames and calls the pure detectors in :mod:`debugkit.analysis`.
To add findings of a new area, write the module and add its name to :data:`SOURCES`.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..analysis.findings import Finding, sort_findings

SOURCES = [
    "failures",
    "distributed",
    "gradients",
    "memory",
    "audit",
    "profiles",
    "checkpoints",
]


def diagnose(run, config: dict[str, Any] | None = None) -> list[Finding]:
    """All findings for ``run`` (a :class:`debugkit.Run`), ordered by step.

    Parameters
    ----------
    config : dict, optional
        Thresholds by source, e.g. ``{"gradients": {"explode_factor": 20}}``; each
        source documents its keys and defaults.
    """
    config = config or {}
    out: list[Finding] = []
    for name in SOURCES:
        mod = importlib.import_module(f"{__name__}.{name}")
        out.extend(mod.collect(run, config.get(name, {})))
    return sort_findings(out)
