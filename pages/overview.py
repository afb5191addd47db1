"""Overview of one run: status, config, environment, loss curve, failures."""

import datetime as dt

import streamlit as st

from debugkit.charts.scalars import build_scalar_figure
from debugkit.errors import DebugkitError
from pages import _data, _inference, _routing, _runs, _ui

_routing.page_guard()

STATUS_BADGE = {"running": ("blue", ":material/play_circle:"),
                "finished": ("green", ":material/check_circle:"),
                "failed": ("red", ":material/error:"),
                "crashed": ("orange", ":material/warning:")}
# Which page explains a failure of each kind.
EXPLAINED_BY = {"exception": ("pages/replay.py", "Replay this failure"),
                "nonfinite": ("pages/gradients.py", "See the gradients at this step"),
                "guard": ("pages/replay.py", "Replay this batch")}

path = _runs.require_run("its overview")


def _fmt_time(t):
    return dt.datetime.fromtimestamp(t).strftime("%H:%M") if t else "—"


def _duration(a, b):
    if not a or not b or b < a:
        return "—"
    if b - a < 60:
        return f"{b - a:.1f} s"  # a short run: seconds, not "0m 3s"
    s = int(b - a)
    return f"{s // 3600}h {s % 3600 // 60}m {s % 60}s" if s >= 3600 else f"{s // 60}m {s % 60}s"


CONFIG_ROWS = 30


def _flat(config, prefix=""):
    """``(dotted key, value)`` of a config, nested dicts flattened (``optim.lr``)."""
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from _flat(v, key + ".")
        else:
            yield key, v


def _config(config: dict) -> None:
    """The run's config as a key / value Markdown table (nested keys dotted, values as JSON):
    ``st.json`` made the browser load its viewer's code beside the loss curve (+0.65 s to
    the floor's first chart in a paired measure, issue 35 item 9). A long config shows its
    first rows; the whole of it as JSON is drawn when opened."""
    import json

    import pandas as pd

    rows = list(_flat(config))
    if not rows:
        st.caption("No config recorded (`Recorder(config={...})` stores one).")
        return

    def value(v) -> str:
        text = v if isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
        return text if len(text) <= 200 else text[:199] + "…"

    st.markdown(_ui.text_table(pd.DataFrame([{"key": k, "value": value(v)} for k, v in rows[:CONFIG_ROWS]])))
    if len(rows) > CONFIG_ROWS:
        box = st.expander(f"All {len(rows)} keys (JSON)", key="ov_config_all", on_change="rerun")
        if box.open:  # drawn when opened: st.json's code is loaded only then
            box.json(config, expanded=True)


