"""Which run this visitor is looking at: the served roots, the run list, the selected
run (``?run=<id>``, validated) and the empty state of a page without one."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from debugkit.errors import DebugkitError
from debugkit.io import store as run_store
from debugkit.io.fs import as_path, is_url
from pages._ui import md, visitor_text

SESSION_RUN = "debugkit_run_path"


def store_dir() -> Path:
    return run_store.default_store()


def roots() -> list[Path]:
    """The served folders, the run store (uploads) and the runs opened by path: what
    the picker lists and what ``?run=`` may name (for every visitor, after a reload)."""
    return run_store.served_roots()


@st.cache_data(ttl=5, max_entries=64, show_spinner=False)
def _find(roots_key: tuple[str, ...]):
    return [(e.id, str(e.path)) for e in run_store.find_runs([as_path(r) for r in roots_key])]


def run_entries() -> list[tuple[str, str]]:
    """``(id, path)`` of every run under the served roots."""
    return _find(tuple(str(r) for r in roots()))


def refresh_run_list() -> None:
    """Forget the cached run list (after an upload or a newly opened folder)."""
    _find.clear()


def select_run(path: str | None, run_id: str | None = None) -> None:
    st.session_state[SESSION_RUN] = path
    if run_id:
        st.query_params["run"] = run_id
    elif "run" in st.query_params:
        del st.query_params["run"]


def run_id_for(path: str) -> str | None:
    for rid, p in run_entries():
        if p == path or (not is_url(p) and not is_url(path)
                         and os.path.realpath(p) == os.path.realpath(path)):
            return rid
    return None


def apply_query_params() -> None:
    """Open the run named by ``?run=<id>`` (validated; a bad value shows an error)."""
    rid = st.query_params.get("run")
    if not rid:
        return
    current = st.session_state.get(SESSION_RUN)
    if current and run_id_for(current) == rid:
        return
    try:
        entry = run_store.resolve_run(rid, roots())
    except DebugkitError as exc:
        st.session_state["debugkit_link_error"] = str(exc)
        return
    st.session_state[SESSION_RUN] = str(entry.path)


def current_run_path() -> str | None:
    """The selected run's path, or None."""
    path = st.session_state.get(SESSION_RUN)
    if path and not _exists(path):
        st.session_state[SESSION_RUN] = None
        st.warning(f"The run at {md(visitor_text(path))} is gone (deleted or moved). Pick another run.")
        return None
    if path:
        rid = run_id_for(path)
        if rid and st.query_params.get("run") != rid:
            st.query_params["run"] = rid
    return path


def _exists(path: str) -> bool:
    """Whether a run path (local, or an fsspec URL such as ``s3://...``) still exists."""
    try:
        return as_path(path).exists()
    except (DebugkitError, OSError, ValueError):
        return False


def require_run(what: str) -> str:
    """The selected run's path; without one, an empty state that says what to do, then stop."""
    path = current_run_path()
    if not path:
        st.info(f"Pick a run in the sidebar to see {what}: a sample run, one from the run "
                f"store, a typed path, or an uploaded run directory or .zip.",
                icon=":material/arrow_back:")
        st.stop()
    return path


def overlay_picker(path, key: str, *, placeholder: str, help: str) -> tuple[dict, list[str]]:
    """The "Overlay runs" picker of Scalars and Gradients: other served runs to draw over
    this one, kept in the URL as ``?with=<id>`` (repeated). Returns ``({run id: entry},
    the picked ids)``; ``key`` names the widget's state for this run."""
    from pages import _query

    entries = dict(run_entries())
    here = run_id_for(path)
    choices = [rid for rid in entries if rid != here]
    if key not in st.session_state:
        st.session_state[key] = _query.query_choices("with", choices)
    picked = st.multiselect("Overlay runs", choices, key=key, placeholder=placeholder, help=help)
    if picked:
        if st.query_params.get_all("with") != picked:
            st.query_params["with"] = picked
    elif "with" in st.query_params:
        del st.query_params["with"]
    return entries, picked
