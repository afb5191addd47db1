"""Inside the layers: module x step heatmaps of the layer statistics, quantile fan charts
of weights and gradients, and the layer-health findings (docs/layers.md).

URL: ``?stat=`` the heatmap's statistic, ``?param=`` and ``?of=w|g`` the fan chart's,
``?rank=`` the rank (runs with several), ``?step=`` and ``?module=`` the cell in focus
(marked on the heatmap, its statistics listed under it; a finding's *Show* button sets
them)."""

import streamlit as st

from debugkit.analysis.layer_health import layer_stat_matrix, quantile_bands
from debugkit.charts.layers import build_layer_stat_heatmap_figure, build_quantile_fan_figure
from debugkit.errors import DebugkitError
from pages import _data, _query, _routing, _runs, _ui

_routing.page_guard()

MSG_NO_STATS = ("This run has no layer statistics. The Recorder takes them every 500 steps by "
                "default: this run was recorded with `layer_stats_every=None`, by a debugkit from "
                "before that default, or stopped before its first step (docs/layers.md).")
#: Statistics drawn on a log scale.
LOG_STATS = ("max_abs", "std", "update_ratio", "trigger_grad_norm")
WHICH = {"w": "weights", "g": "gradients"}
#: The statistic that shows each finding on the heatmap.
FINDING_STAT = {"dead_units": "frac_dead_units", "saturation": "frac_saturated",
                "activation_growth": "max_abs", "update_ratio": "update_ratio"}

path = _runs.require_run("its layer statistics")


def _pick(label, name, choices, default, fmt=str):
    try:
        chosen = _query.query_choice(name, choices, lambda v: f"?{name}={v!r} is not one of this "
                                     f"run's choices; showing {default!r}") or default
    except _query.NotAChoiceError as exc:
        st.warning(_ui.md(str(exc)))
        chosen = default
    value = st.selectbox(label, choices, index=list(choices).index(chosen), format_func=fmt,
                         key=f"layers_{name}")
    st.query_params[name] = value
    return value


def _focus(stat: str, module: str, step: int, param: str | None = None) -> None:
    """A finding's *Show* button: the heatmap of ``stat`` with the cell (module, step) in
    focus, and the parameter's weights in the fan chart (the widgets start again from the
    URL)."""
    for key in ("layers_stat", "layers_param", "layers_of"):
        st.session_state.pop(key, None)
    st.query_params.update({"stat": stat, "module": module, "step": str(step)})
    if param is not None:
        st.query_params.update({"param": param, "of": "w"})


def _show_buttons(f, i: int) -> None:
    stat = FINDING_STAT.get(f.kind)
    if stat is None or f.layer is None or f.step is None:
        return
    targets = [(stat, f.layer, int(f.step))]
    ev = f.evidence or {}
    if ev.get("first_nonfinite_step") is not None and ev.get("first_nonfinite_module"):
        targets.append(("frac_nonfinite", ev["first_nonfinite_module"], int(ev["first_nonfinite_step"])))
    cols = st.columns(len(targets))
    for j, (s_, module, step) in enumerate(targets):
        with cols[j]:
            st.button(f"Show step {step} · {module}", key=f"layers_show_{i}_{j}",
                      icon=":material/center_focus_strong:", on_click=_focus,
                      args=(s_, module, step, f.layer if f.kind == "update_ratio" else None),
                      help=f"The {s_} heatmap with step {step} of {module} in focus")


def _pick_rank(stats):
    ranks = sorted(int(r) for r in stats["rank"].unique())
    try:
        want = _query.query_int("rank", low=0, high=1_000_000)
    except DebugkitError as exc:
        st.warning(_ui.md(str(exc)))
        want = None
    if want is not None and want not in ranks:
        st.warning(f"?rank={want}: this run has no layer statistics from that rank "
                   f"(ranks: {', '.join(map(str, ranks))}); showing rank {ranks[0]}.")
        want = None
    if len(ranks) == 1:
        st.query_params.pop("rank", None)
        return ranks[0]
    rank = st.selectbox("Rank", ranks, index=ranks.index(want) if want is not None else 0,
                        key="layers_rank")
    st.query_params["rank"] = str(rank)
    return rank


