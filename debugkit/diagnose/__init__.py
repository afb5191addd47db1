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
    return causes_first(sort_findings(out))


#: Findings that name the cause of other findings (listed in their ``evidence["symptoms"]``).
ROOT_KINDS = ("rank_crashed", "rank_lost")


def causes_first(findings: list[Finding]) -> list[Finding]:
    """Move each ``rank_crashed`` / ``rank_lost`` finding before the first finding it
    explains (a failure of another rank listed in its evidence's ``symptoms``)."""
    out = list(findings)
    for root in [f for f in findings if f.kind in ROOT_KINDS]:
        ids = {s.get("failure") for s in (root.evidence.get("symptoms") or [])}
        at = out.index(root)
        first = next((i for i, f in enumerate(out[:at]) if f.evidence.get("failure") in ids), None)
        if first is not None:
            out.insert(first, out.pop(at))
    return out
