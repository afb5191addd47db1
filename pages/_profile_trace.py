"""The Profiler page's view of a torch.profiler trace: steps, operators, kernels, GPU idle
time and the timeline."""

from __future__ import annotations

import streamlit as st

from pages import _data, _query, _ui
from pages._profile_load import original_bytes, read_profile


@st.cache_data(**_data.CACHE, show_spinner="Analysing the trace…")
def _trace_views(run_path: str, sig: tuple, profile_id: str):
    from debugkit.analysis import trace as at

    tr = read_profile(run_path, sig, profile_id)
    return {"ops": at.compute_operator_table(tr), "ops_shapes": at.compute_operator_table(tr, by_shapes=True),
            "kernels": at.compute_kernel_table(tr), "gpu": (gpu := at.compute_gpu_idle(tr)),
            "gpu_note": at.describe_gpu_idle(gpu),
            "steps": at.compute_trace_steps(tr), "threads": at.trace_threads(tr),
            "annotated": at.compute_annotated_steps(tr), "phases": at.summarize_step_phases(tr),
            "window": at.trace_window(tr)}


@st.cache_data(**_data.CACHE, show_spinner=False)
def _timeline(run_path: str, sig: tuple, profile_id: str, max_events: int, max_depth: int):
    from debugkit.analysis import trace as at

    return at.compute_trace_timeline(read_profile(run_path, sig, profile_id), max_events=max_events,
                                     max_depth=max_depth)


def render_trace(path: str, entry: dict, trace):
    from debugkit.charts import profile as cp

    sig = _data.signature(path)
    v = _trace_views(path, sig, entry["id"])
    gpu = v["gpu"]
    w0, w1 = v["window"]
    _ui.figures([
        ("Events", f"{trace.n_events:,}"),
        ("Window", f"{(w1 - w0) / 1e3:,.1f} ms"),
        ("Threads / streams", len(v["threads"])),
        ("Steps", len(v["steps"]) or "—"),
        ("GPU idle", f"{gpu['idle_fraction'].mean():.0%}" if len(gpu) else "no GPU",
         "Holistic Trace Analysis' idle share: of the span from the first to the last GPU event, the "
         "time the GPU ran nothing (last ProfilerStep left out; per device: see below)."),
    ])
    if entry.get("label"):
        st.caption(_ui.md(entry["label"]))
    if len(v["annotated"]):
        st.subheader("Steps (your annotations)")
        _ui.chart(cp.build_annotated_steps_figure(v["annotated"]), key="trace_steps",
                        config={"displayModeBar": False})
        ph = v["phases"]
        st.caption("Per `ProfilerStep`, split by your `record_function` annotations: " + ", ".join(
            f"{_ui.md(k)} {p['fraction']:.0%}" for k, p in ph["phases"].items() if p["fraction"] >= 0.005)
            + (f". Note: {_ui.md(ph['note'])}." if ph.get("note") else "."))
    elif len(v["steps"]):
        st.subheader("Steps")
        _ui.chart(cp.build_trace_steps_figure(v["steps"]), key="trace_steps",
                        config={"displayModeBar": False})
        s = v["steps"]
        tot = float(s["dur_ms"].sum()) or 1.0
        st.caption("Per `ProfilerStep`: " + ", ".join(
            f"{k} {s[f'{k}_ms'].sum() / tot:.0%}" for k in ("data", "forward", "backward", "optimizer", "other")))
    else:
        st.caption("No `ProfilerStep#` annotations: record with `schedule=` and call `prof.step()` each "
                   "step to see the per-step breakdown.")
    st.subheader("Operators")
    st.session_state.setdefault("tr_shapes", False)
    _query.from_query("tr_shapes", _query.flag, name="shapes", expected="0 or 1")
    shapes = st.toggle("Group by input shapes", key="tr_shapes",
                       disabled=not (v["ops_shapes"]["input_shapes"] != "").any() if len(v["ops_shapes"]) else True,
                       help="Needs `record_shapes=True` when profiling.")
    _query.to_query("tr_shapes", "1" if shapes else "0", "0", name="shapes")
    ops = v["ops_shapes"] if shapes else v["ops"]
    st.dataframe(ops.head(300), hide_index=True, width="stretch", height=380, column_config={
        "self_cpu_fraction": st.column_config.ProgressColumn("self CPU %", format="percent", min_value=0, max_value=1),
        "self_cpu_ms": st.column_config.NumberColumn("self CPU ms", format="%.3f"),
        "cpu_total_ms": st.column_config.NumberColumn("CPU total ms", format="%.3f"),
        "self_cuda_ms": st.column_config.NumberColumn("self CUDA ms", format="%.3f"),
        "cuda_total_ms": st.column_config.NumberColumn("CUDA total ms", format="%.3f"),
        "mean_cpu_us": st.column_config.NumberColumn("mean CPU µs", format="%.1f")})
    st.subheader("Timeline")
    c1, c2 = st.columns(2)
    st.session_state.setdefault("tr_max", 3000)
    st.session_state.setdefault("tr_depth", 2)
    _query.from_query("tr_max", lambda v: int(v) if v in ("500", "1000", "3000", "10000") else None,
                      name="events", expected="one of 500, 1000, 3000, 10000")
    _query.from_query("tr_depth", lambda v: int(v) if v in ("0", "1", "2", "3", "4") else None,
                      name="levels", expected="a nesting depth from 0 to 4")
    max_events = c1.select_slider("Events drawn (the longest)", [500, 1000, 3000, 10000], key="tr_max")
    depth = c2.select_slider("Nesting levels", [0, 1, 2, 3, 4], key="tr_depth")
    _query.to_query("tr_max", str(max_events), "3000", name="events")
    _query.to_query("tr_depth", str(depth), "2", name="levels")
    tl = _timeline(path, sig, entry["id"], max_events, depth)
    _ui.chart(cp.build_trace_timeline_figure(tl), key="trace_timeline")
    st.subheader("GPU")
    if len(gpu):
        st.dataframe(gpu, hide_index=True, width="stretch", column_config={
            "idle_fraction": st.column_config.ProgressColumn("idle", format="percent", min_value=0, max_value=1)})
        st.caption(v["gpu_note"] + ".")
        st.dataframe(v["kernels"].head(200), hide_index=True, width="stretch", column_config={
            "gpu_fraction": st.column_config.ProgressColumn("GPU time %", format="percent", min_value=0, max_value=1),
            "total_ms": st.column_config.NumberColumn("total ms", format="%.3f")})
    else:
        st.info("No GPU kernels in this trace: it was recorded on CPU, or without "
                "`ProfilerActivity.CUDA`.", icon=":material/memory:")
    st.download_button("Download the trace (chrome://tracing, Perfetto)", data=lambda: original_bytes(entry),
                       on_click="ignore",
                       file_name=f"{entry['id']}.json", icon=":material/download:")
