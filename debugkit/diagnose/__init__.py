"""Run every detector over a run: the engine behind ``debugkit diagnose``.

Each source is a module of this package with ``collect(run, config) -> list[Finding]``;
it reads the run's DataFrames and calls the pure detectors in :mod:`debugkit.analysis`.
To add findings of a new area, write the module and add its name to :data:`SOURCES`.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..analysis.findings import Finding, attach_related, sort_findings

SOURCES = [
    "failures",
    "distributed",
    "gradients",
    "layers",
    "memory",
    "serving",
    "audit",
    "profiles",
    "checkpoints",
]


def diagnose(run, config: dict[str, Any] | None = None, *, sources: list[str] | None = None,
             inputs: dict[str, dict] | None = None) -> list[Finding]:
    """All findings for ``run`` (a :class:`debugkit.Run`), ordered by step; the findings of
    one non-finite step are one finding with the others as its ``evidence["related"]``
    (:func:`~debugkit.analysis.findings.attach_related`).

    Parameters
    ----------
    config : dict, optional
        Thresholds by source, e.g. ``{"gradients": {"explode_factor": 20}}``; each
        source documents its keys and defaults.
    sources : list of str, optional
        Only these sources (names in :data:`SOURCES`, e.g. ``["failures", "gradients"]``);
        their findings come in the order the whole diagnosis gives them.
    inputs : dict, optional
        What a caller has already read or computed, by source, passed to that source's
        ``collect`` as keywords (the dashboard's cached tables, e.g.
        ``{"gradients": {"matrices": ..., "scalars": ...}}``).
    """
    found = collect_by_source(run, config, sources=sources, inputs=inputs)
    return arrange([f for name in found for f in found[name]])


def collect_by_source(run, config: dict[str, Any] | None = None, *, sources: list[str] | None = None,
                      inputs: dict[str, dict] | None = None) -> dict[str, list[Finding]]:
    """What each source finds, before :func:`arrange` (``{source: findings}``, in the
    order of :data:`SOURCES`); the arguments are :func:`diagnose`'s. The run-list index
    keeps this, so a page can show its sources' findings without running them again."""
    config = config or {}
    inputs = inputs or {}
    out: dict[str, list[Finding]] = {}
    for name in SOURCES if sources is None else [s for s in SOURCES if s in sources]:
        mod = importlib.import_module(f"{__name__}.{name}")
        out[name] = list(mod.collect(run, config.get(name, {}), **inputs.get(name, {})))
    return out


def arrange(findings: list[Finding]) -> list[Finding]:
    """The order and grouping of :func:`diagnose`: one finding per non-finite step (the
    others attached), the consequences of a collective mismatch linked to it, by step,
    and the dead or lost ranks before what they caused."""
    return causes_first(sort_findings(link_collective_mismatch(attach_related(findings))))


#: Findings that follow from a ``collective_mismatch`` when they come at or after its step.
MISMATCH_CONSEQUENCES = ("step_failure", "hang", "rank_divergence", "straggler")


def link_collective_mismatch(findings: list[Finding]) -> list[Finding]:
    """Mark the failures, hangs and divergences at or after a ``collective_mismatch``'s
    step as its consequences (``evidence["related"]`` gains ``{"kind", "step", "rank",
    "relation": "cause"}`` and the message a first sentence that says so): the rank that
    skipped or added a collective caused them."""
    import dataclasses

    roots = [f for f in findings if f.kind == "collective_mismatch"]
    if not roots:
        return findings
    root = roots[0]
    if root.step is None:  # no step to measure "after" from
        return findings
    ranks = root.evidence.get("ranks") or [root.rank]
    who = " and ".join(f"rank {r}" for r in ranks)
    out = []
    for f in findings:
        if f.kind in MISMATCH_CONSEQUENCES and f.step is not None and root.step is not None \
                and f.step >= root.step:
            rel = {"kind": root.kind, "step": root.step, "rank": root.rank, "relation": "cause"}
            f = dataclasses.replace(
                f, message=(f"A consequence of the collective call {who} made out of step at step "
                            f"{root.step} (collective_mismatch): {f.message}"),
                evidence={**f.evidence, "related": [*(f.evidence.get("related") or []), rel]})
        out.append(f)
    return out


#: Findings that name the cause of other findings (listed in their ``evidence["symptoms"]``).
ROOT_KINDS = ("rank_crashed", "rank_lost")


def causes_first(findings: list[Finding]) -> list[Finding]:
    """Put the ``rank_crashed`` / ``rank_lost`` findings, in the order their detector gave
    (the first rank to die first), before the first finding they explain (a failure of
    another rank listed in their evidence's ``symptoms``) or their own first place."""
    roots = [f for f in findings if f.kind in ROOT_KINDS]
    if not roots:
        return list(findings)
    ids = {s.get("failure") for f in roots for s in (f.evidence.get("symptoms") or [])}
    at = min(i for i, f in enumerate(findings) if f.kind in ROOT_KINDS or f.evidence.get("failure") in ids)
    rest = [f for f in findings if f.kind not in ROOT_KINDS]
    before = [f for f in findings[:at] if f.kind not in ROOT_KINDS]
    return before + sorted(roots, key=lambda f: f.evidence.get("order", 0)) + rest[len(before):]
