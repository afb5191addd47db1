"""The result vocabulary: :class:`Finding` (what an analysis, a detector or an audit found)
and :class:`Check` (one yes/no/unknown test of a replay), with one severity scale.

Every layer that reports a result builds these objects: the detectors and
:mod:`debugkit.diagnose` (``Finding``), the bias audit's per-attribute findings and its
attribution flags (``Finding``), the replay's checks (``Check``). Views and the CLI
serialise them with the methods below, which keep the documented JSON shapes:

- a finding of ``debugkit diagnose --json``: :meth:`Finding.to_dict`
  (``{"kind", "step", "rank", "layer", "severity", "message", "evidence"}``);
- an audit finding in ``audit.json``: :meth:`Finding.to_audit_dict`
  (``{"severity": "fail" | "needs_review", "text"}``; stored audits are content-addressed,
  so this shape is part of their id and never changes);
- an audit flag in ``audit.json``: :meth:`Finding.to_flag_dict`
  (``{"kind", "attribute", "feature", "rank", ..., "message"}``);
- a replay check in ``debugkit replay --json``: :meth:`Check.to_dict`
  (``{"name", "ok", "detail"}``).

This module lives in the analysis layer because analyses are its lowest producers; the
services above (audit, replay, diagnose, compare) import it from here. It imports nothing
but the standard library.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: The one severity scale, most severe first.
#: ``error``: something is broken (a failed step, non-finite weights, a culprit a replay found);
#: ``warning``: something is likely wrong and worth acting on (a loss spike, a bias audit that fails);
#: ``info``: worth knowing, nothing to fix yet (a bias audit that needs review, trace coverage).
SEVERITIES = ("error", "warning", "info")
_ORDER = {s: i for i, s in enumerate(SEVERITIES)}

#: The bias audit's two levels of a finding on the one scale: a disparity outside the band
#: with its whole interval is a ``warning``, anything that needs a person's review ``info``.
#: (``diagnose`` reports a stored audit at the severity of its verdict, by this map.)
AUDIT_SEVERITY = {"fail": "warning", "needs_review": "info"}
_AUDIT_LEVEL = {v: k for k, v in AUDIT_SEVERITY.items()}

#: The keys of an audit flag in ``audit.json``, in their stored order (``message`` last).
FLAG_FIELDS = ("kind", "attribute", "feature", "rank", "mean_abs", "share", "association",
               "measure", "group_means")


@dataclass
class Finding:
    """One thing a detector, a diagnosis or an audit found.

    Attributes
    ----------
    kind : str
        What was found (``nonfinite_grad``, ``memory_leak``, ``step_failure``,
        ``fairness``, ``sensitive_feature`` ...).
    step : int or None
        The first step it concerns.
    rank : int or None
        The rank it concerns (None: the whole job).
    layer : str or None
        The parameter or module it concerns.
    severity : str
        ``error | warning | info`` (:data:`SEVERITIES`).
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
        """``{"kind", "step", "rank", "layer", "severity", "message", "evidence"}``."""
        return asdict(self)

    # ---------------------------------------------------------------- the audit's shapes
    @classmethod
    def for_audit(cls, level: str, text: str, *, kind: str = "fairness", **evidence) -> Finding:
        """A bias audit's finding at its ``level`` (``fail`` or ``needs_review``)."""
        return cls(kind=kind, step=None, rank=None, layer=None, severity=AUDIT_SEVERITY[level],
                   message=text, evidence=evidence)

    @property
    def audit_level(self) -> str:
        """This finding's level in an audit's words: ``fail`` or ``needs_review``."""
        return _AUDIT_LEVEL.get(self.severity, "needs_review")

    def to_audit_dict(self) -> dict:
        """The stored shape of an audit finding: ``{"severity": "fail" | "needs_review", "text"}``."""
        return {"severity": self.audit_level, "text": self.message}

    @classmethod
    def from_audit_dict(cls, d: dict) -> Finding:
        """Read back :meth:`to_audit_dict`'s shape (a stored audit's finding)."""
        return cls.for_audit(d["severity"], d["text"])

    @classmethod
    def flag(cls, kind: str, message: str, **fields) -> Finding:
        """An audit's attribution flag (``sensitive_feature`` or ``proxy``): it asks for a
        review (``info``); ``fields`` are :data:`FLAG_FIELDS` other than ``kind``."""
        return cls(kind=kind, step=None, rank=None, layer=None, severity=AUDIT_SEVERITY["needs_review"],
                   message=message, evidence=fields)

    def to_flag_dict(self) -> dict:
        """The stored shape of an audit flag: :data:`FLAG_FIELDS` then ``message``."""
        return {"kind": self.kind, **{k: self.evidence.get(k) for k in FLAG_FIELDS[1:]},
                "message": self.message}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Order by step (job-wide findings without a step last), then severity, rank, kind."""
    return sorted(findings, key=lambda f: (f.step is None, f.step if f.step is not None else 0,
                                           _ORDER[f.severity], f.rank if f.rank is not None else -1,
                                           f.kind, f.layer or ""))


#: The findings one non-finite step gives, the one that stays first: the gradient finding
#: names the first layer hit and whether the loss was already non-finite (so, forward or
#: backward pass); the loss finding gives the last finite value; the Recorder's non-finite
#: capture (a ``step_failure`` warning) the capture to replay.
NONFINITE_KINDS = ("nonfinite_grad", "nonfinite_loss", "step_failure")


def _nonfinite_event(f: Finding) -> bool:
    return f.kind in NONFINITE_KINDS[:2] or (
        f.kind == "step_failure" and f.evidence.get("capture_kind") == "nonfinite")


def _relation(root: Finding, other: Finding) -> str:
    """How ``other`` stands to ``root``: ``consequence`` when either names it so in its
    ``evidence["related"]``, else ``same_event``."""
    for f, g, rel in ((root, other, "consequence"), (other, root, "cause")):
        for r in f.evidence.get("related") or []:
            if isinstance(r, dict) and r.get("kind") == g.kind and r.get("relation") == rel:
                return "consequence"
    return "same_event"


def attach_related(findings: list[Finding]) -> list[Finding]:
    """One fact, one finding: the findings of one non-finite step (same step and rank:
    ``nonfinite_grad``, ``nonfinite_loss``, the non-finite capture's ``step_failure``)
    become one ``error`` finding with the others in its ``evidence["related"]``.

    The one that stays is the cause when a detector named one (a finding whose
    ``evidence["related"]`` calls another kind its ``cause``, e.g. a loss the loss
    computation made non-finite), else the first of :data:`NONFINITE_KINDS` present. Each
    attached finding is ``{"kind", "step", "rank", "relation", "severity", "layer",
    "message", "evidence"}`` (``relation``: ``consequence`` or ``same_event``). A capture
    merged this way is named in the message and as ``evidence["failure"]``, so the step can
    still be replayed from the finding. Other findings, and their order, are unchanged; the
    input is not modified."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        if _nonfinite_event(f) and f.step is not None:
            groups.setdefault((f.step, f.rank), []).append(f)
    merged: dict[int, Finding | None] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        causes = {r.get("kind") for f in group for r in (f.evidence.get("related") or [])
                  if isinstance(r, dict) and r.get("relation") == "cause"}
        group = sorted(group, key=lambda f: (f.kind not in causes, NONFINITE_KINDS.index(f.kind)))
        root, others = group[0], group[1:]
        kept = [r for r in root.evidence.get("related") or []
                if not (isinstance(r, dict) and r.get("kind") in {o.kind for o in others})]
        evidence = {**root.evidence, "related": kept + [
            {"kind": o.kind, "step": o.step, "rank": o.rank, "relation": _relation(root, o),
             "severity": o.severity, "layer": o.layer, "message": o.message, "evidence": o.evidence}
            for o in others]}
        message = root.message
        capture = next((o.evidence.get("failure") for o in others if o.kind == "step_failure"), None)
        if capture and "failure" not in evidence:
            evidence["failure"] = capture
            message = (f"{message.rstrip()} The Recorder captured this step "
                       f"(capture {capture}; replay it with `debugkit replay`).")
        merged[id(root)] = Finding(root.kind, root.step, root.rank, root.layer, "error", message, evidence)
        for o in others:
            merged[id(o)] = None
    out = []
    for f in findings:
        g = merged.get(id(f), f)
        if g is not None:
            out.append(g)
    return out


@dataclass
class Check:
    """One test a replay ran on the captured step.

    Attributes
    ----------
    name : str
        Which test (``labels``, ``embedding_indices``, ``finite_inputs`` ...).
    ok : bool or None
        True: passed; False: found the problem; None: could not be judged (not reached,
        not applicable).
    detail : str
        What it saw, in one or a few plain sentences.
    culprit : dict or None
        On a failure, what it blames (``{"module", "op", "input", "sample_index",
        "dataset_index", "detail"}``, possibly ``"_positions"``); not serialised.
    """

    name: str
    ok: bool | None
    detail: str
    culprit: dict | None = None

    @property
    def severity(self) -> str:
        """On the one scale: a failed check is an ``error``, any other ``info``."""
        return "error" if self.ok is False else "info"

    def to_dict(self) -> dict:
        """``{"name", "ok", "detail"}`` (the replay report's shape)."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail}