def _read_focus(modules, steps):
    """``(module, step)`` of ``?module=`` and ``?step=`` when both name a cell of the
    heatmap; a warning (and no focus) when one does not."""
    if "module" not in st.query_params and "step" not in st.query_params:
        return None
    try:
        step = _query.query_int("step", low=0)
    except DebugkitError as exc:
        st.warning(_ui.md(str(exc)))
        return None
    module = st.query_params.get("module")
    if step not in steps or module not in modules:
        st.warning(_ui.md(f"?step={step}&module={module}: no such cell on this heatmap "
                          f"(sampled steps {steps[0]}-{steps[-1]}); nothing in focus."))
        return None
    return module, step


def render():
    try:
        stats = _data.read_layer_stats(path)
        scalars = _data.read_scalars(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    st.title("Layers")
    _ui.about("What is inside the layers on the sampled steps: each module's output statistics "
              "(mean, spread, max-abs, shares of zeros, saturated and non-finite values, dead "
              "units), each parameter's weight and gradient quantiles and its update-to-weight "
              "ratio, and what they say (docs/layers.md).")
    if not len(stats):
        st.info(MSG_NO_STATS)
        return
    rank = _pick_rank(stats)
    stats = stats[stats["rank"] == rank]
    st.subheader("Findings")
    try:
        found = _data.findings(path, sources=("layers",), inputs={"layers": {"stats": stats, "scalars": scalars}})
    except DebugkitError as exc:
        _ui.show_error(exc)
        found = []
    found = [f for f in found if f.rank is None or f.rank == rank]
    _ui.show_findings(found, empty="No dead units, saturation, activation growth or update ratio out of band.",
                      action=_show_buttons, roots=_data.recorded_roots(path))
    stat_names = sorted(s for s in stats["stat"].unique()
                        if not s.startswith(("w_q", "g_q")) and s != "ndim")
    default = "frac_dead_units" if "frac_dead_units" in stat_names else "max_abs"
    stat = _pick("Statistic", "stat", stat_names, default if default in stat_names else stat_names[0])
    modules, steps, values = layer_stat_matrix(stats, stat, rank)
    focus = _read_focus(modules, steps)
    _ui.chart(build_layer_stat_heatmap_figure(modules, steps, values, stat=stat,
                                              log=stat in LOG_STATS, focus=focus),
              key="layers_heatmap", csv_name=f"layers-{stat}")
    if focus is not None:
        module, step = focus
        cell = stats[(stats["module"] == module) & (stats["step"] == step)]
        st.markdown(f"**Step {step} · {_ui.code(module)}** ({_ui.md(cell['module_type'].iloc[0])})")
        table = cell[["stat", "value"]].sort_values("stat").set_index("stat")
        # as text: values of every magnitude (1e-7 ratios, 1e30 outputs) in one column
        st.dataframe(table["value"].map(lambda v: f"{v:.4g}").to_frame(), key="layers_focus_table")
    params = list(dict.fromkeys(stats[stats["stat"] == "w_q50"].sort_values("order")["module"]))
    if params:
        st.subheader("Quantiles over steps")
        c = st.columns(2)
        with c[0]:
            param = _pick("Parameter", "param", params, params[0])
        with c[1]:
            which = _pick("Of", "of", list(WHICH), "w", fmt=WHICH.get)
        bands = quantile_bands(stats, param, which, rank)
        if len(bands):
            _ui.chart(build_quantile_fan_figure(bands, param=param, which=which),
                      key="layers_fan", csv_name=f"quantiles-{param}")
        else:
            st.info(f"No {WHICH[which]} quantiles of {_ui.code(param)} were recorded.")


# While the run is written, the page follows it (a fragment that reruns every 5 s).
_data.render_live(path, render, every_s=5)
