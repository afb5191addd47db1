"""The router's side of every page: the guard that makes a page run under app.py's
router, and the pages this visitor is served (links to the others).

Streamlit's ``st.navigation`` in app.py decides the pages; files whose names start with
an underscore are helpers, not pages.
"""

from __future__ import annotations

import threading

import streamlit as st

_ROUTE = threading.local()


def _run_token():
    """An object that exists once per script run (Streamlit makes a new one in each
    run's context reset), or None outside a script run."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx
    except ImportError:
        return None
    ctx = get_script_run_ctx(suppress_warning=True)
    return getattr(ctx, "parallel_coordinator", None) if ctx is not None else None


def mark_routed() -> None:
    """Called by app.py at the top of every run: this run goes through the router."""
    _ROUTE.token = _run_token()


def page_guard() -> None:
    """Make sure this page runs under app.py's router. Call first in every page file.

    Streamlit still knows the old "pages directory" mode: until a script run has called
    ``st.navigation``, a process whose main script has a ``pages/`` folder next to it runs
    a requested page file directly, without the main script (this happens for the first
    runs of a fresh server process, and on every rerun under ``AppTest``). That would skip
    the router's decisions (the selected run, what a shared audit link may see, sign-in).
    When it happens, switch the process to ``st.navigation`` mode and rerun, so app.py
    routes the request. Whether this run was routed is known per run (app.py marks it),
    not from the process-wide mode flag: sessions that started at once on a fresh server
    may have begun in the old mode after another session switched it.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without the old mode
        return
    token = _run_token()
    if token is not None:
        if getattr(_ROUTE, "token", None) is token:
            return
        PagesManager.uses_pages_directory = False
        st.rerun()
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def register_pages(page_files) -> None:
    """Remember which page files the router serves this visitor (see :func:`link_to`)."""
    st.session_state["debugkit_pages"] = set(page_files)


def has_page(page_file: str) -> bool:
    return page_file in st.session_state.get("debugkit_pages", set())


def link_to(page_file: str, label: str, icon: str | None = None, **query_params) -> bool:
    """A link to another page carrying query params, if that page is served; else nothing."""
    if not has_page(page_file):
        return False
    st.page_link(page_file, label=label, icon=icon,
                 query_params={k: str(v) for k, v in query_params.items() if v is not None})
    return True
