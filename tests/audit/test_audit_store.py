"""The team's shared audit store (issue 29, many servers one bucket): an audit stored there
by one server (or CLI) is listed and verified by every other, written files first and
``audit.json`` last, never into the run, and a torn upload, a hostile object or a wrong
configuration is a clear DebugkitError. All against the real S3 server (SeaweedFS)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from debugkit.audit import audit_store
from debugkit.audit.stored_audits import (
    AUDIT_JSON,
    MSG_NO_AUDIT,
    ROWS_FILE,
    audits_signature,
    content_id,
    list_audits,
    load_audit,
    server_audits_dir,
    store_audit_folder,
)
from debugkit.errors import AuditError, InvalidInputError

from ..conftest import ROOT, SAMPLE_RUNS, console_script

SAMPLE = SAMPLE_RUNS / "credit-audit"
SAMPLE_IDS = [e["id"] for e in list_audits(SAMPLE)]


@pytest.fixture
def team(s3, tmp_path, monkeypatch):
    """A bucket holding credit-audit without its audits, and the team's shared audit store
    configured in the environment as an operator sets it."""
    bucket = s3.new_bucket("team")
    fs = s3.filesystem()
    local = tmp_path / "credit-audit"
    shutil.copytree(SAMPLE, local, ignore=shutil.ignore_patterns("audits"))
    fs.put(f"{local}/", f"{bucket}/runs/credit-audit/", recursive=True)
    monkeypatch.setenv("DEBUGKIT_AUDIT_STORE", f"s3://{bucket}/audits")
    monkeypatch.setenv("DEBUGKIT_STORE", str(tmp_path / "store-a"))
    monkeypatch.setenv("DEBUGKIT_CACHE", str(tmp_path / "cache-a"))
    monkeypatch.setenv("DEBUGKIT_LISTING_TTL_S", "0")  # every read sees the bucket as it is now
    run = f"s3://{bucket}/runs/credit-audit"
    key = audit_store.run_key(run)
    return SimpleNamespace(bucket=bucket, fs=fs, run=run, key=key, root=f"{bucket}/audits",
                           store=tmp_path / "store-a", tmp=tmp_path, s3=s3)


def _objects(t, prefix) -> list[str]:
    t.fs.invalidate_cache()
    return sorted(t.fs.find(prefix))


def _other_server(t, name: str, **extra) -> dict:
    """The environment of another machine: its own store and cache, the same bucket and
    audit store configuration (the test's environment holds the credentials)."""
    env = {**os.environ, "DEBUGKIT_STORE": str(t.tmp / f"store-{name}"),
           "DEBUGKIT_CACHE": str(t.tmp / f"cache-{name}"), "PYTHONPATH": str(ROOT), **extra}
    return {k: v for k, v in env.items() if v is not None}


def test_an_audit_stored_by_one_server_is_listed_shown_and_shared_by_another(team):
    t = team
    run_objects = _objects(t, f"{t.bucket}/runs")
    target = server_audits_dir(t.run, t.store)
    assert str(target) == f"s3://{t.root}/{t.key}"  # the shared store, not the machine's own
    audit = store_audit_folder(t.run, SAMPLE / "audits" / SAMPLE_IDS[0], target)
    assert audit.id == SAMPLE_IDS[0]
    # exactly the audit's two files, under <store>/<key>/<id>/; nothing in the run
    assert _objects(t, t.root) == [f"{t.root}/{t.key}/{audit.id}/{AUDIT_JSON}",
                                   f"{t.root}/{t.key}/{audit.id}/{ROWS_FILE}"]
    assert _objects(t, f"{t.bucket}/runs") == run_objects
    # machine B, through the console script: the same configuration sees it ...
    env_b = _other_server(t, "b", DEBUGKIT_SECRET="one-secret-the-operator-configures")
    out = subprocess.run([console_script(), "audit", "list", t.run, "--json"], env=env_b, cwd=t.tmp,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert [a["id"] for a in json.loads(out.stdout)["audits"]] == [audit.id]
    shown = subprocess.run([console_script(), "audit", "show", t.run], env=env_b, cwd=t.tmp,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"audit {audit.id}: ")
    link = subprocess.run([console_script(), "share", t.run, "--audit", audit.id, "--base-url",
                           "https://debugkit.example.org"], env=env_b, cwd=t.tmp,
                          capture_output=True, text=True, timeout=300)
    assert link.returncode == 0, link.stderr
    assert f"audit={audit.id}" in link.stdout
    # ... and a machine without it does not (the audit is in no run and no machine's store)
    alone = subprocess.run([console_script(), "audit", "list", t.run, "--json"], cwd=t.tmp,
                           env=_other_server(t, "c", DEBUGKIT_AUDIT_STORE=None),
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)["audits"] == []


def test_storing_the_same_audit_again_adds_nothing(team):
    t = team
    target = server_audits_dir(t.run, t.store)
    first = store_audit_folder(t.run, SAMPLE / "audits" / SAMPLE_IDS[0], target)
    threads = [threading.Thread(target=audit_store.publish, args=(SAMPLE / "audits" / SAMPLE_IDS[0], target))
               for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    again = store_audit_folder(t.run, SAMPLE / "audits" / SAMPLE_IDS[0], target)
    assert again.id == first.id
    assert len(_objects(t, t.root)) == 2
    assert load_audit(t.run, first.id).json_bytes() == (SAMPLE / "audits" / first.id / AUDIT_JSON).read_bytes()


def test_the_files_are_uploaded_first_and_audit_json_last(team):
    """Counted by a proxy in front of S3, in a new process: every PUT of the audit's files
    comes before the PUT of its audit.json."""
    from ..s3server import CountingProxy

    t = team
    proxy = CountingProxy(int(t.s3.endpoint.rsplit(":", 1)[1]))
    code = ("import sys; from debugkit.audit.stored_audits import server_audits_dir, store_audit_folder; "
            "store_audit_folder(sys.argv[1], sys.argv[2], server_audits_dir(sys.argv[1], sys.argv[3]))")
    done = subprocess.run([sys.executable, "-c", code, t.run, str(SAMPLE / "audits" / SAMPLE_IDS[1]),
                           str(t.store)], env=_other_server(t, "p", AWS_ENDPOINT_URL=proxy.endpoint),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    puts = [line.split()[1] for line in proxy.take() if line.startswith("PUT ")]
    assert [p.rsplit("/", 1)[1] for p in puts] == [ROWS_FILE, AUDIT_JSON]
    assert all(p.startswith(f"/{t.root}/{t.key}/{SAMPLE_IDS[1]}/") for p in puts)


def test_a_torn_upload_is_not_listed_until_its_audit_json_lands(team):
    t = team
    aid = SAMPLE_IDS[0]
    folder = f"{t.root}/{t.key}/{aid}"
    t.fs.put(str(SAMPLE / "audits" / aid / ROWS_FILE), f"{folder}/{ROWS_FILE}")  # the writer died here
    assert list_audits(t.run) == []
    assert audits_signature(t.run) == ()
    with pytest.raises(AuditError) as err:
        load_audit(t.run, aid)
    assert str(err.value) == MSG_NO_AUDIT.format(run=t.run, id=aid, known="none")
    t.fs.put(str(SAMPLE / "audits" / aid / AUDIT_JSON), f"{folder}/{AUDIT_JSON}")  # a later writer finishes
    assert [e["id"] for e in list_audits(t.run)] == [aid]
    assert audits_signature(t.run) == ((f"s3://{t.root}/{t.key}", (aid,)),)
    assert load_audit(t.run, aid).doc == _doc(aid)


def _doc(aid: str) -> dict:
    return json.loads((SAMPLE / "audits" / aid / AUDIT_JSON).read_bytes())


def _with_id(doc: dict) -> tuple[str, bytes]:
    doc = {k: v for k, v in doc.items() if k != "id"}
    aid = content_id(doc)
    return aid, json.dumps({"id": aid, **doc}).encode()


def _hostile(case: str) -> tuple[str, bytes]:
    """(audit id, audit.json bytes) of a hostile or broken object in the shared store."""
    aid = SAMPLE_IDS[0]
    if case == "not json":
        return "0123456789abcdef", b"{not json"
    if case == "file name leaving the audit":
        return _with_id({**_doc(aid), "files": {"../../runs/credit-audit/manifest.json": "0" * 64}})
    if case == "another audit's json":
        return "fedcba9876543210", (SAMPLE / "audits" / aid / AUDIT_JSON).read_bytes()
    if case == "nested too deep":
        return "00000000000000aa", b'{"id": "00000000000000aa", "pad": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    if case == "rows missing":
        return aid, (SAMPLE / "audits" / aid / AUDIT_JSON).read_bytes()
    raise AssertionError(case)


@pytest.mark.parametrize("case, match", [
    ("not json", "unreadable"),
    ("file name leaving the audit", "bad file name"),
    ("another audit's json", "was modified after the audit was stored"),
    ("nested too deep", "unreadable"),
    ("rows missing", "rows.parquet is unreadable \\(missing\\)"),
])
def test_a_hostile_object_in_the_store_is_an_error_naming_the_audit(team, case, match):
    from debugkit.diagnose import audit as audit_findings
    from debugkit.io.run import open_run

    t = team
    aid, raw = _hostile(case)
    t.fs.pipe(f"{t.root}/{t.key}/{aid}/{AUDIT_JSON}", raw)
    # names that are not audit ids are never listed
    t.fs.pipe(f"{t.root}/{t.key}/not-an-id/{AUDIT_JSON}", raw)
    t.fs.pipe(f"{t.root}/{t.key}/{aid.upper()}/{AUDIT_JSON}", raw)
    assert [e["id"] for e in list_audits(t.run)] == [aid]
    with pytest.raises(AuditError, match=f"audit {aid}: .*{match}"):
        load_audit(t.run, aid)
    (finding,) = audit_findings.collect(open_run(t.run), {})
    assert (finding.kind, finding.evidence) == ("audit_tampered", {"audit": aid})


def test_the_key_is_the_same_for_every_spelling_of_a_run_url():
    assert audit_store.run_key("s3://b/runs/x/") == audit_store.run_key("s3a://b/runs/x") == \
        audit_store.run_key("S3://b/runs/x")
    assert audit_store.run_key("s3://b/runs/x") != audit_store.run_key("s3://b/runs/y")


def test_a_misconfigured_store_is_a_clear_error(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_AUDIT_STORE", "relative/audits")
    with pytest.raises(InvalidInputError, match="DEBUGKIT_AUDIT_STORE='relative/audits': expected an "
                                                "object-store URL"):
        audit_store.check()
    monkeypatch.setenv("DEBUGKIT_AUDIT_STORE", "s3://no-such-bucket-of-the-team/audits")
    with pytest.raises(AuditError, match="DEBUGKIT_AUDIT_STORE=s3://no-such-bucket-of-the-team/audits: the "
                                         "shared audit store cannot be listed .*bucket does not exist"):
        audit_store.check()
    with pytest.raises(AuditError, match="cannot be listed"):
        list_audits(SAMPLE)  # every reader says so too


def test_the_store_can_be_configured_in_secrets_toml(tmp_path, monkeypatch):
    monkeypatch.delenv("DEBUGKIT_AUDIT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text('[debugkit]\naudit_store = "s3://team/audits"\n')
    value, where = audit_store.configured()
    assert value == "s3://team/audits"
    assert where == f"DEBUGKIT_AUDIT_STORE in {tmp_path / '.streamlit' / 'secrets.toml'}"


@pytest.mark.parametrize("case", ["missing bucket", "wrong secret", "no credentials"])
def test_debugkit_ui_refuses_to_start_with_a_store_it_cannot_list(s3, tmp_path, case):
    bucket = s3.new_bucket("ui")
    env = _other_server(SimpleNamespace(tmp=tmp_path), "ui",
                        DEBUGKIT_AUDIT_STORE=f"s3://{'no-such-bucket-x' if case == 'missing bucket' else bucket}/audits")
    if case == "wrong secret":
        env["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
    if case == "no credentials":
        env.pop("AWS_SECRET_ACCESS_KEY")
        env.pop("AWS_ACCESS_KEY_ID")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = subprocess.run([console_script(), "ui", "--headless", "--port", str(port)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "the shared audit store cannot be listed" in out.stderr
    assert {"missing bucket": "bucket does not exist", "wrong secret": "signature",
            "no credentials": "Unable to locate credentials"}[case] in out.stderr


def test_reading_the_shared_store_is_one_listing_and_one_fetch_per_file(team):
    """Counted by a proxy in front of S3, in a new process with listings kept 600 s: three
    listings of the run's audits, loading, verifying and reading one of them make one
    listing of the whole store and one GET of each of the audit's two files (a batch)."""
    from ..s3server import CountingProxy

    t = team
    store_audit_folder(t.run, SAMPLE / "audits" / SAMPLE_IDS[0], server_audits_dir(t.run, t.store))
    proxy = CountingProxy(int(t.s3.endpoint.rsplit(":", 1)[1]))
    code = ("import sys; from debugkit.audit.stored_audits import list_audits, load_audit\n"
            "for _ in range(3): assert [e['id'] for e in list_audits(sys.argv[1])] == [sys.argv[2]]\n"
            "assert len(load_audit(sys.argv[1], sys.argv[2]).rows) == 400")
    done = subprocess.run([sys.executable, "-c", code, t.run, SAMPLE_IDS[0]],
                          env=_other_server(t, "r", AWS_ENDPOINT_URL=proxy.endpoint,
                                            DEBUGKIT_LISTING_TTL_S="600"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = proxy.take()
    store = [x for x in lines if "prefix=audits" in x or x.split()[1].startswith(f"/{t.root}/")]
    assert len([x for x in store if "list-type=2" in x]) == 1, store
    assert sorted(x.split()[1].rsplit("/", 1)[1] for x in store if "list-type" not in x) == \
        [AUDIT_JSON, ROWS_FILE], store
    assert all(x.startswith("GET ") for x in store), store
