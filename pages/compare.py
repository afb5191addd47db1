"""Compare: what differs between this run and the run that worked (``?run=A&base=B``).

The view lives in the URL: ``?extra=<id>`` (repeated) the more runs drawn, ``?layer=`` the
gradient chart's layer (default: the first to diverge), ``?log=1|0`` the loss charts' scale
(default: log where the losses span three decades). A value the page cannot use is a
warning and the default."""

import pandas as pd
import streamlit as st

from debugkit.analysis.run_diff import series_band
from debugkit.charts.run_overlay import (
    build_grad_overlay_figure,
    build_scalar_overlay_figure,
    run_colours,
)
from debugkit.errors import DebugkitError
from pages import _data, _query, _routing, _runs, _ui

_routing.page_guard()

STATUS_ICON = {"equal": ":material/check:", "differs": ":material/difference:",
               "unknown": ":material/help:"}
STATUS_COLOUR = {"equal": "green", "differs": "orange", "unknown": "gray", "diverged": "red",
                 "no divergence": "green"}
MAX_OVERLAY = 8  # runs drawn on one chart at most (the run, the base and up to 6 more)

path = _runs.require_run("a comparison with another run")


@st.cache_data(**_data.CACHE, show_spinner=False)
def _compare(path: str, sig: tuple, base: str, base_sig: tuple) -> dict:
    from debugkit.run_comparison import compare_paths

    return compare_paths(path, base)


def _id_path(entries, rid):
    return entries.path(rid)


def _pick_base(entries, run_id):
    """The base run: ``?base=<id>`` (validated against the served runs) or the picker."""
    from debugkit.io import served_runs as run_store

    others = [rid for rid in entries.ids if rid != run_id]
    try:
        wanted = _query.query_choice(
            "base", others, validate=run_store.validate_run_id,
            message=lambda v: f"base run {v!r}: no such run besides this one; pick one below")
    except _query.NotAChoiceError as exc:
        st.error(_ui.md(exc))
        wanted = None
    except DebugkitError as exc:
        _ui.show_error(exc)
        wanted = None
    choice = st.selectbox("Base run (the one that worked)", ["—"] + others,
                          index=others.index(wanted) + 1 if wanted in others else 0,
                          key=f"compare_base_{wanted}")
    if choice == "—":
        if "base" in st.query_params:
            del st.query_params["base"]
        return None
    if choice != wanted:
        st.query_params["base"] = choice
    return choice


def _loss_scale(scalars: dict, keys: list[str]) -> bool:
    """The loss charts' *Log scale* toggle, kept in the URL as ``?log=1`` / ``?log=0``; on
    by default where the drawn runs' losses span three decades or more (as on Scalars)."""
    import pandas as pd

    from debugkit.analysis.scalars import suggest_log_scale

    suggest = suggest_log_scale(pd.concat(list(scalars.values()), ignore_index=True), keys)
    _query.from_query("cmp_log", _query.flag, name="log", expected="0 or 1")
    drawn = tuple(scalars)  # the default follows the runs drawn, unless the URL says
    if st.session_state.get("_cmp_log_for") != drawn:
        st.session_state["_cmp_log_for"] = drawn
        if st.query_params.get("log") not in ("0", "1"):
            st.session_state["cmp_log"] = suggest
    st.session_state.setdefault("cmp_log", suggest)
    log_y = st.toggle("Log scale", key="cmp_log",
                      help="The loss on a log axis; on by default when the runs' losses span "
                           "three decades or more")
    _query.to_query("cmp_log", "1" if log_y else "0", "1" if suggest else "0", name="log")
    return bool(log_y)


def _status_line(title: str, status: str) -> None:
    st.markdown(f"**{title}** {STATUS_ICON.get(status, '')} `{status}`")


def _rows_table(rows, key, roots: dict, cols=("name", "run", "base", "status")):
    """A comparison's rows; a recorded path in a cell relative to its run's code root or
    project folder (``roots``: each side's :func:`pages._data.recorded_roots`), never the
    recording machine's folders."""
    if rows:
        st.dataframe(pd.DataFrame([{c: _cell(r.get(c), roots.get(c, roots["both"])) for c in cols}
                                   for r in rows]),
                     hide_index=True, width="stretch", key=key)


def _cell(v, roots=()):
    return "—" if v is None else _ui.recorded_text(v, roots)


