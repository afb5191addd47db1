"""The shared sidebar: the run picker (served runs, a typed path, an upload)."""

from __future__ import annotations

import streamlit as st

from debugkit.errors import DebugkitError
from debugkit.io import served_runs as run_store
from pages._runs import (
    SESSION_RUN,
    apply_query_params,
    refresh_run_list,
    run_entries,
    run_id_for,
    select_run,
    store_dir,
)
from pages._ui import md, visitor_text


def _handle_upload(files) -> None:
    from debugkit.io.upload import unpack_files

    try:
        target = unpack_files([(f.name, f) for f in files], store_dir())
    except DebugkitError as exc:
        st.session_state["debugkit_upload_error"] = str(exc)
        return
    except OSError as exc:
        st.session_state["debugkit_upload_error"] = f"upload: could not write to the store ({exc})"
        return
    st.session_state.pop("debugkit_upload_error", None)
    refresh_run_list()
    select_run(str(target), run_id_for(str(target)))
    st.session_state["debugkit_upload_ok"] = f"Uploaded as {target.name}"


def _open_typed(path_text: str) -> None:
    from debugkit.io.access import check_allowed
    from debugkit.io.run import open_run

    try:
        path = check_allowed(path_text.strip())  # a local path or an fsspec URL
        run = open_run(path)
    except DebugkitError as exc:
        st.session_state["debugkit_path_error"] = str(exc)
        return
    st.session_state.pop("debugkit_path_error", None)
    # Remembered in the run store, so the run stays listed and its ?run= link resolves
    # after a reload (a folder: as the user named it; a .zip: its unpacked run folder).
    listed = str(run.source if run.source.is_dir() else run.path)
    try:
        run_store.remember_opened(listed, store_dir())
    except OSError as exc:
        st.session_state["debugkit_path_error"] = ("opened, but the run store is not writable, so a "
                                                   f"reload will not list it ({exc.strerror})")
    refresh_run_list()
    # the run as the list names it (a TensorBoard folder: the folder, which opens through
    # its converted copy), so ?run= names it
    rid = run_id_for(listed)
    select_run(listed if rid else str(run.path), rid)


def menu(pages) -> None:
    """The page menu at the top of the sidebar: one link per page the router serves."""
    with st.sidebar:
        for page in pages:
            st.page_link(page, label=page.title, icon=page.icon or None)
        st.divider()


def open_linked_run() -> None:
    """Open the run a link names (``?run=``), before the page reads the selected run."""
    apply_query_params()


def sidebar() -> None:
    """The run picker: served runs, a typed path, or an upload. app.py draws it after the
    page (:func:`open_linked_run` has opened a linked run before the page ran)."""
    with st.sidebar:
        st.markdown("### Run")
        if msg := st.session_state.pop("debugkit_link_error", None):
            st.error(md(visitor_text(msg)))
        listed = run_entries()
        current = st.session_state.get(SESSION_RUN)
        cur_id = listed.id_for(current) if current else None
        # With a run open, the picker is drawn when its expander is opened: a select box
        # is 21 JavaScript files (185 kB) that every chart page's browser fetched and ran
        # before its first chart (bench/pages.py's shell floor). Without one, it is open.
        if cur_id is None:
            _run_picker(listed, cur_id)
        else:
            box = st.expander(f"{md(cur_id)} · change", expanded=False, on_change="rerun",
                              key="sidebar_pick_run", icon=":material/swap_horiz:")
            if box.open:
                with box:
                    _run_picker(listed, cur_id)
        # Drawn when opened: their widgets (a file uploader among them) would otherwise be
        # front-end code that every page loads and draws with the sidebar.
        path_box = st.expander("Open a path", expanded=False, on_change="rerun", key="sidebar_open_path")
        if path_box.open:
            with path_box:
                _open_path_form()
        upload_box = st.expander("Upload a run", expanded=False, on_change="rerun", key="sidebar_upload")
        if upload_box.open:
            with upload_box:
                _upload_form()


def _run_picker(listed, cur_id: str | None) -> None:
    """The select box of the served runs; picking one opens it."""
    ids = listed.ids
    key = f"run_picker_{cur_id}"
    # The pick opens its run in a callback, before the next script run: the page (drawn
    # before this sidebar) then shows the picked run, not the old one and a rerun.
    choice = st.selectbox("Open a run", ["—"] + ids,
                          index=(ids.index(cur_id) + 1) if cur_id in ids else 0,
                          key=key, on_change=_picked, args=(listed, key),
                          help="Runs in sample_runs/ and in the run store "
                               f"({visitor_text(store_dir())})")
    if choice != "—" and choice != cur_id:
        select_run(listed.path(choice), choice)
        st.rerun()


def _picked(listed, key: str) -> None:
    """The run picker's callback: open the picked run."""
    choice = st.session_state.get(key)
    if choice and choice != "—" and choice in listed.ids:
        select_run(listed.path(choice), choice)


def _open_path_form() -> None:
    """A typed run path (a local path or an fsspec URL) and its error, if any."""
    with st.form("open_path", clear_on_submit=False, border=False):
        text = st.text_input("Run directory, .zip or TensorBoard log dir", placeholder="runs/my-run")
        if st.form_submit_button("Open") and text.strip():
            _open_typed(text)
            st.rerun()
    if msg := st.session_state.get("debugkit_path_error"):
        st.error(md(visitor_text(msg)))


def _upload_form() -> None:
    """A run directory or a .zip, copied into the run store; the outcome below it."""
    from debugkit.io.upload import UploadLimits

    # The widget refuses a file the unpacker would refuse anyway (per-file limit,
    # DEBUGKIT_MAX_UPLOAD_MB), before it is sent.
    max_mb = max(1, UploadLimits.from_env().max_file_bytes >> 20)
    files = st.file_uploader("Run directory", accept_multiple_files="directory",
                             max_upload_size=max_mb,
                             key=f"upload_dir_{st.session_state.get('upload_gen', 0)}",
                             help="Pick the run's folder; it is copied into the run store.")
    zipf = st.file_uploader("…or a .zip of one", type=["zip"], max_upload_size=max_mb,
                            key=f"upload_zip_{st.session_state.get('upload_gen', 0)}")
    picked = list(files or []) or ([zipf] if zipf is not None else [])
    if picked:
        _handle_upload(picked)
        st.session_state["upload_gen"] = st.session_state.get("upload_gen", 0) + 1
        st.rerun()
    if msg := st.session_state.get("debugkit_upload_error"):
        st.error(md(visitor_text(msg)))
    if msg := st.session_state.pop("debugkit_upload_ok", None):
        st.success(md(msg))
