"""Profiler: py-spy flamegraphs, torch.profiler traces and stack dumps of one run.

Each kind of profile has its renderer: :mod:`pages._profile_sampled`,
:mod:`pages._profile_trace`, :mod:`pages._profile_dump`.
"""

from __future__ import annotations

import streamlit as st

from debugkit.errors import DebugkitError
from pages import _data, _query, _routing, _runs, _ui
from pages._profile_dump import render_dump
from pages._profile_load import load
from pages._profile_sampled import render_sampled
from pages._profile_trace import render_trace

_routing.page_guard()

path = _runs.require_run("its profiles")


def render():
    from debugkit.io.run_profiles import describe

    try:
        entries = _data.read_profiles(path)
        info = _data.summary(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    st.title("Profiler")
    _ui.about('Sampled stacks (py-spy) and torch.profiler traces stored in this run: where the training step spends its time (data loading, forward, backward, optimizer), a flamegraph per thread, the slowest functions, and the operators and kernels of a torch.profiler trace. Record one with `debugkit profile RUN -- python train.py`.')
    st.caption(f"{_ui.md(info['name'])} · py-spy flamegraphs, torch.profiler traces and stack dumps")
    if not entries:
        st.info("This run holds no profiles yet.", icon=":material/speed:")
        st.markdown(
            "- Profile the training with py-spy: `debugkit profile RUN_DIR -- python train.py ...`\n"
            "- Attach to a running job for 30 s: `debugkit profile RUN_DIR --pid PID --duration 30`\n"
            "- Stacks of every thread of a hung process: `debugkit dump --pid PID RUN_DIR`\n"
            "- Add existing files: `debugkit import pyspy profile.json RUN_DIR`, "
            "`debugkit import torch-trace trace.json.gz RUN_DIR`")
        return
    ids = [e["id"] for e in entries]
    by_id = {e["id"]: e for e in entries}
    _query.from_query("profile", lambda v: v if v in by_id else None)
    if st.session_state.get("profile") not in by_id:
        st.session_state["profile"] = ids[0]
    # in a popover named after the open profile (_ui.controls): the select box's code is not
    # loaded before the flamegraph
    with _ui.controls("Profile", describe(by_id[st.session_state["profile"]]), icon=":material/speed:"):
        pid = st.selectbox("Profile", ids, key="profile", format_func=lambda i: describe(by_id[i]))
    _query.to_query("profile", pid, default=ids[0])
    entry = by_id[pid]
    try:
        obj = load(path, pid)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    from debugkit.io.chrome_trace import ChromeTrace
    from debugkit.io.profile_types import SampledProfile

    try:
        if isinstance(obj, SampledProfile):
            render_sampled(path, entry, obj)
        elif isinstance(obj, ChromeTrace):
            render_trace(path, entry, obj)
        else:
            render_dump(entry, obj, _data.recorded_roots(path))
    except DebugkitError as exc:
        _ui.show_error(exc)
    for w in info.get("warnings") or []:
        st.caption(f":material/info: {_ui.md(_ui.visitor_text(w))}")


def render_safely():
    try:
        render()
    except Exception as exc:  # a short message and a collapsed traceback, never a blank page
        _ui.show_error(exc, "the Profiler page")


# While the run is written (a profile added by `debugkit profile --pid`), the page follows it.
_data.render_live(path, render_safely, every_s=5)