def _summary(res: dict) -> None:
    """One badge per section: the answer before the details."""
    b = res["before_step_0"]
    div = res["divergence"]
    items = [("config", b["config"]["status"]), ("environment", b["environment"]["status"]),
             ("code", b["code"]["status"]), ("data", b["data"]["datasets"]["status"]),
             ("batch spec", b["data"]["batch_spec"]["status"]),
             ("ranks", b["topology"]["status"])]
    label = (f"diverges @ step {div['step']}" if div["status"] == "diverged" else div["status"])
    items.append(("curves", label))
    st.markdown(" ".join(
        f":{STATUS_COLOUR.get(status, STATUS_COLOUR['diverged'] if name == 'curves' else 'gray')}"
        f"-badge[{STATUS_ICON.get(status, ':material/call_split:')} {name}: {status}]"
        for name, status in items))


def _before(before: dict, roots: dict) -> None:
    st.subheader("1. What differs before step 0")
    cfg = before["config"]
    _status_line("Config", cfg["status"])
    _rows_table(cfg["rows"], "cfg", roots)
    env = before["environment"]
    _status_line("Environment", env["status"])
    _rows_table([r for r in env["fields"] if r["status"] != "equal"], "env", roots)
    if env["packages"]:
        st.caption(f"{len(env['packages'])} package(s) differ or are unknown:")
        _rows_table(env["packages"], "pkgs", roots)
    if not all(env["packages_complete"].values()):
        st.caption("A run recorded only a short list of packages (recorded before debugkit "
                   "listed every installed distribution): the others are unknown, not equal.")
    pc = env["pip_check"]
    st.caption(f"pip check: run **{pc['run']['status']}**, base **{pc['base']['status']}**")
    for side in ("run", "base"):
        for line in pc[side]["conflicts"]:
            st.caption(f"{side}: {_ui.md(_ui.recorded_text(line, roots[side]))}")
    code = before["code"]
    _status_line("Code (model factory)", code["status"])
    _rows_table([r for r in code["rows"] if r["status"] != "equal"], "code", roots)
    if code["diff"]:  # its header names each file as its row does
        st.code(_ui.recorded_text(code["diff"], roots["both"]), language="diff")
    elif code["diff_note"]:
        st.caption(code["diff_note"])
    data = before["data"]
    _status_line("Data", data["datasets"]["status"])
    rows = []
    for r in data["datasets"]["rows"]:
        if r["status"] == "equal":
            continue
        r = dict(r)
        if "items_differing" in r:
            r["status"] += f" ({r['items_differing']} of {r['items_sampled']} sampled items)"
        rows.append(r)
    _rows_table(rows, "data", roots, cols=("dataset", "name", "run", "base", "status"))
    _status_line("Learned batch spec", data["batch_spec"]["status"])
    _rows_table(data["batch_spec"]["rows"], "spec", roots, cols=("tensor", "field", "run", "base", "status"))
    topo = before["topology"]
    _status_line("World size and ranks", topo["status"])
    _rows_table([r for r in topo["rows"] if r["status"] != "equal"], "topo", roots)


def _divergence(res, names, run_name, base_name, paths, roots: dict) -> None:
    div = res["divergence"]
    st.subheader("2. Where they diverge")
    if div["status"] == "diverged":
        st.warning(_ui.md(_ui.recorded_text(div["finding"]["message"], roots["both"])),
                   icon=":material/call_split:")
        follow = div.get("following")
        if follow:
            st.caption(f"What follows: {_ui.md(follow['source'])} **{_ui.md(follow['kind'])}** at step "
                       f"{follow['step']}: {_ui.md(_ui.recorded_text(follow.get('message') or '', roots['both']))}")
    elif div["status"] == "no divergence":
        st.success("No divergence: the run stays inside the base run's band on the loss and "
                   "every layer's gradient norm.", icon=":material/check:")
    else:
        st.info("Unknown: the runs have no common steps on a common rank to compare.")
    try:
        scalars = {n: _data.read_scalars(paths[n]) for n in names}
        grads = {n: _data.read_grad_norms(paths[n]) for n in names}
        fails = {n: [f["step"] for f in _data.read_failures(paths[n])
                     if isinstance(f.get("step"), int)] for n in names}
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    colours = run_colours(names)
    loss_keys = [r["key"] for r in div["series"] if r["series"] == "loss"]
    log_y = _loss_scale(scalars, loss_keys) if loss_keys else False
    for key in loss_keys:
        band = series_band(scalars[base_name], "loss", key, div["rank"])
        fig = build_scalar_overlay_figure(scalars, key, colours=colours, band=band,
                                          divergence_step=div["step"], rank=div["rank"],
                                          failure_steps=fails, log_y=log_y)
        _ui.chart(fig, key=f"cmp_loss_{key}")
    layers = [r["key"] for r in div["series"] if r["series"] == "grad_norm"]
    if layers:
        first = div.get("first_layer") or layers[0]
        first = first if first in layers else layers[0]
        # ?layer= picks another layer than the first to diverge (refused: a warning)
        _query.from_query("cmp_layer", lambda v: v if v in layers else None, name="layer",
                          expected="a layer this comparison has")
        if st.session_state.get("cmp_layer") not in layers:
            st.session_state["cmp_layer"] = first
        layer = st.selectbox("Layer", layers, key="cmp_layer",
                             help="The layer that diverges first is picked.")
        _query.to_query("cmp_layer", layer, first, name="layer")
        band = series_band(grads[base_name], "grad_norm", layer, div["rank"])
        fig = build_grad_overlay_figure(grads, layer, colours=colours, band=band,
                                        divergence_step=div["step"], rank=div["rank"],
                                        failure_steps=fails)
        _ui.chart(fig, key="cmp_grad")
    with st.expander("Every series compared"):
        st.dataframe(pd.DataFrame(div["series"]), hide_index=True, width="stretch")


