"""`debugkit ui`'s command line: the app's Streamlit config travels as options when the
server runs in the user's folder, and the folder's own config wins."""

from __future__ import annotations

from pathlib import Path

from debugkit.cli.ui import app_config_flags, app_path


def pairs(flags):
    return dict(zip(flags[::2], flags[1::2]))


def test_app_config_is_passed_from_another_folder(tmp_path):
    f = pairs(app_config_flags(app_path(), tmp_path))
    assert f["--server.maxUploadSize"] == "2048"
    assert f["--server.enableXsrfProtection"] == "true"
    assert f["--client.toolbarMode"] == "viewer"
    # no theme is forced: it follows the visitor (issue 35)
    assert not any(k.startswith("--theme.") for k in f)


def test_the_folders_own_config_wins(tmp_path):
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "config.toml").write_text('[theme]\nbase = "dark"\n')
    f = pairs(app_config_flags(app_path(), tmp_path))
    assert "--theme.base" not in f and f["--server.maxUploadSize"] == "2048"


def test_nothing_extra_from_the_checkout_itself():
    assert app_config_flags(app_path(), Path(app_path()).parent) == []


def test_info_counts_ranks(tmp_path):
    """`debugkit info` says "ranks: 1" for a single-process run, and lists several."""
    import subprocess
    import sys

    console = Path(sys.executable).with_name("debugkit")
    root = Path(app_path()).parent / "sample_runs"
    one = subprocess.run([str(console), "info", str(root / "digits-mlp")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert "\nranks:   1\n" in one.stdout, one.stdout
    four = subprocess.run([str(console), "info", str(root / "ddp-straggler")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert "\nranks:   4 (0, 1, 2, 3)\n" in four.stdout, four.stdout


def test_serve_preloads_every_module_it_names():
    """pages/_serve.py's preload list names real modules (a renamed one would silently
    stop being preloaded), and a module that cannot be imported is reported, not raised."""
    from pages._serve import PRELOAD, preload

    assert preload() == []
    assert preload(["debugkit.io.run", "debugkit.no_such_module"]) == ["debugkit.no_such_module"]
    assert "pandas" in PRELOAD and "torch" not in PRELOAD


def test_launcher_routes_a_fresh_servers_first_request_through_app_py(monkeypatch):
    """pages/_serve.py starts Streamlit in st.navigation mode: a PagesManager for app.py
    (which has a pages/ folder beside it) would otherwise start in the older
    pages-directory mode, where a fresh server's first request runs the page file
    directly and page_guard has to rerun it under the router."""
    from streamlit.runtime.pages_manager import PagesManager

    from pages._serve import _navigation_mode

    app_py = str(app_path())
    monkeypatch.setattr(PagesManager, "uses_pages_directory", None)
    PagesManager(app_py)
    assert PagesManager.uses_pages_directory is True  # what Streamlit does by itself
    monkeypatch.setattr(PagesManager, "uses_pages_directory", None)
    _navigation_mode()
    PagesManager(app_py)
    assert PagesManager.uses_pages_directory is False


def test_launcher_skips_streamlits_direct_run_check_before_the_first_element(monkeypatch):
    """The first element drawn on a server made Streamlit walk the stack
    (``inspect.stack()``, resolving the source file of every loaded module: 40-49 ms of
    thread CPU in the cold shell floor's first script run, marks written by a copy of
    app.py) to decide whether to warn about a script run without ``streamlit run``;
    pages/_serve.py always runs ``streamlit run``, so it skips that check."""
    import inspect

    import streamlit as st
    import streamlit.delta_generator as dg

    from pages._serve import _no_direct_run_check

    def walked(*a, **k):
        raise AssertionError("inspect.stack() walked before the first element")

    monkeypatch.setattr(dg, "_use_warning_has_been_displayed", False)
    monkeypatch.setattr(inspect, "stack", walked)
    _no_direct_run_check()
    st.markdown("first element")  # bare mode: the element is dropped, the check is not run
    assert dg._use_warning_has_been_displayed is True


def test_the_favicon_imports_nothing_the_preload_has_not(tmp_path):
    """app.py's ``st.set_page_config(page_icon=...)`` runs in each new session's first
    script run: with the favicon as a data URL it neither re-encodes the PNG nor (after
    the launcher's preload) imports anything, PIL included (16 ms on a quiet machine).
    Checked in a new process, so nothing another test imported hides an import."""
    import os
    import subprocess
    import sys

    code = """
import sys
from pages._serve import PRELOAD, preload
assert preload(PRELOAD) == []
from pathlib import Path
from streamlit.commands.page_config import _get_favicon_string
from pages import _ui
before = set(sys.modules)
icon = _get_favicon_string(_ui.data_url(Path("assets/favicon.png")))
assert icon.startswith("data:image/png;base64,"), icon[:40]
print(sorted(set(sys.modules) - before))
"""
    root = Path(app_path()).parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_ui_serves_through_the_preloading_launcher(tmp_path, monkeypatch):
    """`debugkit ui` execs `python <checkout>/pages/_serve.py run <app.py> ...` with the store
    and roots in its environment."""
    import argparse
    import os
    import sys

    from debugkit.cli import ui

    seen = {}

    def fake_exec(exe, cmd, env):
        seen.update(exe=exe, cmd=cmd, env=env)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execve", fake_exec)
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(paths=[str(tmp_path)], port=8600, host=None, headless=True,
                              share_only=False)
    try:
        ui.run(args)
    except SystemExit:
        pass
    assert seen["cmd"][:4] == [sys.executable, str(app_path().parent / "pages" / "_serve.py"), "run",
                               str(app_path())]
    assert seen["cmd"][-4:] == ["--server.port", "8600", "--server.headless", "true"]
    assert seen["env"]["DEBUGKIT_ROOTS"] == str(tmp_path.resolve())


def test_serve_names_the_object_store_client_of_the_servers_settings():
    from pages._serve import PRELOAD, preload_names, store_packages

    assert store_packages({"DEBUGKIT_ROOTS": "/srv/runs:s3://team/runs:s3a://x",
                           "DEBUGKIT_AUDIT_STORE": "gs://audits/a"}) == ["s3fs", "gcsfs"]
    assert store_packages({"DEBUGKIT_ROOTS": "/srv/runs", "DEBUGKIT_STORE": "./runs"}) == []
    names = preload_names({"DEBUGKIT_ROOTS": "s3://team/runs"})
    assert names.index("s3fs") == names.index("debugkit.io.served_runs") + 1
    assert preload_names({"DEBUGKIT_ROOTS": "/srv/runs"}) == PRELOAD


def test_a_server_of_a_bucket_imports_its_s3_client_before_any_visit(tmp_path):
    """The launcher started with a bucket root loads s3fs's stack (aiohttp's C parser is
    mapped into the server process) with no page opened, so the first Home visit does not
    pay the import (about 0.7 s of CPU)."""
    import os
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = Path(app_path()).parent
    env = {**os.environ, "PYTHONPATH": str(root), "DEBUGKIT_ROOTS": "s3://no-such-bucket/runs",
           "DEBUGKIT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, str(root / "pages" / "_serve.py"), "run", str(app_path()),
         "--server.headless", "true", "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    maps = Path(f"/proc/{proc.pid}/maps")
    try:
        deadline = time.monotonic() + 240  # a bound on the wait, not a timing assertion
        while time.monotonic() < deadline and proc.poll() is None \
                and "aiohttp/_http_parser" not in maps.read_text():
            time.sleep(0.5)
        assert proc.poll() is None and "aiohttp/_http_parser" in maps.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
