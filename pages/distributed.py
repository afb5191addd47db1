"""Distributed: step time per rank, data wait vs compute, stragglers, hangs, divergence."""

import pandas as pd
import streamlit as st

from debugkit.errors import DebugkitError
from pages import _data, _query, _routing, _runs, _ui

_routing.page_guard()
path = _runs.require_run("its ranks")

#: The tabs, by their URL value (``?tab=``).
TABS = {"step-time": "Step time", "split": "Data wait vs compute", "hangs": "Hangs",
        "divergence": "Gradient divergence", "traces": "Profiler traces"}
METRICS = {"step time": "step_time_s", "own work (data wait + compute)": "busy_s",
           "data wait": "data_wait_s", "compute": "compute_s", "waiting in collectives": "comm_s"}


@st.cache_data(**_data.CACHE, show_spinner=False)
def _analysis(path: str, sig: tuple):
    from debugkit.analysis import distributed as ad
    from debugkit.io.distributed import read_hangs, read_rank_info
    from debugkit.io.rank_traces import find_rank_traces
    from debugkit.io.run import open_run

    run = open_run(path)
    times = ad.compute_rank_step_times(run.steps())
    windows = ad.compute_straggler_windows(times)
    # The findings from diagnose (its order), over what this page has read and computed already.
    # The gradient divergence is not computed here: its tab computes it when opened
    # (_divergence), and diagnose when the run list's index does not hold the findings; a
    # new server's page load reached its first chart 40 ms of CPU later for it (issue 35 item 9).
    findings = _data.findings(path, sources=("distributed",), inputs={"distributed": {
        "times": times, "windows": windows}})
    return {
        "ranks": run.ranks, "manifest": run.manifest, "info": read_rank_info(run),
        "times": times, "summary": ad.compute_rank_summary(times), "windows": windows,
        "hangs": read_hangs(run), "events": run.events(), "failures": run.failures(),
        "findings": findings,
        "trace_files": len(find_rank_traces(run)),
    }


@st.cache_data(**_data.CACHE, show_spinner=False)
def _divergence(path: str, sig: tuple):
    from debugkit.analysis import distributed as ad
    from debugkit.io.run import open_run

    return ad.compute_grad_divergence(open_run(path).grad_norms())


@st.cache_data(**_data.CACHE, show_spinner=False)
def _traces(path: str, sig: tuple):
    from debugkit.analysis import distributed_traces as at
    from debugkit.io.rank_traces import find_rank_traces, read_rank_traces, stack_events
    from debugkit.io.run import open_run

    run = open_run(path)
    paths = find_rank_traces(run)
    if not paths:
        return None
    traces = read_rank_traces(paths)
    events = stack_events(traces)
    metric, meta = at.compute_late_start_metric(events)
    return {"files": [str(p) for p in paths], "ranks": list(traces),
            "device": any(t.device_trace for t in traces.values()),
            "metric": metric, "meta": meta,
            "candidates": at.compute_potential_stragglers(metric),
            "overlap": at.compute_comm_comp_overlap(events)}


@st.cache_data(**_data.CACHE, show_spinner=False)
def _hang_text(path: str, sig: tuple, rank: int, name: str) -> str:
    from debugkit.io.distributed import read_hang_file
    from debugkit.io.run import open_run

    return read_hang_file(open_run(path), rank, name)


def _findings_block(findings):
    kinds = ("rank_crashed", "rank_lost", "straggler", "hang", "rank_divergence")
    _ui.show_findings([f for f in findings if f.kind in kinds],
                      empty="No dead rank, straggler, hang or rank divergence found.",
                      roots=_data.recorded_roots(path))


