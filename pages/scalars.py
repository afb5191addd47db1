"""Scalars: every logged scalar (loss, learning rate, accuracy, anything passed to
``rec.log``), several at once, with TensorBoard's smoothing and a log-scale toggle."""

import streamlit as st

from debugkit.errors import DebugkitError
from pages import _data, _query, _routing, _runs, _ui

_routing.page_guard()
path = _runs.require_run("its scalars")

SMOOTHING_DEFAULT = 0.6  # TensorBoard's default weight


@st.cache_data(**_data.CACHE, show_spinner=False)
def _smoothed(path: str, sig: tuple, weight: float):
    from debugkit.analysis.scalars import smooth_scalars
    from debugkit.io.run import open_run

    return smooth_scalars(open_run(path).scalars(), weight)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _figure(path: str, sig: tuple, weight: float, keys: tuple, log_y: bool, raw: bool, fails: tuple):
    from debugkit.charts.scalars import build_scalars_figure

    return build_scalars_figure(_smoothed(path, sig, weight), keys, log_y=log_y, show_raw=raw,
                                failure_steps=fails)


def _default_keys(keys: list[str]) -> list[str]:
    loss = [k for k in keys if "loss" in k.rsplit("/", 1)[-1].lower()]
    return loss or keys[:1]


def render():
    sig = _data.signature(path)
    try:
        info = _data.summary(path)
        scalars = _data.read_scalars(path)
        failures = _data.read_failures(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    st.title(f"Scalars · {_ui.md(info['name'])}")
    _ui.about("Every scalar the run logged: what you passed to `rec.log(...)` (loss, accuracy, "
                  "validation metrics ...) and the learning rate of each optimizer parameter group "
                  "(`lr`, or `lr/0`, `lr/1` ...), which the Recorder logs itself. Pick several to "
                  "compare them on one chart. **Smoothing** is TensorBoard's: an exponential moving "
                  "average with debiasing (the faint line is the raw series); **log scale** shows "
                  "growth by factors, as of an exploding loss.")
    keys = sorted(str(k) for k in scalars["key"].unique())
    if not keys:
        st.info("No scalar logged yet. Call `rec.log(loss=loss, acc=acc)` inside `rec.step(...)`; "
                "the learning rate is logged for you once an optimizer is passed to the Recorder.",
                icon=":material/hourglass:")
        return
    wanted = _query.query_choices("key", keys)
    c1, c2, c3, c4 = st.columns([3.4, 2, 1.4, 1], vertical_alignment="bottom")
    picked = c1.multiselect("Scalars", keys, default=wanted or _default_keys(keys), key=f"scalars_keys_{path}")
    weight = c2.slider("Smoothing", 0.0, 0.99, SMOOTHING_DEFAULT, 0.01, key="scalars_smoothing",
                       help="TensorBoard's exponential moving average with debiasing; 0 shows the raw values")
    log_y = c3.toggle("Log scale", key="scalars_log")
    raw = c4.toggle("Raw", value=True, key="scalars_raw", help="Also draw the unsmoothed values, faintly")
    if not picked:
        st.info("Pick one or more scalars.", icon=":material/checklist:")
        return
    fails = tuple(sorted({f["step"] for f in failures if isinstance(f.get("step"), int)}))
    st.plotly_chart(_figure(path, sig, float(weight), tuple(picked), bool(log_y), bool(raw), fails),
                    key="scalars_chart")
    # one small chart per series as well, so series of very different ranges stay readable
    if len(picked) > 1:
        cols = st.columns(2)
        for i, k in enumerate(picked):
            with cols[i % 2]:
                st.caption(_ui.code(k))
                st.plotly_chart(_figure(path, sig, float(weight), (k,), bool(log_y), bool(raw), fails),
                                key=f"scalars_chart_{i}")
    sm = _smoothed(path, sig, float(weight))
    last = sm[sm["key"].isin(picked)].sort_values("step").groupby(["key", "rank"], observed=True).tail(1)
    st.dataframe(last[["key", "rank", "step", "value", "smoothed"]].rename(
        columns={"step": "last step", "value": "last value", "smoothed": "last smoothed"}),
        hide_index=True, width="stretch")
    for w in info.get("warnings") or []:
        st.caption(f":material/info: {_ui.md(w)}")


render()
