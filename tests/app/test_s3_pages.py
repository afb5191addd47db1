"""Every page over runs served from a real S3 server (``DEBUGKIT_ROOTS=s3://bucket/runs``,
credentials only in the environment): Home and the picker list the bucket's runs, and
each page shows what it shows for the same run on local disk."""

from __future__ import annotations

import pytest

from ..conftest import ROOT, SAMPLE_RUNS
from ._apptest import new_app


def _texts(at) -> str:
    out = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "code", "error",
                 "warning", "info", "success", "metric"):
        out += [str(getattr(e, "value", "")) + str(getattr(e, "label", "")) for e in getattr(at, kind)]
    return "\n".join(out)


@pytest.fixture
def served(s3, s3_samples, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_ROOTS", s3_samples)
    return s3_samples


def _open(page, **query):
    at = new_app(**query)
    if page != "home":
        at.switch_page(f"pages/{page}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _rendered(page, root, monkeypatch, **query) -> str:
    """What the page shows with ``root`` served, the root's text replaced by ``R``."""
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(root))
    return _texts(_open(page, **query)).replace(str(root), "R")


def test_home_and_the_picker_list_the_buckets_runs(s3, s3_samples, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(SAMPLE_RUNS))
    local = _open("home").dataframe[0].value
    monkeypatch.setenv("DEBUGKIT_ROOTS", s3_samples)
    at = _open("home")
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    ids = sorted(p.name for p in SAMPLE_RUNS.iterdir() if p.is_dir())
    assert sorted(table["run"]) == ids
    assert table.reset_index(drop=True).equals(local.reset_index(drop=True))
    rows = {r["run"]: r for r in table.to_dict("records")}
    assert rows["digits-bad-label"]["status"] == "failed" and rows["digits-bad-label"]["failures"] == 1
    picker = [s for s in at.sidebar.selectbox if "run" in s.label.lower()]
    assert picker and set(ids) <= {str(o) for o in picker[0].options}


@pytest.mark.parametrize("page,run", [
    ("overview", "digits-bad-label"), ("scalars", "digits-mlp"),
    ("gradients", "digits-exploding"), ("memory", "memory-leak"),
    ("profiler", "digits-profiled"), ("distributed", "ddp-hang"),
    ("distributed", "ddp-straggler"), ("checkpoints", "digits-resumed"),
    ("audit", "credit-audit"), ("compare", "digits-compare-lr"),
])
def test_each_page_shows_a_bucket_run_as_it_shows_the_local_one(s3, s3_samples, monkeypatch,
                                                                  page, run):
    remote = _rendered(page, s3_samples, monkeypatch, run=run)
    local = _rendered(page, SAMPLE_RUNS, monkeypatch, run=run)
    assert remote == local
    for bug in ("local runs only", "No audit stored", "no such file", "missing from the capture"):
        assert bug not in remote


def test_checkpoints_page_lists_and_verifies_the_buckets_checkpoints(served):
    at = _open("checkpoints", run="digits-resumed")
    assert not at.error, [e.value for e in at.error]
    at.session_state["ckpt_listing"] = True  # the list's grid, drawn when opened
    at.run()
    frames = [d.value for d in at.dataframe] + [t.value for t in at.table]
    assert any(len(d) >= 2 for d in frames)


def test_audit_page_shows_the_stored_audits(served):
    from debugkit.audit.stored_audits import list_audits

    at = _open("audit", run="credit-audit")
    # the only error box is the audit's own verdict (a failing fairness check)
    assert [e.value.split("**")[1] for e in at.error] == ["Verdict: Fail."]
    assert "No audit stored" not in _texts(at)
    names = {a["name"] for a in list_audits(SAMPLE_RUNS / "credit-audit")}
    options = {str(o) for s in at.selectbox for o in s.options}
    assert len(names) == 2 and all(any(n in o for o in options) for n in names), options


@pytest.mark.slow
def test_replay_page_replays_a_capture_in_the_bucket(served, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(ROOT / "examples"))
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    at = new_app(run="digits-bad-label", timeout=300)
    at.switch_page("pages/replay.py")
    at.run()
    assert not at.exception and not at.error, [e.value for e in list(at.exception) + list(at.error)]
    assert "missing from the capture" not in _texts(at)
    (box,) = at.checkbox  # a run opened from a bucket is not a bundled sample: trust asked
    box.check().run()
    at.button(key="replay_button").click().run()
    assert not at.exception, [e.value for e in at.exception]
    # the replay's verdict: the culprit sample, found in the capture fetched from the bucket
    assert [e.value for e in at.error] == [
        "sample 6 (dataset index 1474) has label 12, outside [0, 10); cross-entropy indexes the "
        "output with it (on CUDA a device-side assert, on the CPU 'Target 12 is out of bounds')"]


def test_compare_page_offers_the_buckets_runs_as_base(served):
    at = _open("compare", run="digits-compare-lr")
    base = [s for s in at.selectbox if "base" in s.label.lower()]
    assert base and "digits-compare-base" in {str(o) for o in base[0].options}


def test_a_share_link_made_on_one_server_opens_on_another(s3, s3_samples, tmp_path, monkeypatch):
    """Two dashboards serve one bucket, each with its own machine's store (no shared
    disk); the share secret comes from configuration (DEBUGKIT_SECRET). A link made with
    `debugkit share` on the first machine opens the audit alone on the second; with
    another secret (a per-machine one) it is refused."""
    import os
    import subprocess
    import sys
    import urllib.parse
    from pathlib import Path

    from debugkit.audit.stored_audits import list_audits

    audit_id = list_audits(SAMPLE_RUNS / "credit-audit")[0]["id"]
    secret = "a-secret-the-operator-configures-for-every-server"
    env = dict(os.environ, **s3.env(), DEBUGKIT_SECRET=secret, DEBUGKIT_ROOTS=s3_samples,
               DEBUGKIT_STORE=str(tmp_path / "machine-a-store"), PYTHONPATH=str(ROOT))
    made = subprocess.run([str(Path(sys.executable).with_name("debugkit")), "share",
                           f"{s3_samples}/credit-audit", "--audit", audit_id,
                           "--base-url", "http://machine-a:8501"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(made.stdout.strip()).query))
    assert (query["run"], query["audit"]) == ("credit-audit", audit_id)

    def open_on_machine_b(secret_b):
        monkeypatch.setenv("DEBUGKIT_ROOTS", s3_samples)
        monkeypatch.setenv("DEBUGKIT_STORE", str(tmp_path / "machine-b-store"))
        if secret_b:
            monkeypatch.setenv("DEBUGKIT_SECRET", secret_b)
        else:
            monkeypatch.delenv("DEBUGKIT_SECRET", raising=False)
        at = new_app(**query)
        at.switch_page("pages/audit.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    at = open_on_machine_b(secret)
    assert at.session_state["debugkit_pages"] == {"pages/audit.py"}
    assert f"Shared read-only view of audit `{audit_id}`" in _texts(at)
    refused = open_on_machine_b(None)  # machine B's own per-machine secret
    assert f"Shared read-only view of audit `{audit_id}`" not in _texts(refused)


# ---------------------------------------------------------------------------- the shared audit store
def test_the_audit_page_lists_an_audit_another_server_stored_in_the_shared_store(s3, tmp_path, monkeypatch):
    """An audit of a bucket run stored by another machine in the team's shared audit store
    (DEBUGKIT_AUDIT_STORE) is picked and drawn by this server's Bias audit page."""
    import shutil

    from debugkit.audit.stored_audits import list_audits, server_audits_dir, store_audit_folder

    bucket = s3.new_bucket("shared")
    local = tmp_path / "credit-audit"
    shutil.copytree(SAMPLE_RUNS / "credit-audit", local, ignore=shutil.ignore_patterns("audits"))
    s3.filesystem().put(f"{local}/", f"{bucket}/runs/credit-audit/", recursive=True)
    run = f"s3://{bucket}/runs/credit-audit"
    monkeypatch.setenv("DEBUGKIT_AUDIT_STORE", f"s3://{bucket}/audits")
    monkeypatch.setenv("DEBUGKIT_ROOTS", f"s3://{bucket}/runs")
    monkeypatch.setenv("DEBUGKIT_LISTING_TTL_S", "0")
    aid = list_audits(SAMPLE_RUNS / "credit-audit")[1]["id"]  # the failing one
    store_audit_folder(run, SAMPLE_RUNS / "credit-audit" / "audits" / aid,
                       server_audits_dir(run, tmp_path / "other-machines-store"))
    at = _open("audit", run="credit-audit")
    assert "No audit stored" not in _texts(at)
    (picker,) = [s for s in at.selectbox if s.label == "Audit"]
    assert picker.options == [picker.format_func(aid)] and picker.value == aid
    assert "Verdict: Fail." in _texts(at)


def test_the_audit_page_says_when_the_shared_store_cannot_be_listed(s3, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_AUDIT_STORE", "s3://no-such-bucket-of-the-team/audits")
    at = _open("audit", run="credit-audit")  # a bundled sample: outside the run store
    (error,) = [e.value.replace("\\:", ":") for e in at.error]  # markdown-escaped
    assert "DEBUGKIT_AUDIT_STORE=s3://no-such-bucket-of-the-team/audits: the shared audit store " \
           "cannot be listed" in error and "bucket does not exist" in error


def test_the_overview_shows_the_finding_of_an_audit_stored_in_the_shared_store_later(s3, tmp_path, monkeypatch):
    """Home indexes the bucket run (no audit yet); another machine then stores a failing
    audit of it in the shared store: this server's Overview shows its bias_audit finding
    (the index is keyed on the run's own files, which did not change)."""
    import shutil

    from debugkit.audit.stored_audits import list_audits, server_audits_dir, store_audit_folder

    bucket = s3.new_bucket("shared")
    local = tmp_path / "credit-audit"
    shutil.copytree(SAMPLE_RUNS / "credit-audit", local, ignore=shutil.ignore_patterns("audits"))
    s3.filesystem().put(f"{local}/", f"{bucket}/runs/credit-audit/", recursive=True)
    run = f"s3://{bucket}/runs/credit-audit"
    for name, value in (("DEBUGKIT_AUDIT_STORE", f"s3://{bucket}/audits"), ("DEBUGKIT_ROOTS", f"s3://{bucket}/runs"),
                        ("DEBUGKIT_LISTING_TTL_S", "0"), ("DEBUGKIT_CACHE", str(tmp_path / "cache"))):
        monkeypatch.setenv(name, value)
    home = _open("home")
    assert list(home.dataframe[0].value["run"]) == ["credit-audit"]
    assert "Bias audit" not in _texts(_open("overview", run="credit-audit"))
    aid = list_audits(SAMPLE_RUNS / "credit-audit")[1]["id"]  # the failing one
    store_audit_folder(run, SAMPLE_RUNS / "credit-audit" / "audits" / aid,
                       server_audits_dir(run, tmp_path / "other-machines-store"))
    assert f"Bias audit {aid} (Gradient boosting (sklearn), held-out 40 %) fails" in \
        _texts(_open("overview", run="credit-audit"))
