"""The Profiler page's view of a stack dump (``debugkit dump``): every thread, what it waits in."""

from __future__ import annotations

import streamlit as st

from pages import _ui

WAIT_HINTS = {
    "collective": "waiting in a collective (all_reduce, barrier ...): another rank is behind, or dead",
    "dataloader": "waiting for a DataLoader batch: a worker is slow, stuck or dead",
    "queue": "waiting on a queue", "lock": "waiting on a lock, event or join",
    "socket": "waiting on a socket or pipe", "sleep": "sleeping", "io": "in file or pipe I/O",
}


def render_dump(entry: dict, dump, roots: tuple = ()):
    """``roots``: the recording machine's folders (:func:`pages._data.recorded_roots`); a
    frame's file is shown relative to them, never with that machine's folders."""
    t = dump.threads
    _ui.figures([("Threads", len(t)), ("Processes", int(t["pid"].nunique())),
                 ("Running", int(t["active"].sum())), ("Holding the GIL", int(t["owns_gil"].sum()))])
    waiting = t[~t["active"] & (t["waiting_in"] != "")]
    if len(t) and not t["active"].any():
        top = waiting["waiting_in"].value_counts()
        what = WAIT_HINTS.get(top.index[0], _ui.md(top.index[0])) if len(top) else "idle"
        st.warning(f"Every thread is idle: the process looks hung. Most threads are {what}.",
                   icon=":material/hourglass_empty:")
    shown = t.drop(columns=["thread"])
    if "process" in shown:  # the dumped command line: no folders of its machine
        shown = shown.assign(process=[_ui.recorded_text(p, roots) for p in shown["process"]])
    st.dataframe(shown, hide_index=True, width="stretch")
    for r in t.itertuples():
        state = "running" if r.active else (f"idle · {r.waiting_in}" if r.waiting_in else "idle")
        with st.expander(_ui.md(f"{r.name or 'thread'} · tid {r.tid} · pid {r.pid} · {state} · {r.leaf}")):
            fr = dump.frames[dump.frames["thread"] == r.thread]
            lines = [f"{f.name}  ({_ui.recorded_path(f.file, roots)}:{f.line})" if str(f.line) != "<NA>"
                     else f"{f.name}  ({_ui.recorded_path(f.file, roots)})" for f in fr.itertuples()]
            st.code("\n".join(lines) or "(no Python frames)", language=None)
            loc = [f for f in fr.itertuples() if f.locals]
            if loc:
                st.json(_ui.recorded_values({f"{f.name}:{f.line}": f.locals for f in loc}, roots),
                        expanded=False)
