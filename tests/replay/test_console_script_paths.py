"""`debugkit replay` through the installed console script, from other folders, with
relative run paths (issue 17, items 1-2).

A console script does not put the working directory on ``sys.path`` (``python -m``
does), and the replay child runs in another working directory: the factory must be
found where ``python -m`` would find it, and every path must be absolute by the time it
reaches the child.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from debugkit.replay import code as C

from .conftest import record_failure

CONSOLE = Path(sys.executable).with_name("debugkit")


def console(*args, cwd, drop=()):
    """The installed ``debugkit`` script, as a user types it (no PYTHONPATH help)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", *drop)}
    return subprocess.run([str(CONSOLE), *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _check(rep, name):
    return next(c for c in rep["checks"] if c["name"] == name)


def test_console_script_exists():
    assert CONSOLE.is_file(), f"{CONSOLE}: the editable install's console script is missing"


def test_relative_run_path_from_the_runs_parent(project, tmp_path):
    """`debugkit replay runs/r` from the folder holding runs/: the factory is found under
    the folder it was imported from when recorded, the capture under the relative path."""
    work = tmp_path / "work"
    record_failure(work / "runs" / "r")
    p = console("replay", "runs/r", "--json", cwd=work)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["original"]["type"] == "RuntimeError"
    # the child loaded the capture from the relative path's folder
    assert _check(rep, "captured_state")["ok"] is True, _check(rep, "captured_state")
    (factory,) = [c for c in rep["code"] if c["role"] == "model_factory"]
    assert factory["status"] == C.VERIFIED
    assert factory["search_root"] == str(project)


def test_factory_found_in_the_working_directory(project, tmp_path):
    """The project moved to another folder (the recorded one is gone): run from the new
    project root, as the README says, the console script finds it as `python -m` would."""
    record_failure(project / "runs" / "r")
    moved = tmp_path / "clone"
    shutil.copytree(project, moved)
    shutil.rmtree(project)
    # No DEBUGKIT_CODE_ROOTS: the command line's own default (its working directory,
    # issue 22's policy) is what allows the moved project's code.
    p = console("replay", "runs/r", "--json", cwd=moved, drop=("DEBUGKIT_CODE_ROOTS",))
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    (factory,) = [c for c in rep["code"] if c["role"] == "model_factory"]
    assert factory["status"] == C.VERIFIED
    assert factory["local_file"] == str((moved / "tproj" / "model.py").resolve())
    assert _check(rep, "captured_state")["ok"] is True


def test_missing_module_message_says_where_it_looked(project, tmp_path):
    record_failure(tmp_path / "runs" / "r")
    shutil.rmtree(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = console("replay", "../runs/r", cwd=elsewhere)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert "module 'tproj.model' is not found on this machine" in p.stderr
    assert f"looked in the working directory {elsewhere}" in p.stderr
    # the whole fix, in one flag (issue 31): no PYTHONPATH needed with it
    assert "pass --code-root DIR, DIR being the project folder that holds 'tproj'" in p.stderr
    assert "PYTHONPATH" not in p.stderr


def test_one_code_root_flag_is_enough_from_another_folder(project, tmp_path):
    """The project moved and the replay runs from an unrelated folder: `--code-root DIR`
    alone (no PYTHONPATH, no DEBUGKIT_CODE_ROOTS) both finds the module and allows it.
    Before, it allowed the folder but the module was "not found ... add it to PYTHONPATH";
    PYTHONPATH alone gave "outside the folders ... pass --code-root"."""
    record_failure(tmp_path / "runs" / "r")
    moved = tmp_path / "clone"
    shutil.copytree(project, moved)
    shutil.rmtree(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p = console("replay", "../runs/r", "--json", "--code-root", "../clone", cwd=elsewhere,
                drop=("DEBUGKIT_CODE_ROOTS",))
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    (factory,) = [c for c in rep["code"] if c["role"] == "model_factory"]
    assert factory["status"] == C.VERIFIED and factory["search_root"] == str(moved.resolve())
    assert factory["local_file"] == str((moved / "tproj" / "model.py").resolve())
    assert rep["original"]["type"] == "RuntimeError"
    assert _check(rep, "captured_state")["ok"] is True, _check(rep, "captured_state")
    # PYTHONPATH alone still does not allow the code, and the refusal names the one flag
    env_p = subprocess.run([str(CONSOLE), "replay", "../runs/r"], cwd=elsewhere, capture_output=True,
                           text=True, timeout=300,
                           env={**{k: v for k, v in os.environ.items() if k != "DEBUGKIT_CODE_ROOTS"},
                                "PYTHONPATH": str(moved)})
    assert env_p.returncode == 2
    assert "outside the folders" in env_p.stderr and "pass --code-root DIR" in env_p.stderr


def test_recorded_root_of_modules_and_packages(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert C.recorded_root("a.b.m", str(tmp_path / "a" / "b" / "m.py")) == str(tmp_path)
    assert C.recorded_root("a.b", str(tmp_path / "a" / "b" / "__init__.py")) == str(tmp_path)
    assert C.recorded_root("m", str(tmp_path / "m.py")) == str(tmp_path)
    # the file name or a folder does not match the module: the recorded path tells nothing
    assert C.recorded_root("a.b.m", str(tmp_path / "a" / "c" / "m.py")) is None
    assert C.recorded_root("a.b.m", str(tmp_path / "a" / "b" / "other.py")) is None
    assert C.recorded_root("a.m", str(tmp_path / "gone" / "a" / "m.py")) is None
    assert C.recorded_root("m", None) is None


def test_default_search_path_is_absolute_and_starts_with_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = C.default_search_path({})
    assert path[0] == str(tmp_path)
    assert all(os.path.isabs(p) for p in path)
    assert len(path) == len(set(path))
