"""Replay trust is decided by the viewer, never by the run (issue 22, item 1).

A capture may name any function whose file's hash it knows, with any arguments. These
tests are the two gadgets found by attacking a server (``debugkit._fsutil:
atomic_write_json`` with ``path``/``obj``, ``debugkit.cli:main`` with ``argv``), each
run through the installed ``debugkit`` console script from another folder, as a user
would, and through the Python API: nothing is written, nothing is run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from debugkit.errors import CodeRefusedError
from debugkit.replay import policy, replay

from ..conftest import console_script
from .conftest import ROOT, record_failure

FID = "r0-s0000075-exception"
CLI_TIMEOUT_S = 300


def debugkit_cli(*args, cwd, env_extra=None):
    """The installed console script, as a user runs it."""
    exe = console_script("debugkit")
    env = {k: v for k, v in os.environ.items() if k != "DEBUGKIT_CODE_ROOTS"}
    env.update(env_extra or {})
    return subprocess.run([exe, *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S)


def forge(run: Path, spec: str, file_path: str, kwargs: dict) -> Path:
    """A copy of a bundled sample whose capture names ``spec`` with that file's true hash."""
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run)
    digest = hashlib.sha256(open(file_path, "rb").read()).hexdigest()
    module, _, qual = spec.partition(":")
    fj = run / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    rec.update(code={"model_factory": {"spec": spec, "module": module, "qualname": qual,
                                       "file": file_path, "sha256": digest}},
               factory_kwargs=kwargs)
    fj.write_text(json.dumps(rec))
    return run


def gadgets(tmp_path: Path) -> list[tuple[Path, Path]]:
    """``(run, marker)`` for both gadgets; the marker exists only if the gadget ran."""
    import debugkit._fsutil
    import debugkit.cli

    out = []
    m1 = tmp_path / "written-by-the-run.json"
    r1 = forge(tmp_path / "gadget-write", "debugkit._fsutil:atomic_write_json",
               debugkit._fsutil.__file__, {"path": str(m1), "obj": {"owned": True}})
    out.append((r1, m1))
    m2 = tmp_path / "ran-by-the-run"
    r2 = forge(tmp_path / "gadget-cli", "debugkit.cli:main", debugkit.cli.__file__,
               {"argv": ["profile", "--out", str(tmp_path / "p"), "--", "sh", "-c", f"touch {m2}"]})
    out.append((r2, m2))
    return out


@pytest.mark.parametrize("allow", [[], ["--allow-code"]])
def test_gadgets_never_run_from_the_checkout(tmp_path, allow):
    """``python -m debugkit replay`` from a checkout's root, as the attack was run: the
    gadget's module is found (the working directory is on sys.path and holds debugkit/),
    and refused, with and without --allow-code; nothing written or run."""
    for run, marker in gadgets(tmp_path):
        env = {k: v for k, v in os.environ.items() if k != "DEBUGKIT_CODE_ROOTS"}
        proc = subprocess.run([sys.executable, "-m", "debugkit", "replay", os.path.relpath(run, ROOT),
                               "--device", "cpu", *allow], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=CLI_TIMEOUT_S)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "debugkit itself" in proc.stderr and "refusing to run it" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert not marker.exists()


@pytest.mark.parametrize("allow", [[], ["--allow-code"]])
def test_gadgets_never_run_from_the_console_script(tmp_path, allow):
    """The installed console script, from the checkout and from another folder."""
    for run, marker in gadgets(tmp_path):
        for cwd in (ROOT, tmp_path):
            proc = debugkit_cli("replay", os.path.relpath(run, cwd), "--device", "cpu", *allow, cwd=cwd)
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert "Traceback" not in proc.stderr
            assert not marker.exists()


def test_gadgets_never_run_even_inside_allowed_roots(tmp_path):
    """An operator who allows the whole checkout still never lets debugkit's own
    functions be factories."""
    for run, marker in gadgets(tmp_path):
        with pytest.raises(CodeRefusedError, match=r"debugkit itself .*refusing to run it"):
            replay(run, device="cpu", allow_code=True, code_roots=[ROOT, ROOT / "debugkit"])
        assert not marker.exists()


