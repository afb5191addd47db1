"""Which run this visitor is looking at: the served roots, the run list, the selected
run (``?run=<id>``, validated) and the empty state of a page without one."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from debugkit.errors import DebugkitError
from debugkit.io import served_runs as run_store
from debugkit.io.fs import as_path, is_url
from pages._ui import end_page, md, visitor_text

SESSION_RUN = "debugkit_run_path"


def store_dir() -> Path:
    return run_store.default_store()


def roots() -> list[Path]:
    """The served folders, the run store (uploads) and the runs opened by path: what
    the picker lists and what ``?run=`` may name (for every visitor, after a reload)."""
    return run_store.served_roots()


class RunList:
    """The served runs: :class:`debugkit.io.served_runs.RunEntry` objects in listing order, with
    an id map and a map from each run's path (as listed, and resolved) to its id, made
    once per listing, so a page looks a run up without resolving every run's path."""

    def __init__(self, entries: list[run_store.RunEntry]):
        self.entries = list(entries)
        self.by_id = {e.id: e for e in self.entries}
        self._ids_by_place: dict[str, str] = {}
        for e in self.entries:
            self._ids_by_place.setdefault(str(e.path), e.id)
        for e in self.entries:
            if not is_url(str(e.path)):
                self._ids_by_place.setdefault(os.path.realpath(e.path), e.id)

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.entries]

    def path(self, run_id: str | None) -> str | None:
        """The path of the run with that id (as a string), or None."""
        e = self.by_id.get(run_id) if run_id else None
        return str(e.path) if e is not None else None

    def id_for(self, path: str) -> str | None:
        """The id of the run at ``path`` (any spelling of a local folder: one
        ``realpath``), or None when it is not listed."""
        rid = self._ids_by_place.get(str(path))
        if rid is None and not is_url(str(path)):
            rid = self._ids_by_place.get(os.path.realpath(path))
        return rid


# A resource, not data: every caller gets the same (read-only) list, not an unpickled copy.
@st.cache_resource(ttl=5, max_entries=64, show_spinner=False)
def _find(roots_key: tuple[str, ...]) -> RunList:
    return RunList(run_store.find_runs([as_path(r) for r in roots_key]))


def run_entries() -> RunList:
    """Every run under the served roots (cached for a few seconds)."""
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
    """The id the run list gives the run at ``path``, or None."""
    return run_entries().id_for(path)


def apply_query_params() -> None:
    """Open the run named by ``?run=<id>`` (validated; a bad value shows an error)."""
    rid = st.query_params.get("run")
    if not rid:
        return
    current = st.session_state.get(SESSION_RUN)
    if current and run_id_for(current) == rid:
        return
    entry = run_entries().by_id.get(rid)
    if entry is not None:
        st.session_state[SESSION_RUN] = str(entry.path)
        return
    try:  # not listed a moment ago: list again (a new run), or say why not
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
        end_page()
    return path


def overlay_picker(path, key: str, *, placeholder: str, help: str,
                   in_popover: bool = False) -> tuple[dict, list[str]]:
    """The "Overlay runs" picker of Scalars and Gradients: other served runs to draw over
    this one, kept in the URL as ``?with=<id>`` (repeated). Returns ``({run id: path},
    the picked ids)``; ``key`` names the widget's state for this run. ``in_popover``: the
    multiselect is in a popover named after the picked runs (``_ui.controls``), so its
    front-end code is not loaded before a chart drawn with it."""
    from contextlib import nullcontext

    from pages import _query
    from pages._ui import controls

    listed = run_entries()
    here = listed.id_for(path)
    choices = [rid for rid in listed.ids if rid != here]
    _query.list_from_query(key, choices, name="with", expected="a run this server lists besides this one")
    st.session_state[key] = [rid for rid in st.session_state.get(key) or [] if rid in choices]
    where = (controls("Overlay runs", st.session_state[key], icon=":material/stacked_line_chart:")
             if in_popover else nullcontext())
    with where:
        picked = st.multiselect("Overlay runs", choices, key=key, placeholder=placeholder, help=help)
    _query.list_to_query(key, picked, [], name="with")
    return {e.id: str(e.path) for e in listed}, picked
