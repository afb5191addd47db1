"""Every name a run records is resolved inside the run (issue 28, item 2), through the
console script: a failure capture whose failure.json claims the id ``../../../evil``
and whose ``rng.json`` links out (the repro download's member names and files), a
trace that links out (Distributed's straggler analysis), an audit file that links out.
The pages are in tests/app/test_recorded_names.py; the helper is
``debugkit._fsutil.in_run``."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from ..conftest import console_script

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_runs"


def debugkit(*args, cwd, timeout=300):
    exe = console_script("debugkit")
    return subprocess.run([exe, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_a_failure_id_and_capture_file_never_leave_the_run(tmp_path):
    run = tmp_path / "runs" / "bad"
    shutil.copytree(SAMPLES / "digits-bad-label", run)
    cap = run / "failures" / "r0-s0000075-exception"
    rec = json.loads((cap / "failure.json").read_text())
    rec["id"] = "../../../evil"
    (cap / "failure.json").write_text(json.dumps(rec))
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"secret": "from outside the run"}))
    (cap / "rng.json").unlink()
    (cap / "rng.json").symlink_to(secret)

    info = debugkit("info", run, "--json", cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    doc = json.loads(info.stdout)
    assert [f["id"] for f in doc["failures"]] == ["r0-s0000075-exception"]
    assert any("is not its folder's name" in w for w in doc["warnings"])

    out = tmp_path / "repro.zip"
    p = debugkit("replay", run, "--repro", out, "--device", "cpu", cwd=ROOT)
    # the capture's rng.json links out of the run: refused, nothing exported from outside
    assert p.returncode == 2, p.stdout + p.stderr
    assert "capture file 'rng.json' is refused: it is a link leading outside the run" in p.stderr
    assert "Traceback" not in p.stderr
    if out.exists():
        names = zipfile.ZipFile(out).namelist()
        assert all(n.startswith("r0-s0000075-exception-repro/") for n in names), names
        assert not any("secret" in zipfile.ZipFile(out).read(n).decode("latin-1") for n in names)

    # with the link gone, the repro's members are named after the folder, never the claim
    (cap / "rng.json").unlink()
    shutil.copy(SAMPLES / "digits-bad-label" / "failures" / "r0-s0000075-exception" / "rng.json",
                cap / "rng.json")
    # (--allow-code: the checkout's examples/ may have changed since the sample was recorded)
    p = debugkit("replay", run, "--repro", out, "--device", "cpu", "--allow-code", cwd=ROOT)
    assert out.exists(), p.stdout + p.stderr
    names = zipfile.ZipFile(out).namelist()
    assert names and all(n.startswith("r0-s0000075-exception-repro/") for n in names), names


def test_a_trace_linking_out_of_the_run_is_not_read(tmp_path):
    run = tmp_path / "straggler"
    shutil.copytree(SAMPLES / "ddp-straggler", run)
    trace = run / "traces" / "rank2.pt.trace.json.gz"
    outside = tmp_path / "rank2.pt.trace.json.gz"
    shutil.move(trace, outside)
    trace.symlink_to(outside)
    p = debugkit("diagnose", run, "--json", cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr
    findings = json.loads(p.stdout)["findings"]
    # rank 2's trace (the straggler's) is outside: the trace analysis never sees it
    assert not [f for f in findings if f["evidence"].get("source") == "profiler_trace"]
    # the step-time analysis, from the run's own tables, still finds rank 2
    assert [f["rank"] for f in findings if f["evidence"].get("source") == "steps"] == [2]


def test_an_audit_file_linking_out_of_the_run_is_refused(tmp_path):
    run = tmp_path / "credit"
    shutil.copytree(SAMPLES / "credit-audit", run)
    audit_id = "bb8377267d8c1537"
    rows = run / "audits" / audit_id / "rows.parquet"
    outside = tmp_path / "rows.parquet"
    shutil.move(rows, outside)  # same bytes, same hash: only where it lies differs
    rows.symlink_to(outside)
    p = debugkit("audit", "show", run, "--audit", audit_id, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "audit file 'rows.parquet' is refused: it is a link leading outside the run" in p.stderr, \
        p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("name, why", [
    ("../../etc", "it contains '..'"), ("/etc/passwd", "it is an absolute path"),
    ("s3://other-bucket/x", "it names another location"), ("a\\..\\b", "backslash"),
    ("", "it is empty"), (None, "a NoneType, not a name"),
])
def test_in_run_refuses_names_that_leave_a_url_run_too(name, why):
    """For an fsspec run (a UPath), names are checked as text: no realpath on a URL."""
    from upath import UPath

    from debugkit._fsutil import in_run
    from debugkit.errors import OutsideRunError

    run = UPath("memory://bucket/runs/r1")
    with pytest.raises(OutsideRunError, match=why):
        in_run(run, "checkpoints", name)
    assert str(in_run(run, "checkpoints", "000000010")) == "memory://bucket/runs/r1/checkpoints/000000010"