def _step_time_tab(a, stragglers):
    times = a["times"]
    if times.empty:
        st.info("No step rows recorded yet.")
        return
    # With a straggler, "own work" by default: in synchronous training the straggler's
    # *step time* is the shortest (the others wait for it inside their collectives), so
    # the step-time view would make it look fastest.
    default = "own work (data wait + compute)" if stragglers else "step time"
    _query.from_query("dist_metric", lambda v: v if v in METRICS else None,
                      expected="one of " + ", ".join(repr(m) for m in METRICS))
    if st.session_state.get("_dist_metric_for") != path or "dist_metric" not in st.session_state:
        st.session_state["_dist_metric_for"] = path
        if st.query_params.get("dist_metric") not in METRICS:
            st.session_state["dist_metric"] = default
    label = st.segmented_control("Value", list(METRICS), key="dist_metric")
    _query.to_query("dist_metric", label or default, default)
    value = METRICS.get(label or default, "step_time_s")
    if value == "comm_s" and not times["comm_measured"].any():
        st.info("Time in collectives was not measured in this run: call `rec.watch_ddp(model)` "
                "or wrap collectives in `with rec.comm():`.")
        return
    from debugkit.charts.distributed import build_rank_heatmap_figure, build_rank_lines_figure

    _ui.chart(build_rank_heatmap_figure(times, value, highlight=stragglers), key="dist_heatmap")
    # The lines are built when opened (?lines=1): a second figure sent and drawn with the
    # heatmap delayed the page's first chart (issue 35 item 9).
    box = _query.expander("One line per rank", "dist_lines_open", name="lines", run_path=path,
                          icon=":material/show_chart:")
    if box.open:
        with box:
            _ui.chart(build_rank_lines_figure(times, value, highlight=stragglers), key="dist_lines")
    st.caption("In synchronous training every rank leaves each all-reduce together, so the "
               "ranks that wait for a slow one show the *longer* steps: compare "
               "\u201cown work\u201d to find the rank the others wait for.")


def _split_tab(a, stragglers):
    summary = a["summary"]
    if summary.empty:
        st.info("No step rows recorded yet.")
        return
    from debugkit.charts.distributed import build_time_split_figure

    _ui.chart(build_time_split_figure(summary), key="dist_split")
    show = summary.copy()
    for c in ("step_time_s", "data_wait_s", "comm_s", "compute_s", "busy_s"):
        show[c.replace("_s", "_ms")] = show.pop(c) * 1000.0
    show["straggler"] = show["rank"].isin(stragglers)
    st.dataframe(show, hide_index=True, width="stretch", column_config={
        "busy_ratio": st.column_config.NumberColumn("own work vs others", format="%.2fx"),
        **{c: st.column_config.NumberColumn(c, format="%.2f") for c in show.columns if c.endswith("_ms")}})
    if not a["times"]["comm_measured"].all():
        st.caption("Collective time was not measured on every rank, so compute includes "
                   "waiting there (`rec.watch_ddp(model)` measures DDP's all-reduce).")


def _hang_tab(a, sig):
    from debugkit.analysis import distributed as ad

    dumps = a["hangs"]
    if not dumps:
        st.info("No hang dump in this run. Record with `Recorder(..., hang_timeout_s=S)`: a step "
                "that runs longer than S seconds makes every rank dump its stacks here.")
        return
    incidents = ad.group_hang_incidents(dumps)
    labels = [f"step {i[0].get('step') if i[0].get('in_step') else i[0].get('last_step')}"
              f" · triggered by rank {i[0].get('trigger_rank')} · {len(i)} rank(s)" for i in incidents]
    pick = 0
    if len(incidents) > 1:
        # the incident shown is ?incident=<n> (1 = the first, oldest; the default)
        _query.from_query("dist_incident", _query.number_in(1, len(incidents), whole=True),
                          name="incident", expected=f"an incident from 1 to {len(incidents)}")
        if st.session_state.get("dist_incident") not in range(1, len(incidents) + 1):
            st.session_state["dist_incident"] = 1
        pick = st.selectbox("Incident", range(1, len(incidents) + 1), format_func=lambda k: labels[k - 1],
                            key="dist_incident") - 1
        _query.to_query("dist_incident", str(pick + 1), "1", name="incident")
    inc = incidents[pick]
    view, divergent = ad.compute_hang_view(inc, a["ranks"])
    if divergent:
        st.error(f"Rank {', '.join(map(str, divergent))} diverges: the others wait for it.",
                 icon=":material/call_split:")
    st.dataframe(view[["rank", "divergent", "in_step", "step", "last_step", "elapsed_s", "stuck_at",
                       "stuck_code", "signature_group"]],
                 hide_index=True, width="stretch",
                 column_config={"divergent": st.column_config.CheckboxColumn("divergent"),
                                "elapsed_s": st.column_config.NumberColumn("in step for (s)", format="%.1f"),
                                "signature_group": st.column_config.NumberColumn("stack group")})
    by_rank = {d["rank"]: d for d in inc}
    roots = _data.recorded_roots(path)  # a frame's file relative to the recorded project
    cols = st.columns(min(len(by_rank), 4) or 1)
    for i, (r, d) in enumerate(sorted(by_rank.items())):
        with cols[i % len(cols)]:
            frames = ad.train_stack(d)
            title = f"Rank {r}" + (" · divergent" if r in divergent else "")
            st.markdown(f"**{title}**")
            where = (f"in step {d.get('step')}" if d.get("in_step")
                     else f"between steps, last completed {d.get('last_step')}")
            st.caption(f"{where} · dumped because of {_ui.md(d.get('reason'))}")
            st.code("\n".join(f"{'  ' if f.get('library') else '▶ '}{f['function']} "
                              f"({_ui.recorded_path(f['file'], roots)}:{f['line']})"
                              + (f"\n      {f['code']}" if f.get('code') and not f.get('library') else "")
                              for f in frames[-14:]), language=None)
    if len(by_rank) > 1:
        ranks = sorted(by_rank)
        a_rank = divergent[0] if divergent else ranks[0]
        b_rank = next(r for r in ranks if r != a_rank)
        st.markdown(f"**Stack diff** (training thread): rank {b_rank} → rank {a_rank}")
        st.code(ad.diff_stacks(ad.train_stack(by_rank[b_rank]), ad.train_stack(by_rank[a_rank]),
                               f"rank {b_rank}", f"rank {a_rank}") or "(identical)", language="diff")
    for r, d in sorted(by_rank.items()):
        files = d.get("files") or {}
        with st.expander(f"Rank {r}: all threads (faulthandler"
                         + (", py-spy --native" if files.get("pyspy") else "") + ")"):
            for kind in ("pyspy", "faulthandler"):
                if files.get(kind):
                    try:
                        st.code(_ui.recorded_text(_hang_text(path, sig, r, files[kind]), roots),
                                language=None)
                    except DebugkitError as exc:
                        _ui.show_error(exc)
            if d.get("pyspy_error"):
                st.caption(f"py-spy: {_ui.md(_ui.recorded_text(d['pyspy_error'], roots))}")


