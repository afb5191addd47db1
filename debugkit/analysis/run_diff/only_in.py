"""Findings one run has and the other does not.
"""

from __future__ import annotations

from ..findings import Finding, sort_findings


def _finding_key(f: Finding) -> tuple:
    return (f.kind, f.layer)


def findings_only_in(findings_run: list[Finding], findings_base: list[Finding]) -> dict:
    """Findings of one run whose ``(kind, layer)`` the other run has no finding of.

    Returns ``{"run": [...], "base": [...]}`` (each sorted as :func:`sort_findings`).
    """
    ka = {_finding_key(f) for f in findings_base}
    kb = {_finding_key(f) for f in findings_run}
    return {"run": sort_findings([f for f in findings_run if _finding_key(f) not in ka]),
            "base": sort_findings([f for f in findings_base if _finding_key(f) not in kb])}
