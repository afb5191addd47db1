"""The audit speaks the one result vocabulary (Finding, one severity scale) and stores it
in audit.json's documented shapes."""

from __future__ import annotations

import pytest

from debugkit.analysis.findings import AUDIT_SEVERITY, FLAG_FIELDS, SEVERITIES, Finding
from debugkit.diagnose import audit as diagnose_audit


@pytest.mark.parametrize("level, severity", [("fail", "warning"), ("needs_review", "info")])
def test_audit_levels_map_onto_the_one_scale_and_back(level, severity):
    f = Finding.for_audit(level, "sex=female: selection rate ...", attribute="sex")
    assert f.severity == severity and f.severity in SEVERITIES
    assert f.to_audit_dict() == {"severity": level, "text": "sex=female: selection rate ..."}
    assert Finding.from_audit_dict(f.to_audit_dict()).to_audit_dict() == f.to_audit_dict()


def test_diagnose_uses_the_same_map():
    assert diagnose_audit.SEVERITY is AUDIT_SEVERITY


def test_a_flag_is_stored_in_its_documented_key_order():
    f = Finding.flag("proxy", "'zip', a likely proxy of race ...", attribute="race", feature="zip",
                     rank=2, mean_abs=0.1, share=0.2, association=0.4, measure="cramers_v",
                     group_means={"a": 0.1})
    d = f.to_flag_dict()
    assert list(d) == [*FLAG_FIELDS, "message"]
    assert d["kind"] == "proxy" and d["rank"] == 2 and d["message"].startswith("'zip'")
    assert f.severity == AUDIT_SEVERITY["needs_review"] and f.rank is None
