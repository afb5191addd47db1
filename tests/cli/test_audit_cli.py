"""``debugkit audit show|list|report`` and ``debugkit share``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse

import pytest

from debugkit.audit import list_audits, verify_token
from debugkit.audit.share import MSG_BASE_URL, MSG_DURATION, server_secret
from debugkit.audit.stored_audits import MSG_BAD_ID
from debugkit.cli import main
from debugkit.errors import MSG_NO_SUCH_PATH

from ..conftest import ROOT, SAMPLE_RUNS, console_script


@pytest.fixture(scope="module")
def sample():
    run = SAMPLE_RUNS / "credit-audit"
    return run, [e["id"] for e in list_audits(run)]


def test_audit_show_json_has_the_issue_fields(sample, capsys):
    run, ids = sample
    assert main(["audit", "show", str(run), "--audit", ids[-1], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["id"] == ids[-1]
    assert {"id", "model", "dataset", "sensitive", "shap", "flags", "verdict"} <= set(doc)
    for attr in doc["sensitive"].values():
        assert {"groups", "reference_group", "demographic_parity_difference", "demographic_parity_ratio",
                "equalized_odds_difference", "equal_opportunity_difference", "disparities",
                "verdict"} <= set(attr)
        for g in attr["groups"].values():
            assert set(g) == {"count", "base_rate", "selection_rate", "tpr", "fpr", "fnr", "precision",
                              "accuracy"}
    assert {"explainer", "output", "additivity_max_error", "mean_abs"} <= set(doc["shap"])
    assert doc == json.loads((run / "audits" / ids[-1] / "audit.json").read_text())


def test_audit_show_defaults_to_the_newest_and_prints_text(sample, capsys):
    run, ids = sample
    assert main(["audit", "show", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"audit {ids[0]}: ") and "verdict:" in out and "age_in_years:" in out


def test_audit_list_json(sample, capsys):
    run, ids = sample
    assert main(["audit", "list", str(run), "--json"]) == 0
    assert [e["id"] for e in json.loads(capsys.readouterr().out)["audits"]] == ids


def test_audit_report_writes_both_files(sample, tmp_path, capsys):
    import hashlib

    run, ids = sample
    assert main(["audit", "report", str(run), "--audit", ids[0], "--out", str(tmp_path)]) == 0
    html = (tmp_path / f"audit-{ids[0]}.html").read_text()
    sha = hashlib.sha256((tmp_path / f"audit-{ids[0]}.json").read_bytes()).hexdigest()
    assert sha in html and f"sha256 {sha}" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["audit", "show", "{run}", "--audit", "abc"], re.escape(MSG_BAD_ID.format(value="abc"))),
    (["audit", "show", "{run}", "--audit", "0" * 16], r"no audit with id '0000000000000000'"),
    (["audit", "show", "/no/such/run"], re.escape(MSG_NO_SUCH_PATH.format(path="/no/such/run"))),
    (["share", "{run}", "--audit", "{id}", "--expires", "1y"], re.escape(MSG_DURATION.format(value="1y"))),
    (["share", "{run}", "--audit", "{id}", "--base-url", "localhost"],
     re.escape(MSG_BASE_URL.format(value="localhost"))),
    (["share", "{run}", "--audit", "0" * 16], r"no audit with id"),
])
def test_bad_cli_input(sample, capsys, argv, match):
    run, ids = sample
    argv = [a.format(run=run, id=ids[0]) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("debugkit: error: ") and re.search(match, err), err


def test_share_prints_a_link_the_server_accepts(sample, capsys):
    run, ids = sample
    assert main(["share", str(run), "--audit", ids[0], "--expires", "7d",
                 "--base-url", "https://dk.example.org"]) == 0
    out, err = capsys.readouterr()
    link = out.strip()
    parts = urllib.parse.urlsplit(link)
    assert link.startswith("https://dk.example.org/audit?")
    q = dict(urllib.parse.parse_qsl(parts.query))
    assert q["run"] == "credit-audit" and q["audit"] == ids[0]
    assert verify_token(q["token"], q["run"], q["audit"], server_secret()) > 0
    assert "valid until" in err


def test_share_by_run_id(sample, capsys):
    _, ids = sample
    assert main(["share", "credit-audit", "--audit", ids[0]]) == 0
    assert capsys.readouterr().out.startswith("http://localhost:8501/audit?run=credit-audit&audit=")


def test_share_link_follows_the_servers_configured_address(sample, tmp_path):
    """`debugkit share` from a folder whose .streamlit/config.toml moves the dashboard to
    port 8600 under /dk: the link uses that address, and the output says --base-url for
    any other (issue 31: it used to print localhost:8501 whatever the server's address)."""
    run, ids = sample
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text('[server]\nport = 8600\nbaseUrlPath = "dk"\n')
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith("STREAMLIT_") and k != "DEBUGKIT_BASE_URL"}
    env["HOME"] = str(tmp_path / "home")

    def share(*extra, **more):
        return subprocess.run([console_script(), "share", str(run), "--audit", ids[0], *extra], cwd=tmp_path,
                              env={**env, **more}, capture_output=True, text=True, timeout=120)

    p = share()
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("http://localhost:8600/dk/audit?run=credit-audit&audit=")
    assert "Streamlit's settings give" in p.stderr and str(tmp_path / ".streamlit" / "config.toml") in p.stderr
    assert "pass --base-url URL" in p.stderr
    # Streamlit's environment variables win over its files, as under `streamlit run`
    p = share(STREAMLIT_SERVER_PORT="8700", STREAMLIT_BROWSER_SERVER_ADDRESS="dk.example.org")
    assert p.stdout.startswith("http://dk.example.org:8700/dk/audit?"), p.stdout
    # an explicit address is taken as given, without the note
    p = share("--base-url", "https://reviewers.example.org")
    assert p.stdout.startswith("https://reviewers.example.org/audit?") and "--base-url" not in p.stderr


def test_the_real_command(sample):
    run, ids = sample
    proc = subprocess.run([sys.executable, "-m", "debugkit", "audit", "show", str(run), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["id"] == ids[0]


def test_diagnose_reports_stored_audits(sample, capsys, tmp_path):
    import os
    import shutil

    run, ids = sample
    assert main(["diagnose", str(run), "--json"]) == 0
    found = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "bias_audit"]
    verdicts = {e["id"]: e["verdict"] for e in list_audits(run)}
    assert sorted(f["evidence"]["audit"] for f in found) == sorted(i for i in ids if verdicts[i] != "pass")
    for f in found:
        assert f["severity"] == {"fail": "warning", "needs_review": "info"}[f["evidence"]["verdict"]]
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    target = copy / "audits" / ids[0] / "audit.json"
    os.chmod(target, 0o644)
    target.write_text(target.read_text().replace('"verdict": "', '"verdict": "x', 1))
    assert main(["diagnose", str(copy), "--json"]) == 0
    bad = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["kind"] == "audit_tampered"]
    assert len(bad) == 1 and bad[0]["severity"] == "error" and ids[0] in bad[0]["message"]
