"""Bias audit findings: ``bias_audit`` (a stored audit that fails or needs review) and
``audit_tampered`` (a stored audit whose content no longer matches its id).

Reads ``audit.json`` files only (no shap or fairlearn import).
"""

from __future__ import annotations

from ..analysis.findings import AUDIT_SEVERITY as SEVERITY  # the one map of audit levels
from ..analysis.findings import Finding


def collect(run, config: dict) -> list[Finding]:
    from ..audit.stored_audits import list_audits, load_audit
    from ..errors import DebugkitError

    out = []
    for entry in list_audits(run.path):
        try:
            audit = load_audit(run.path, entry["id"])
        except DebugkitError as exc:
            out.append(Finding(kind="audit_tampered", step=None, rank=None, layer=None, severity="error",
                               message=f"Stored audit {entry['id']} cannot be trusted: {exc}",
                               evidence={"audit": entry["id"]}))
            continue
        sev = SEVERITY.get(audit.verdict)
        if sev is None:
            continue
        failing = [n for n, a in audit.doc.get("sensitive", {}).items() if a.get("verdict") == "fail"]
        first = audit.reasons[0] if audit.reasons else ""
        label = "fails" if audit.verdict == "fail" else "needs review"
        out.append(Finding(
            kind="bias_audit", step=None, rank=None, layer=None, severity=sev,
            message=f"Bias audit {audit.id} ({audit.name}) {label}"
                    + (f" on {', '.join(failing)}" if failing else "") + f": {first} "
                    f"({len(audit.reasons)} reason(s); `debugkit audit show {run.path} --audit {audit.id}`).",
            evidence={"audit": audit.id, "verdict": audit.verdict, "failing_attributes": failing,
                      "reasons": len(audit.reasons)}))
    return out
