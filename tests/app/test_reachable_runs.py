"""Every run a user brings in stays listed and reachable by ``?run=`` for as long as it
exists: a run opened by path (after a reload, i.e. in a fresh session) and an uploaded
run on a server started on other folders (``debugkit ui PATH`` sets DEBUGKIT_ROOTS)."""

from __future__ import annotations

import shutil

from debugkit.io import served_runs as run_store

from ..conftest import SAMPLE_RUNS
from ._apptest import new_app


def _picker_options(at):
    if not at.sidebar.selectbox:  # a run is open: its picker is drawn when opened, as a click does
        at.session_state["sidebar_pick_run"] = True
        at.run()
    return list(at.sidebar.selectbox[0].options)


def test_a_run_opened_by_path_is_listed_and_linkable_after_a_reload(tmp_path):
    elsewhere = tmp_path / "elsewhere" / "my-probe-run"
    shutil.copytree(SAMPLE_RUNS / "digits-exploding", elsewhere)
    at = new_app()
    at.session_state["sidebar_open_path"] = True
    at.run()
    at.sidebar.text_input[0].input(str(elsewhere))
    at.sidebar.button[0].click()
    at.run()
    assert not at.exception
    assert "my-probe-run" in _picker_options(at)
    assert at.query_params["run"] == "my-probe-run"

    # A reload is a new session: nothing of the first one's state survives.
    again = new_app(run="my-probe-run")
    again.switch_page("pages/overview.py")
    again.run()
    assert not again.exception
    assert "my-probe-run" in _picker_options(again)
    assert not [e.value for e in again.error], [e.value for e in again.error]
    assert again.session_state["debugkit_run_path"] == str(elsewhere)

    # Gone from disk: gone from the list, and the link says so instead of failing.
    shutil.rmtree(elsewhere)
    run_store_entries = [e.id for e in run_store.find_runs(run_store.served_roots())]
    assert "my-probe-run" not in run_store_entries


def test_an_upload_is_served_when_the_server_serves_other_folders(tmp_path, monkeypatch):
    # `debugkit ui sample_runs`: DEBUGKIT_ROOTS names sample_runs alone; uploads land in
    # the store, which must be listed too.
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(SAMPLE_RUNS))
    store = run_store.default_store()
    shutil.copytree(SAMPLE_RUNS / "memory-leak", store / "memory-leak-2")
    at = new_app(run="memory-leak-2")
    at.switch_page("pages/overview.py")
    at.run()
    assert not at.exception
    assert "memory-leak-2" in _picker_options(at)
    assert not [e.value for e in at.error], [e.value for e in at.error]
    assert at.session_state["debugkit_run_path"] == str(store / "memory-leak-2")
    home = new_app()
    home.run()
    assert "memory-leak-2" in str([t.value for t in home.get("table")] + [d.value for d in home.dataframe])


def test_a_run_opened_inside_a_served_folder_is_listed_once(tmp_path):
    run_store.remember_opened(str(SAMPLE_RUNS / "digits-mlp"))
    ids = [e.id for e in run_store.find_runs(run_store.served_roots())]
    assert ids.count("digits-mlp") == 1
    assert not [i for i in ids if i.endswith(".digits-mlp")]
