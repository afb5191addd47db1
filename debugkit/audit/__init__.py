"""Bias audits: SHAP attributions and group fairness metrics of a model, stored in its run.

``audit_model(model, X, y, sensitive=..., run_dir=..., name=...)`` computes an audit and
stores it under ``run_dir/audits/<id>/``; ``load_audit``/``list_audits`` read them back
(verified against their content hash); ``make_token``/``verify_token``/``share_link``
make and check the signed read-only links for compliance reviewers. shap, fairlearn and
scikit-learn are imported only when an audit is computed.
"""

from __future__ import annotations

__all__ = [
    "audit_model", "Auditor", "AuditSettings", "Attribute", "Audit", "load_audit",
    "list_audits", "latest_audit_id", "derive_sex", "AGE_BINS", "make_token", "verify_token",
    "share_link", "server_secret", "build_report_html",
]

_WHERE = {
    "audit_model": "auditor", "Auditor": "auditor",
    "AuditSettings": "settings",
    "Attribute": "groups", "derive_sex": "groups", "AGE_BINS": "groups",
    "Audit": "stored_audits", "load_audit": "stored_audits", "list_audits": "stored_audits",
    "latest_audit_id": "stored_audits",
    "make_token": "share", "verify_token": "share", "share_link": "share", "server_secret": "share",
    "build_report_html": "report",
}


def __getattr__(name):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'debugkit.audit' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)


def __dir__():
    return sorted(set(globals()) | set(__all__))