def _findings(res, roots: dict) -> None:
    st.subheader("3. Findings in one and not the other")
    cols = st.columns(2)
    for col, side, label in ((cols[0], "run", "Only in this run"), (cols[1], "base", "Only in the base")):
        with col:
            found = res["findings"][side]
            st.markdown(f"**{label}** ({len(found)})")
            if found:
                st.dataframe(pd.DataFrame([{k: f[k] for k in ("step", "severity", "kind", "layer")}
                                           | {"message": _ui.recorded_text(f["message"], roots[side])}
                                           for f in found]), hide_index=True, width="stretch",
                             key=f"only_{side}")


def render() -> None:
    entries = _runs.run_entries()
    run_id = entries.id_for(path)
    st.title("Compare runs")
    _ui.about(
        "What differs between this run and a run that worked (the **base**), in the order "
        "to check it: what differed before step 0 (config, environment, code, data, world "
        "size), where the curves part (the first step the loss or a layer's gradient norm "
        "leaves a band learned from the base's own step-to-step noise), and the findings "
        "one run has and the other has not. Facts a run did not record are **unknown**, "
        "never equal. The same comparison: `debugkit compare RUN BASE`.")
    c1, c2 = st.columns(2)
    with c1:
        base_id = _pick_base(entries, run_id)
    if base_id is None:
        st.info("Pick the base run: the run that worked, to compare this one with.",
                icon=":material/compare_arrows:")
        return
    base_path = _id_path(entries, base_id)
    choices = [rid for rid in entries.ids if rid not in (run_id, base_id)]
    # the extra runs travel in the URL (?extra=<id>, repeated): a pasted link shows them
    _query.list_from_query("compare_extra", choices, name="extra",
                           expected="a run this server lists besides the run and its base")
    st.session_state["compare_extra"] = [rid for rid in st.session_state.get("compare_extra") or []
                                         if rid in choices][:MAX_OVERLAY - 2]
    extra = c2.multiselect("More runs on the charts", choices,
                           max_selections=MAX_OVERLAY - 2, key="compare_extra")
    _query.list_to_query("compare_extra", extra, [], name="extra")
    try:
        with st.spinner("Comparing the runs…"):
            res = _compare(path, _data.signature(path), base_path, _data.signature(base_path))
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    run_name = run_id or res["run"]
    st.caption(f"run **{_ui.md(run_name)}** ({res['statuses']['run']}) · base **{_ui.md(base_id)}** "
               f"({res['statuses']['base']})")
    _summary(res)
    # each run's recorded paths shown relative to its own code root or project folder
    run_roots, base_roots = _data.recorded_roots(path), _data.recorded_roots(base_path)
    roots = {"run": run_roots, "base": base_roots, "both": run_roots + base_roots}
    _before(res["before_step_0"], roots)
    names = [run_name, base_id] + list(extra)
    paths = {run_name: path, base_id: base_path, **{e: _id_path(entries, e) for e in extra}}
    _divergence(res, names, run_name, base_id, paths, roots)
    _findings(res, roots)


# While the run is written, the page follows it (a fragment that reruns every 5 s).
_data.render_live(path, render, every_s=5)
