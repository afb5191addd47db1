"""The finding record every detector returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("error", "warning", "info")
_ORDER = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass
class Finding:
    """One thing a detector found.

    Attributes
    ----------
    kind : str
        What was found (``nonfinite_grad``, ``memory_leak``, ``step_failure`` ...).
    step : int or None
        The first step it concerns.
    rank : int or None
        The rank it concerns (None: the whole job).
    layer : str or None
        The parameter or module it concerns.
    severity : str
        ``error | warning | info``.
    message : str
        One plain sentence a person can act on.
    evidence : dict
        The numbers behind it (JSON-able).
    """

    kind: str
    step: int | None
    rank: int | None
    layer: str | None
    severity: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r}: expected one of {SEVERITIES}")

    def to_dict(self) -> dict:
        return asdict(self)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Order by step (job-wide findings without a step last), then severity, rank, kind."""
    return sorted(findings, key=lambda f: (f.step is None, f.step if f.step is not None else 0,
                                           _ORDER[f.severity], f.rank if f.rank is not None else -1,
                                           f.kind, f.layer or ""))
