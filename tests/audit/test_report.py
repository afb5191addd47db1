"""The standalone HTML report: no external scripts, the JSON's SHA-256, escaped text."""

from __future__ import annotations

import hashlib
import re

import pytest

from debugkit.audit import build_report_html, list_audits, load_audit
from debugkit.audit.report import figures

SAMPLE = "credit-audit"


@pytest.fixture(scope="module")
def sample_audits():
    from ..conftest import SAMPLE_RUNS

    run = SAMPLE_RUNS / SAMPLE
    return run, [load_audit(run, e["id"]) for e in list_audits(run)]


def test_sample_run_holds_both_audits(sample_audits):
    _, audits = sample_audits
    kinds = sorted(a.doc["model"]["kind"] for a in audits)
    assert kinds == ["torch", "tree"]
    for a in audits:
        assert set(a.doc["sensitive"]) == {"age_in_years", "sex", "foreign_worker"}
        assert a.doc["shap"]["explainer"] == {"torch": "DeepExplainer", "tree": "TreeExplainer"}[a.doc["model"]["kind"]]


def test_report_is_standalone_and_prints_the_json_sha256(sample_audits):
    _, audits = sample_audits
    a = audits[0]
    html = build_report_html(a)
    assert not re.search(r"<script[^>]*\bsrc\s*=", html, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*['\"]?https?:", html, re.I)
    # plotly.js is inlined exactly once (its source names cdn.plot.ly in a default it never loads)
    assert html.count("plotly.js v") == 1
    sha = hashlib.sha256((a.path / "audit.json").read_bytes()).hexdigest()
    assert f"<span class='hash' id='json-sha256'>{sha}</span>" in html
    assert html.count("Plotly.newPlot") == len(figures(a.doc, a.rows))
    assert "four-fifths" in html and "not a universal legal standard" in html


def test_report_escapes_user_text(sample_audits, tmp_path):
    import json
    import shutil

    from debugkit.audit.stored_audits import Audit

    _, audits = sample_audits
    a = audits[0]
    doc = json.loads(json.dumps(a.doc))
    doc["name"] = "<script>alert(1)</script>"
    fake = Audit(a.path, doc, a.json_bytes())
    html = build_report_html(fake)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    _ = shutil, tmp_path