def test_the_readme_replay_still_works_from_the_checkout():
    """The working directory is the CLI's allowed folder. (``python -m``: until issue 17
    puts the working directory on the console script's sys.path, the script does not find
    ``examples`` at all.)"""
    env = {k: v for k, v in os.environ.items() if k != "DEBUGKIT_CODE_ROOTS"}
    proc = subprocess.run([sys.executable, "-m", "debugkit", "replay", "sample_runs/digits-bad-label",
                           "--device", "cpu", "--json"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["reproduced"] is True and r["code"][0]["status"] == "verified"


def test_a_run_cannot_pick_code_outside_the_allowed_folders(project, tmp_path, monkeypatch):
    """A verified factory in a project the viewer did not allow is refused; allowing the
    folder (--code-root or DEBUGKIT_CODE_ROOTS) lets it run."""
    run = record_failure(tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(project)}
    proc = debugkit_cli("replay", os.path.relpath(run, elsewhere), "--device", "cpu", cwd=elsewhere,
                        env_extra=env)
    assert proc.returncode == 2
    assert "is outside the folders whose code this replay may run" in proc.stderr
    assert "--code-root DIR" in proc.stderr
    ok = debugkit_cli("replay", os.path.relpath(run, elsewhere), "--device", "cpu", "--json",
                      "--code-root", os.path.relpath(project, elsewhere), cwd=elsewhere, env_extra=env)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["code"][0]["status"] == "verified"
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(elsewhere))
    with pytest.raises(CodeRefusedError, match="outside the folders"):
        replay(run, device="cpu", allow_code=True)


def test_site_packages_code_never_runs_even_with_allow_code(tmp_path):
    import sklearn.datasets._base as base

    run = forge(tmp_path / "forged", "sklearn.datasets._base:load_digits", base.__file__, {})
    for allow in (False, True):
        with pytest.raises(CodeRefusedError, match="belongs to an installed package"):
            replay(run, allow_code=allow, code_roots=[Path(base.__file__).parents[3]])


def test_a_symlink_into_debugkit_is_refused(project, tmp_path):
    """A module in an allowed folder that is a symlink to debugkit's source is judged by
    where it really is."""
    import debugkit._fsutil

    link = project / "tproj" / "helpers.py"
    link.symlink_to(debugkit._fsutil.__file__)
    marker = tmp_path / "written"
    run = forge(tmp_path / "forged", "tproj.helpers:atomic_write_json", str(link),
                {"path": str(marker), "obj": {}})
    with pytest.raises(CodeRefusedError, match="debugkit itself"):
        replay(run, device="cpu", allow_code=True, code_roots=[project])
    assert not marker.exists()


@pytest.mark.parametrize("kwargs, match", [
    ({"x": float("nan")}, r"factory_kwargs\['x'\] is the non-finite number nan"),
    ({"x": {"a": [[[[[[[[[[1]]]]]]]]]]}}, "nested deeper than 8 levels"),
    ({"x": "a" * 20_000}, "a string of 20000 characters"),
    ({"x": list(range(20_000))}, "larger than 10000 values"),
    ({"x": b"bytes"}, r"factory_kwargs\['x'\] is a bytes"),
    ({"x": {1: 2}}, "non-string key"),
    (["not", "a", "dict"], "a list, not an object"),
])
def test_factory_kwargs_are_plain_data(kwargs, match):
    with pytest.raises(CodeRefusedError, match=match):
        policy.check_plain_kwargs(kwargs, "run")
    assert policy.check_plain_kwargs({"vocab": {"a": 3}, "hidden": [1, 2.5, None, True]}) is not None


def test_non_plain_kwargs_are_refused_before_the_child_starts(project, tmp_path):
    run = record_failure(tmp_path / "run")
    fj = next((run / "failures").iterdir()) / "failure.json"
    # json.dumps writes NaN; a capture can carry it.
    rec = json.loads(fj.read_text())
    rec["factory_kwargs"] = {"width": float("nan")}
    fj.write_text(json.dumps(rec))
    with pytest.raises(CodeRefusedError, match="non-finite number"):
        replay(run, device="cpu")


def test_a_factory_that_returns_no_module_is_refused(project, tmp_path):
    src = project / "tproj" / "notmodel.py"
    src.write_text("import torch.nn as nn\n\n\ndef build_model(width=4):\n"
                   "    return nn.Linear(3, 2)\n\n\ndef make(width=4):\n    return 'a string'\n")
    run = record_failure(tmp_path / "run", model_factory="tproj.notmodel:build_model")
    fj = next((run / "failures").iterdir()) / "failure.json"
    rec = json.loads(fj.read_text())
    for k in ("spec", "qualname"):
        rec["code"]["model_factory"][k] = rec["code"]["model_factory"][k].replace("build_model", "make")
    fj.write_text(json.dumps(rec))
    from debugkit.errors import ReplayError

    with pytest.raises(ReplayError, match=r"returned str, not a torch.nn.Module"):
        replay(run, device="cpu")


@pytest.mark.parametrize("setting, auth, signed_in, expected", [
    (None, False, False, False),  # an anonymous visitor of an open server
    (None, True, False, False),
    (None, True, True, True),
    ("anyone", False, False, True),
    ("nobody", True, True, False),
])
def test_who_may_trust_code(monkeypatch, setting, auth, signed_in, expected):
    if setting is None:
        monkeypatch.delenv("DEBUGKIT_CODE_TRUST", raising=False)
    else:
        monkeypatch.setenv("DEBUGKIT_CODE_TRUST", setting)
    assert policy.may_trust_code(auth, signed_in) is expected


def test_server_roots_default_to_the_bundled_examples_for_bundled_samples_only(monkeypatch, tmp_path):
    monkeypatch.delenv("DEBUGKIT_CODE_ROOTS", raising=False)
    assert policy.server_code_roots(ROOT / "sample_runs" / "digits-bad-label") == [(ROOT / "examples").resolve()]
    assert policy.server_code_roots(tmp_path / "uploaded") == []
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", os.pathsep.join([str(tmp_path), ""]))
    assert policy.server_code_roots(tmp_path / "uploaded") == [tmp_path.resolve()]


def test_which_runs_ask_the_visitor_to_trust_code(tmp_path):
    """The replay page's question, decided in the library: every run but a bundled
    sample whose recorded hash covers its code."""
    from debugkit.replay.code import CHANGED, VERIFIED, needs_trust
    from debugkit.replay.policy import SAMPLES_DIR, is_bundled_sample

    sample = SAMPLES_DIR / "digits-bad-label"
    assert is_bundled_sample(sample) and not is_bundled_sample(tmp_path)
    assert not needs_trust(sample, [{"status": VERIFIED}])
    assert needs_trust(sample, [{"status": CHANGED}])
    assert needs_trust(tmp_path, [{"status": VERIFIED}])
    assert not needs_trust(tmp_path, [])  # nothing to run