def render():
    try:
        info = _data.summary(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    if _inference.is_inference(info):  # a debugkit.serve run: requests, not steps
        _inference.render_overview(path, info)
        return
    try:
        scalars = _data.read_scalars(path)
        steps = _data.read_steps(path)
        failures = _data.read_failures(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    m = info["manifest"]
    status = info["status"]
    color, icon = STATUS_BADGE.get(status, ("gray", None))
    st.title(_ui.md(info["name"]))
    _ui.about('One run at a glance: its status (running, finished, failed, or crashed when the training process went away without closing the run), the loss curve with a marker at each failure, and the failures the Recorder captured. Open a failure on the **Replay** page to reproduce it; **Gradients**, **Memory** and **Distributed** go deeper.')
    st.badge(status, color=color, icon=icon)
    if status == "running":
        st.caption("Live: this page refreshes every few seconds while the run trains.")
    elif status == "crashed":
        st.warning("The training process went away without closing the run (killed, or its "
                   "machine died). Everything flushed before that is shown.")
    start, end = info["time_span"]
    n_steps = int(steps["step"].nunique()) if len(steps) else 0
    _ui.figures([
        ("Steps", f"{n_steps:,}"),
        ("Ranks", len(info["ranks"]) or 1),
        ("Failures", len(failures)),
        ("Started", _fmt_time(start),
         dt.datetime.fromtimestamp(start).isoformat(" ", "seconds") if start else None,
         dt.datetime.fromtimestamp(start).strftime("%Y-%m-%d") if start else None),
        ("Duration", _duration(start, end)),
    ])

    loss_keys = sorted(k for k in scalars["key"].unique() if "loss" in k.rsplit("/", 1)[-1].lower())
    if loss_keys:
        fig = build_scalar_figure(scalars, loss_keys, failure_steps=[f["step"] for f in failures
                                                                     if isinstance(f.get("step"), int)])
        _ui.chart(fig, key="loss_curve")
    else:
        st.info("No loss logged yet. Call `rec.log(loss=loss)` inside `rec.step(...)` to see the curve.")

    st.subheader("Failures")
    if not failures:
        st.success("No failure captured.", icon=":material/check:")
    for f in failures:
        head = (f"attempt {_ui.md(f['attempt'])} · " if f.get("attempt") else "") + \
            f"step {_ui.md(f.get('step'))} · rank {_ui.md(f.get('rank'))} · " \
            f"{_ui.md(f.get('error_type') or f.get('kind'))}"
        roots = _data.recorded_roots(path, f)  # the recording machine's folders are not shown
        with st.container(border=True):
            st.markdown(f"**{head}**")
            # st.text, not st.code: a code block makes the browser load and run Streamlit's
            # syntax highlighter (1.5 MB of JavaScript) before the loss curve is drawn
            st.text(_ui.recorded_text(f.get("message") or "", roots))
            if f.get("dataset_indices"):
                idx = f["dataset_indices"]
                st.caption(f"Batch of {len(idx)} samples; dataset indices {_ui.md(idx[:12])}"
                           + (" …" if len(idx) > 12 else ""))
            target, label = EXPLAINED_BY.get(f.get("kind"), ("pages/replay.py", "Replay"))
            _routing.link_to(target, label, icon=":material/arrow_forward:",
                            run=_runs.run_id_for(path), failure=f["id"], step=f.get("step"))
            if f.get("traceback"):
                # drawn when opened (a click reruns the page), as above
                tb = st.expander("Traceback", key=f"ov_tb_{f['id']}", on_change="rerun")
                if tb.open:
                    tb.code(_ui.recorded_text(f["traceback"], roots), language="python")

    st.subheader("Findings")
    try:
        found = _data.findings(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        found = None
    if found is not None:
        _ui.show_findings(found, empty="`debugkit diagnose` finds nothing wrong in this run.",
                          summary="what `debugkit diagnose` finds, ordered by step", scroll_over=4,
                          roots=_data.recorded_roots(path))

    left, right = st.columns(2)
    with left:
        st.subheader("Config")
        _config(_ui.recorded_values(m.get("config") or {}, _data.recorded_roots(path)))
        st.caption(f"Model factory: {_ui.code(m.get('model_factory') or '—')} · "
                   f"optimizer: {_ui.code(m.get('optimizer_class') or '—')} · "
                   f"schema {_ui.md(m.get('schema_version'))}")
    with right:
        st.subheader("Environment")
        env = info["env"]
        md = _ui.md
        gpus = ", ".join(md(g.get("name", "?")) for g in env.get("gpus") or []) or "none"
        st.markdown(
            f"- Python **{md(env.get('python', '?'))}** on {md(env.get('platform', '?'))}\n"
            f"- torch **{md(env.get('torch', '?'))}**, CUDA {md(env.get('cuda_version') or '—')}, GPU: {gpus}\n"
            f"- host {_ui.code(env.get('host', '?'))}")
        pc = env.get("pip_check")
        if pc is None and status == "running":
            st.caption("pip check: not recorded yet (it runs in the background when a run starts)")
        elif pc is None:
            st.caption("pip check: not recorded for this run (recorded by an older debugkit, "
                       "or pip could not be run)")
        elif pc.get("ok"):
            st.caption("pip check: no broken requirements")
        elif pc.get("ok") is False:
            st.warning("pip check reports conflicts:\n\n" + "\n".join(f"- {_ui.md(c)}" for c in pc["conflicts"]))
        pk = env.get("packages") or {}
        if pk:
            # drawn when opened: a data grid is 1.5 MB of JavaScript for the browser to load
            # and run before the loss curve is drawn
            box = st.expander(f"Installed packages ({len(pk)})", key="ov_packages", on_change="rerun")
            if box.open:
                box.dataframe([{"package": k, "version": v} for k, v in sorted(pk.items())],
                              hide_index=True, height=200)
    for w in info.get("warnings") or []:
        st.caption(f":material/info: {_ui.md(_ui.visitor_text(w))}")


_data.render_live(path, render, every_s=3)
