"""A replay whose child segfaults or hangs is reported within its timeout; the parent lives.

Code that changed since the run, or that the capture does not cover, never runs unasked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from debugkit.errors import CodeRefusedError, ReplayError
from debugkit.replay import replay

from .conftest import ROOT, record_failure, run_cli


def test_segfault_in_the_replayed_step_is_reported(project, tmp_path):
    run = record_failure(tmp_path / "run", step_fn="tproj.model:segfault_step")
    r = replay(run, device="cpu", timeout_s=120)
    assert r["replay"]["type"] == "SIGSEGV"
    assert r["replay"]["message"].startswith("the replay process died of SIGSEGV (a segmentation fault")
    assert "model.py:" in r["replay"]["message"] and "in segfault_step" in r["replay"]["message"]
    assert r["reproduced"] is False and r["same_error"] is False
    # The data checks sent before the step still come back.
    assert {c["name"]: c["ok"] for c in r["checks"]}["labels"] is True
    assert any(n.startswith("Python stack of the replay process") for n in r["notes"])
    assert os.getpid() > 0  # this process is still here to check


def test_hang_is_stopped_at_the_timeout_with_where_it_was(project, tmp_path):
    run = record_failure(tmp_path / "run", step_fn="tproj.model:hang_step")
    r = replay(run, device="cpu", timeout_s=30)
    assert r["replay"]["type"] == "Timeout"
    assert r["replay"]["message"].startswith("the replay did not finish within 30 s and was stopped; "
                                             "it was at ")
    assert "in hang_step" in r["replay"]["message"]
    assert r["reproduced"] is False


def test_memory_cap_stops_a_step_that_allocates_too_much(project, tmp_path):
    run = record_failure(tmp_path / "run", step_fn="tproj.model:alloc_step")
    r = replay(run, device="cpu", memory_mb=2048)
    assert r["replay"]["type"] == "RuntimeError"
    assert "can't allocate memory" in r["replay"]["message"]
    assert any(n.startswith("the replay ran under a memory cap of 2048 MiB") for n in r["notes"])


def test_cli_reports_a_segfault_with_exit_status_0(project, tmp_path):
    run = record_failure(tmp_path / "run", step_fn="tproj.model:segfault_step")
    proc = run_cli("replay", run, "--json", "--device", "cpu", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["replay"]["type"] == "SIGSEGV"


def test_changed_factory_file_is_refused_without_allow_code(project, tmp_path):
    run = record_failure(tmp_path / "run")
    src = project / "tproj" / "model.py"
    src.write_text(src.read_text() + "\n# edited after the run\n")
    proc = run_cli("replay", run, "--json", cwd=project)
    assert proc.returncode == 2
    assert proc.stdout == ""
    line = proc.stderr.strip()
    assert "\n" not in line
    assert line.startswith("debugkit: error: model_factory tproj.model:build_model: ")
    assert "the code changed since the run; pass --allow-code" in line
    ok = run_cli("replay", run, "--json", "--allow-code", "--device", "cpu", cwd=project)
    assert ok.returncode == 0, ok.stderr
    r = json.loads(ok.stdout)
    # The recorded step raised by hand; the model itself is fine, so the replay runs clean.
    assert r["replay"] is None and r["reproduced"] is False
    assert r["code"][0]["status"] == "changed"


def _forge(tmp_path, spec: str, file_path: str, kwargs: dict) -> os.PathLike:
    """A copy of a sample whose capture names ``spec`` with that file's true hash."""
    run = tmp_path / "forged"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run)
    digest = hashlib.sha256(open(file_path, "rb").read()).hexdigest()
    module, _, qual = spec.partition(":")
    code = {"model_factory": {"spec": spec, "module": module, "qualname": qual,
                              "file": file_path, "sha256": digest}}
    fj = run / "failures" / "r0-s0000075-exception" / "failure.json"
    rec = json.loads(fj.read_text())
    rec.update(code=code, factory_kwargs=kwargs)
    fj.write_text(json.dumps(rec))
    return run


@pytest.mark.parametrize("allow", [False, True])
def test_os_system_never_runs(tmp_path, allow):
    marker = tmp_path / "pwned"
    run = _forge(tmp_path, "os:system", os.__file__, {"command": f"touch {marker}"})
    with pytest.raises(CodeRefusedError, match=r"os:system: .*os\.py is part of Python's standard library"):
        replay(run, allow_code=allow)
    assert not marker.exists()


def test_a_callable_imported_into_a_project_module_never_runs(project, tmp_path):
    marker = tmp_path / "pwned"
    evil = project / "tproj" / "reexport.py"
    evil.write_text("from os import system\nfrom tproj.model import build_model\n")
    run = _forge(tmp_path, "tproj.reexport:system", str(evil), {"command": f"touch {marker}"})
    with pytest.raises(CodeRefusedError, match=r"'system' is not defined by a 'def' or 'class' in .*reexport\.py"):
        replay(run, allow_code=True)
    proc = run_cli("replay", run, "--allow-code", cwd=project)
    assert proc.returncode == 2 and "is not defined by a 'def' or 'class'" in proc.stderr
    assert not marker.exists()


def test_installed_package_code_needs_allow_code(tmp_path):
    import sklearn.datasets._base as base

    run = _forge(tmp_path, "sklearn.datasets._base:load_digits", base.__file__, {})
    with pytest.raises(CodeRefusedError, match="belongs to an installed package"):
        replay(run)


def test_factory_that_raises_is_a_setup_error(project, tmp_path):
    run = record_failure(tmp_path / "run", factory_kwargs={"width": 4})
    fj = next((run / "failures").iterdir()) / "failure.json"
    rec = json.loads(fj.read_text())
    rec["factory_kwargs"] = {"no_such_argument": 1}
    fj.write_text(json.dumps(rec))
    with pytest.raises(ReplayError, match=r"the replay could not start the step: TypeError: "
                                          r"build_model\(\) got an unexpected keyword argument") as e:
        replay(run, device="cpu")
    assert "\n" not in str(e.value)


def test_device_cuda_without_cuda_is_refused():
    proc = run_cli("replay", ROOT / "sample_runs" / "digits-bad-label", "--device", "cuda")
    assert proc.returncode == 2
    assert "--device cuda: CUDA is not available on this machine" in proc.stderr


@pytest.mark.parametrize("args, match", [
    ([], "no failure captures"),
    (["--failure", "r0-s0000001-exception"], "no failure captures"),
])
def test_run_without_captures_exits_2(args, match):
    proc = run_cli("replay", ROOT / "sample_runs" / "digits-mlp", *args)
    assert proc.returncode == 2 and match in proc.stderr


@pytest.mark.parametrize("args, match", [
    (["--failure", "r0-s0000099-exception"], r"no failure capture 'r0-s0000099-exception'; captures: r0-s0000075-exception"),
    (["--failure", "../../etc/passwd"], r"failure id '../../etc/passwd': expected an id like"),
    (["--timeout", "0"], r"timeout 0.0: expected a number of seconds > 0"),
    (["--memory-mb", "10"], r"memory cap 10.0: expected a number of MiB >= 256"),
])
def test_bad_arguments_exit_2_with_one_line(args, match):
    import re

    proc = run_cli("replay", ROOT / "sample_runs" / "digits-bad-label", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert re.search(match, proc.stderr), proc.stderr


def test_missing_run_exits_2(tmp_path):
    proc = run_cli("replay", tmp_path / "nope")
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
