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
def _figure(path: str, sig: tuple, weight: float, keys: tuple, log_y: bool, raw: bool, fails: tuple,
            others: tuple = ()):
    from debugkit.analysis.scalars import overlay_runs
    from debugkit.charts.scalars import build_scalars_figure

    data, drawn = overlay_runs(_smoothed(path, sig, weight),
                               {rid: _smoothed(p, s, weight) for rid, p, s in others}, keys)
    return build_scalars_figure(data, drawn, log_y=log_y, show_raw=raw and not others,
                                failure_steps=fails)


def _default_keys(keys: list[str]) -> list[str]:
    loss = [k for k in keys if "loss" in k.rsplit("/", 1)[-1].lower()]
    return loss or keys[:1]


def _flag(text: str) -> bool | None:
    return {"1": True, "0": False}.get(text)


def _smoothing_value(text: str) -> float | None:
    try:
        w = round(float(text), 2)
    except ValueError:
        return None
    return w if 0.0 <= w <= 0.99 else None


def _overlay_picker() -> tuple[dict, list[str]]:
    """The runs picked to draw over this one (``?with=<id>``, repeated), in a popover."""
    return _runs.overlay_picker(path, _ui.key_for("scalars_with", path), placeholder="other runs, drawn over this one",
                                help="The same scalars of other runs on the chart, as `<key> · <run>`",
                                in_popover=True)


def _other_runs(entries: dict, picked: list[str]) -> tuple:
    """The picked runs as ``(id, path, signature)``; one that cannot be read is a warning."""
    out = []
    for rid in picked:
        try:
            out.append((rid, entries[rid], _data.signature(entries[rid])))
        except DebugkitError as exc:
            st.warning(f"{_ui.md(rid)}: {_ui.md(str(exc))}")
    return tuple(out)


def _keys_to_query(picked: list[str], default: list[str]) -> None:
    """Mirror the picked series in the URL as a repeated ``?key=`` (none: the default)."""
    if picked == default or not picked:
        if "key" in st.query_params:
            del st.query_params["key"]
    elif st.query_params.get_all("key") != picked:
        st.query_params["key"] = picked


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
    if info["status"] == "running":
        st.caption("running · live: refreshes every few seconds")
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
    from debugkit.analysis.scalars import last_values, suggest_log_scale

    default_keys = _default_keys(keys)
    keys_key = _ui.key_for("scalars_keys", path)
    _query.list_from_query(keys_key, keys, name="key", expected="a scalar this run logged")
    st.session_state[keys_key] = [k for k in st.session_state.get(keys_key, default_keys) if k in keys]
    # The view lives in the URL (?key=...&smoothing=...&log=...&raw=...): a pasted link
    # shows what its sender saw. Widgets are seeded from it once per distinct value.
    _query.from_query("smoothing", _smoothing_value)
    _query.from_query("log", _flag)
    _query.from_query("raw", _flag)
    # Log scale by default where the default series span decades (an exploding loss), per run.
    suggest = suggest_log_scale(scalars, default_keys)
    if st.session_state.get("_scalars_log_for") != path:
        st.session_state["_scalars_log_for"] = path
        if st.query_params.get("log") not in ("0", "1"):
            st.session_state["log"] = suggest
    st.session_state.setdefault("smoothing", SMOOTHING_DEFAULT)
    st.session_state.setdefault("raw", True)
    # The multiselects and the slider are in popovers, drawn by the browser when opened:
    # their front-end code is not loaded before the chart (_ui.controls).
    bar = st.container(horizontal=True, vertical_alignment="center", gap="small")
    with bar, _ui.controls("Scalars", st.session_state[keys_key], icon=":material/checklist:"):
        picked = st.multiselect("Scalars", keys, key=keys_key)
    with bar:
        entries, overlaid = _overlay_picker()
    with bar, _ui.controls(f"Smoothing {st.session_state['smoothing']:g}", icon=":material/tune:"):
        weight = st.slider("Smoothing", 0.0, 0.99, step=0.01, key="smoothing",
                           help="TensorBoard's exponential moving average with debiasing; 0 shows the raw "
                                "values. The learning rate is never smoothed.")
    log_y = bar.toggle("Log scale", key="log",
                       help="On by default when the series span three decades or more")
    raw = bar.toggle("Raw", key="raw", help="Also draw the unsmoothed values, faintly")
    _keys_to_query(picked, default_keys)
    _query.to_query("smoothing", f"{weight:g}", f"{SMOOTHING_DEFAULT:g}")
    _query.to_query("log", "1" if log_y else "0", "1" if suggest else "0")
    _query.to_query("raw", "1" if raw else "0", "1")
    if not picked:
        st.info("Pick one or more scalars.", icon=":material/checklist:")
        return
    others = _other_runs(entries, overlaid)
    fails = tuple(sorted({f["step"] for f in failures if isinstance(f.get("step"), int)}))
    _ui.chart(_figure(path, sig, float(weight), tuple(picked), bool(log_y), bool(raw), fails,
                            others),
                    key="scalars_chart")
    # one small chart per series as well, so series of very different ranges stay readable
    if len(picked) > 1:
        cols = st.columns(2)
        for i, k in enumerate(picked):
            with cols[i % 2]:
                st.caption(_ui.code(k))
                _ui.chart(_figure(path, sig, float(weight), (k,), bool(log_y), bool(raw), fails),
                                key=f"scalars_chart_{i}")
    # values as text: NaN reads "NaN" (a float column would show it as an empty cell); a
    # Markdown table, not a data grid, so the browser draws the chart first (_ui.text_table)
    st.markdown(_ui.text_table(last_values(_smoothed(path, sig, float(weight)), picked)))
    for w in info.get("warnings") or []:
        st.caption(f":material/info: {_ui.md(_ui.visitor_text(w))}")


# While the run is written, the page follows it (a fragment that reruns every 3 s).
_data.render_live(path, render, every_s=3)
