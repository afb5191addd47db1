"""An uploaded audit_targets.json never chooses code, and audits are computed outside the
server process under a time and memory limit (issue 22, item 2)."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from debugkit.audit.targets import load_target, read_targets, write_targets
from debugkit.audit.worker import compute_audit
from debugkit.errors import AuditError, InvalidInputError

ROOT = Path(__file__).resolve().parents[2]


def hostile_targets(run_dir: Path, out: Path) -> None:
    """The attack: an examples function that trains and writes a run, named by the run."""
    (run_dir / "audit_targets.json").write_text(json.dumps({"targets": [
        {"name": "epoch", "loader": "examples.digits:train", "kwargs": {"out": str(out), "epochs": 1}}]}))


def test_a_run_cannot_pick_an_examples_function(run_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("DEBUGKIT_AUDIT_LOADERS", raising=False)
    out = tmp_path / "written-by-the-run"
    hostile_targets(run_dir, out)
    (t,) = read_targets(run_dir)
    assert t["allowed"] is False
    with pytest.raises(InvalidInputError, match=r"loader 'examples.digits:train' is not one this "
                                                r"server's operator allows \(allowed: examples.credit:audit_target"):
        load_target(run_dir, "epoch")
    with pytest.raises(AuditError, match="is not one this server's operator allows"):
        compute_audit(run_dir, "epoch", {}, timeout_s=120)
    assert not out.exists()


def test_the_operator_lists_exact_loaders(run_dir, tmp_path, monkeypatch):
    out = tmp_path / "written-by-the-run"
    hostile_targets(run_dir, out)
    monkeypatch.setenv("DEBUGKIT_AUDIT_LOADERS", "examples.credit:audit_target, examples")
    assert read_targets(run_dir)[0]["allowed"] is False  # a prefix no longer allows a module
    monkeypatch.setenv("DEBUGKIT_AUDIT_LOADERS", "")
    write_targets(run_dir, [{"name": "gbm", "loader": "examples.credit:audit_target"}])
    assert read_targets(run_dir)[0]["allowed"] is False
    with pytest.raises(InvalidInputError, match=r"\(allowed: none;"):
        load_target(run_dir, "gbm")
    assert not out.exists()


@pytest.fixture
def operator_loaders(tmp_path, monkeypatch):
    """An operator's loader module (on sys.path, listed in DEBUGKIT_AUDIT_LOADERS) that
    misbehaves: hangs, allocates 8 GiB, or records which process ran it."""
    mod = tmp_path / "oploaders"
    mod.mkdir()
    (mod / "__init__.py").write_text(textwrap.dedent('''
        import os
        import time


        def hang(run_dir):
            while True:
                time.sleep(0.05)


        def hog(run_dir):
            return {"big": bytearray(8 << 30)}


        def whoami(run_dir, marker=""):
            with open(marker, "w") as f:
                f.write(str(os.getpid()))
            raise ValueError("stopping here")
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEBUGKIT_AUDIT_LOADERS",
                       "oploaders:hang,oploaders:hog,oploaders:whoami")
    return tmp_path


def test_the_audit_runs_in_another_process(run_dir, operator_loaders, tmp_path):
    marker = tmp_path / "pid"
    write_targets(run_dir, [{"name": "who", "loader": "oploaders:whoami",
                             "kwargs": {"marker": str(marker)}}])
    with pytest.raises(AuditError, match=r"oploaders:whoami failed: ValueError: stopping here"):
        compute_audit(run_dir, "who", {}, timeout_s=120)
    assert int(marker.read_text()) != os.getpid()


def test_a_hanging_loader_is_stopped_at_the_time_limit(run_dir, operator_loaders):
    write_targets(run_dir, [{"name": "slow", "loader": "oploaders:hang"}])
    with pytest.raises(AuditError, match=r"'slow': the audit did not finish within 5 s and was stopped"):
        compute_audit(run_dir, "slow", {}, timeout_s=5)


def test_a_loader_over_the_memory_limit_is_stopped(run_dir, operator_loaders):
    write_targets(run_dir, [{"name": "big", "loader": "oploaders:hog"}])
    with pytest.raises(AuditError, match=r"'big': .*MemoryError"):
        compute_audit(run_dir, "big", {}, timeout_s=120, memory_mb=2048)


def test_the_page_does_not_offer_a_run_chosen_loader(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.delenv("DEBUGKIT_AUDIT_LOADERS", raising=False)
    store = Path(os.environ["DEBUGKIT_STORE"])
    run = store / "uploaded"
    shutil.copytree(ROOT / "sample_runs" / "credit-audit", run, ignore=shutil.ignore_patterns("audits"))
    out = tmp_path / "written-by-the-run"
    hostile_targets(run, out)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["run"] = "uploaded"
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    assert any("uses loader 'examples.digits:train', which this server's operator does not allow"
               in w.value for w in at.warning)
    assert not [b for b in at.button if b.label == "Compute audit"]
    assert not out.exists()