def _divergence_tab(sig):
    from debugkit.analysis.distributed import DIVERGENCE_RTOL
    from debugkit.charts.distributed import build_grad_divergence_figure

    div = _divergence(path, sig)
    if div.empty:
        st.info("Gradient norms of two or more ranks are needed (the Recorder logs them on every rank).")
        return
    _ui.chart(build_grad_divergence_figure(div, DIVERGENCE_RTOL), key="dist_divergence")
    bad = div[div["rel_spread"] > DIVERGENCE_RTOL]
    if bad.empty:
        st.success("Every layer's gradient norm agrees across ranks after the all-reduce.",
                   icon=":material/check:")
    else:
        st.dataframe(bad.head(200), hide_index=True, width="stretch")


def _trace_tab(sig):
    try:
        t = _traces(path, sig)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    if t is None:
        st.info("No torch.profiler traces in this run's `traces/` folder. Export one chrome trace "
                "per rank there (`prof.export_chrome_trace(f\"{run_dir}/traces/rank{rank}.json.gz\")`).")
        return
    st.caption(f"{len(t['files'])} trace(s), ranks {', '.join(map(str, t['ranks']))}; "
               + ("GPU kernels" if t["device"] else "CPU-only traces (gloo work and CPU operators)"))
    from debugkit.charts.distributed import build_overlap_figure, build_trace_lag_figure

    if t["metric"].empty:
        st.info("The traces hold no significant collective inside a profiler step.")
    else:
        st.markdown(f"**Late start of the last {_ui.code(t['meta']['collective'])} per iteration** "
                    "(HTA's straggler metric; red: later than the median rank)")
        _ui.chart(build_trace_lag_figure(t["metric"]), key="dist_trace_lag")
        st.dataframe(t["candidates"], hide_index=True, width="stretch")
    st.markdown("**Communication overlapped with computation** (HTA's definition)")
    _ui.chart(build_overlap_figure(t["overlap"]), key="dist_overlap")


#: Ranks listed as a Markdown table above the charts; a larger job gets a count by status.
TABLE_RANKS = 16
#: The rank list's columns in its Markdown table (all are in the grid when it is opened).
RANK_COLUMNS = {"rank": "rank", "host": "host", "device": "device", "status": "status",
                "heartbeat_step": "last step", "heartbeat_time": "last heartbeat (UTC)",
                "crash_reason": "crash reason"}


