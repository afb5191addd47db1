"""Inside the layers: module x step heatmaps of the layer statistics, quantile fan charts
of weights and gradients, and the layer-health findings (docs/layers.md)."""

import streamlit as st

from debugkit.analysis.layer_health import layer_stat_matrix, quantile_bands
from debugkit.charts.layers import build_layer_stat_heatmap_figure, build_quantile_fan_figure
from debugkit.errors import DebugkitError
from pages import _data, _query, _routing, _runs, _ui

_routing.page_guard()

MSG_NO_STATS = ("This run has no layer statistics. Record them with "
                "`Recorder(..., layer_stats_every=N)` (docs/layers.md).")
#: Statistics drawn on a log scale.
LOG_STATS = ("max_abs", "std", "update_ratio", "trigger_grad_norm")
WHICH = {"w": "weights", "g": "gradients"}

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
    st.subheader("Findings")
    try:
        found = _data.findings(path, sources=("layers",), inputs={"layers": {"stats": stats, "scalars": scalars}})
    except DebugkitError as exc:
        _ui.show_error(exc)
        found = []
    _ui.show_findings(found, empty="No dead units, saturation, activation growth or update ratio out of band.")
    stat_names = sorted(s for s in stats["stat"].unique()
                        if not s.startswith(("w_q", "g_q")) and s != "ndim")
    default = "frac_dead_units" if "frac_dead_units" in stat_names else "max_abs"
    stat = _pick("Statistic", "stat", stat_names, default if default in stat_names else stat_names[0])
    modules, steps, values = layer_stat_matrix(stats, stat)
    _ui.chart(build_layer_stat_heatmap_figure(modules, steps, values, stat=stat,
                                              log=stat in LOG_STATS),
              key="layers_heatmap", csv_name=f"layers-{stat}")
    params = list(dict.fromkeys(stats[stats["stat"] == "w_q50"].sort_values("order")["module"]))
    if params:
        st.subheader("Quantiles over steps")
        c = st.columns(2)
        with c[0]:
            param = _pick("Parameter", "param", params, params[0])
        with c[1]:
            which = _pick("Of", "of", list(WHICH), "w", fmt=WHICH.get)
        bands = quantile_bands(stats, param, which)
        if len(bands):
            _ui.chart(build_quantile_fan_figure(bands, param=param, which=which),
                      key="layers_fan", csv_name=f"quantiles-{param}")
        else:
            st.info(f"No {WHICH[which]} quantiles of {_ui.code(param)} were recorded.")


# While the run is written, the page follows it (a fragment that reruns every 5 s).
_data.render_live(path, render, every_s=5)
