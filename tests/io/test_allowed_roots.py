"""Symlinks and roots cannot get around DEBUGKIT_ALLOWED_ROOTS (issue 22, item 4).

Every path opened for a visitor (a listed run, ``?run=``, a file inside a run) is
resolved and checked against the allow-list.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from debugkit.errors import InvalidInputError
from debugkit.io import served_runs
from debugkit.io.run import open_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_runs" / "digits-mlp"


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A store inside the allow-list, and an outside folder with a run and a secret."""
    allowed = tmp_path / "served"
    st_dir = allowed / "store"
    st_dir.mkdir(parents=True)
    outside = tmp_path / "outside"
    shutil.copytree(SAMPLE, outside / "private-run")
    (outside / "secret.txt").write_text('{"python": "SECRET-OUTSIDE"}')
    monkeypatch.setenv("DEBUGKIT_STORE", str(st_dir))
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(st_dir))
    monkeypatch.setenv("DEBUGKIT_ALLOWED_ROOTS", str(allowed))
    return st_dir, outside


def test_a_symlinked_run_folder_is_not_listed_nor_opened(server):
    st_dir, outside = server
    (st_dir / "linked").symlink_to(outside / "private-run", target_is_directory=True)
    shutil.copytree(SAMPLE, st_dir / "real")
    assert [e.id for e in served_runs.find_runs([st_dir])] == ["real"]
    with pytest.raises(InvalidInputError, match="run 'linked': no such run"):
        served_runs.resolve_run("linked", [st_dir])
    with pytest.raises(InvalidInputError, match="outside the folders this server may open"):
        open_run(st_dir / "linked")


def test_a_symlinked_file_inside_a_run_is_refused(server):
    st_dir, outside = server
    run = st_dir / "leaky"
    shutil.copytree(SAMPLE, run)
    env = run / "env.json"
    env.unlink(missing_ok=True)
    env.symlink_to(outside / "secret.txt")
    with pytest.raises(InvalidInputError, match=r"env\.json: a link to .*secret\.txt, outside the folders"):
        open_run(run)
    # A link that stays inside the allow-list is fine.
    env.unlink()
    shutil.copy(SAMPLE / "env.json", st_dir / "env-copy.json") if (SAMPLE / "env.json").exists() else \
        (st_dir / "env-copy.json").write_text("{}")
    env.symlink_to(st_dir / "env-copy.json")
    assert open_run(run).manifest


def test_the_overview_page_does_not_show_a_linked_file(server):
    st_dir, outside = server
    run = st_dir / "leaky"
    shutil.copytree(SAMPLE, run)
    (run / "env.json").unlink(missing_ok=True)
    (run / "env.json").symlink_to(outside / "secret.txt")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["run"] = "leaky"
    at.switch_page("pages/overview.py")
    at.run()
    assert not at.exception
    shown = "\n".join(str(x.value) for x in [*at.markdown, *at.error, *at.warning, *at.info,
                                               *at.code, *at.caption, *at.json])
    assert "SECRET-OUTSIDE" not in shown
    assert "outside the folders this server may open" in shown


def test_bundled_samples_outside_the_allow_list_are_not_opened(tmp_path, monkeypatch):
    """DEBUGKIT_ROOTS unset: the defaults include sample_runs/, which lies outside."""
    st_dir = tmp_path / "store"
    st_dir.mkdir()
    monkeypatch.setenv("DEBUGKIT_STORE", str(st_dir))
    monkeypatch.delenv("DEBUGKIT_ROOTS", raising=False)
    monkeypatch.setenv("DEBUGKIT_ALLOWED_ROOTS", str(tmp_path))
    assert "digits-mlp" not in [e.id for e in served_runs.find_runs(served_runs.default_roots())]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
    at.query_params["run"] = "digits-mlp"
    at.run()
    assert not at.exception
    assert any("run 'digits-mlp': no such run" in e.value for e in at.sidebar.error)


def test_debugkit_ui_refuses_a_folder_outside_the_allow_list(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    shutil.copytree(SAMPLE, outside / "r")
    exe = Path(sys.executable).parent / "debugkit"
    env = {**os.environ, "DEBUGKIT_ALLOWED_ROOTS": str(inside)}
    proc = subprocess.run([str(exe if exe.is_file() else "debugkit"), "ui", "outside", "--headless",
                           "--port", "1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "outside the folders this server may open" in proc.stderr