def _rank_table(info: pd.DataFrame) -> None:
    """The ranks: a Markdown table of their main columns (up to :data:`TABLE_RANKS`; above
    that, a count by status), and every column in a grid drawn when its expander is opened.
    A data grid is 1.5 MB of JavaScript the browser loads and runs before the step-time
    heatmap is drawn; the Markdown renderer is already loaded."""
    if info.empty:
        return
    times = pd.to_datetime(info["heartbeat_time"], unit="s", utc=True)
    if len(info) <= TABLE_RANKS:
        cols = [c for c in RANK_COLUMNS if c in info.columns]
        short = info[cols].assign(**({"heartbeat_time": times.dt.strftime("%Y-%m-%d %H:%M:%S")}
                                     if "heartbeat_time" in cols else {}))
        short = short.astype(object).where(short.notna(), "—").rename(columns=RANK_COLUMNS)
        st.markdown(_ui.text_table(short))
    else:
        counts = info["status"].fillna("unknown").value_counts()
        st.caption(f"{len(info)} ranks: " + ", ".join(f"{n} {_ui.md(k)}" for k, n in counts.items()))
    box = st.expander(f"All rank details ({len(info)} ranks, {len(info.columns)} columns)",
                      key="dist_ranks", on_change="rerun")
    if box.open:
        box.dataframe(info.assign(heartbeat_time=times), hide_index=True, width="stretch",
                      column_config={"heartbeat_time": st.column_config.DatetimeColumn(
                          "last heartbeat (UTC)", format="YYYY-MM-DD HH:mm:ss")})


def render():
    try:
        sig = _data.signature(path)
        a = _analysis(path, sig)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    m = a["manifest"]
    d = m.get("distributed") or {}
    info = a["info"]
    st.title("Distributed")
    _ui.about('Every rank of a `torchrun` job side by side: step time per rank (a straggler is a rank whose own work is slower, which the others then wait for in their collectives), data wait against compute, hang dumps taken by the watchdog (where each rank was stuck), gradient norms that disagree across ranks, and collectives from torch.profiler traces.')
    hosts = sorted({h for h in info["host"] if h}) if not info.empty else []
    st.caption(f"backend {d.get('backend') or '—'} · world size {d.get('world_size') or m.get('world_size') or 1}"
               f" · {len(a['ranks'])} rank folder(s) · {len(hosts)} host(s): {_ui.md(', '.join(hosts) or '—')}")
    traces_only = len(a["ranks"]) < 2 and a["trace_files"] > 1
    if len(a["ranks"]) < 2 and not a["hangs"] and not traces_only:
        st.info("This run has a single rank. Record a `torchrun` job (every rank creates its "
                "`Recorder` on the same run directory) to compare ranks here.")
        return
    if traces_only:
        st.info(f"This run holds {a['trace_files']} per-rank torch.profiler traces and no recorded "
                "ranks (`ranks/` folders): the straggler and overlap analysis of the traces is on the "
                "**Profiler traces** tab; step times, hangs and gradient divergence need a recorded run.")
    _findings_block(a["findings"])
    _rank_table(info)
    stragglers = sorted({f.rank for f in a["findings"] if f.kind == "straggler"
                         and f.rank is not None})
    # A hung run opens on its Hangs tab; a run of traces alone on its Profiler traces tab (the
    # only one with something to show, now that only the open tab is built).
    hung = any(f.kind == "hang" for f in a["findings"])
    default = "hangs" if hung else "traces" if traces_only else None
    tabs = _query.tabs(TABS, "dist_tab", default=default, run_path=path)
    # Only the open tab is built and sent (a click on another reruns the page): its charts
    # are the page's first, not the last of six. A closed tab's widgets keep their values.
    draw = (lambda: _step_time_tab(a, stragglers), lambda: _split_tab(a, stragglers),
            lambda: _hang_tab(a, sig), lambda: _divergence_tab(sig), lambda: _trace_tab(sig))
    for tab, widgets, fn in zip(tabs, (("dist_metric",), (), ("dist_incident",), (), ()), draw):
        if tab.open is False:
            if widgets:
                _ui.keep_widget_state(*widgets)
            continue
        with tab:
            fn()


# While the run is written, the page follows it (a fragment that reruns every 5 s).
_data.render_live(path, render, every_s=5)
