"""Memory: per-step timelines with capacity and warning bands, leak / pressure /
fragmentation findings, out-of-memory captures, and PyTorch memory snapshots."""


import streamlit as st

from debugkit.errors import DebugkitError
from debugkit.location import file_stamp
from pages import _data, _inference, _query, _routing, _runs, _ui

_routing.page_guard()

path = _runs.require_run("its memory")

SERIES_LABELS = {"allocated_bytes": "allocated (GPU)", "reserved_bytes": "reserved (GPU)",
                 "peak_bytes": "peak allocated (GPU)", "rss_bytes": "RSS (host)"}
#: The snapshot's tabs, by their URL value (``?tab=``).
SNAPSHOT_TABS = {"timeline": "Active memory over time", "segments": "Segments",
                 "largest": "Largest at the peak", "leaks": "Alive at the end (leaks)"}
#: The moments of the segments view, by their URL value (``?moment=``).
MOMENTS = {"end": "at the end (exact)", "peak": "at the peak", "event": "at an event"}


# ---------------------------------------------------------------------------- cached work
def _findings(path: str, gpu_threshold: float, host_threshold: float) -> list:
    """What `debugkit diagnose` finds about memory, with the page's thresholds."""
    from debugkit.analysis.memory import DEFAULTS

    cfg = {"gpu_threshold": gpu_threshold, "host_threshold": host_threshold}
    changed = {k: v for k, v in cfg.items() if v != DEFAULTS.get(k)}  # thresholds the visitor changed
    return _data.findings(path, sources=("memory",), config={"memory": changed} if changed else None)


def _snap_key(p: str) -> tuple:
    return (p, *file_stamp(p))


@st.cache_resource(max_entries=4, ttl=900, show_spinner=False)
def _snapshot(key: tuple):
    from debugkit.io.memsnap import read_snapshot

    return read_snapshot(key[0])


@st.cache_data(**_data.CACHE, show_spinner=False)
def _snapshot_views(key: tuple, device: int, depth: int, user_code: bool):
    from debugkit.analysis import memsnap as ms
    from debugkit.io.memsnap import summarize

    snap = _snapshot(key)
    sites = ms.site_labels(snap.stacks, depth=depth, user_code=user_code)
    allocs = ms.compute_allocations(snap, device)
    timeline = ms.compute_active_timeline(snap, device, sites=sites, allocs=allocs)
    peak, largest = ms.compute_largest_at_peak(snap, device, sites=sites, allocs=allocs)
    leaked = ms.compute_leaked_by_site(snap, device, sites=sites, allocs=allocs)
    oom = ms.compute_oom_events(snap, device, sites=sites)
    n_events = int((snap.events["device"] == device).sum())
    return {"summary": summarize(snap), "timeline": timeline, "peak": peak, "largest": largest,
            "leaked": leaked, "oom": oom, "n_events": n_events,
            "settings": snap.allocator_settings, "format": snap.format}


@st.cache_data(**_data.CACHE, show_spinner=False)
def _segments_view(key: tuple, device: int, depth: int, user_code: bool, seq):
    from debugkit.analysis import memsnap as ms

    snap = _snapshot(key)
    sites = ms.site_labels(snap.stacks, depth=depth, user_code=user_code)
    allocs = None if seq is None else ms.compute_allocations(snap, device)
    segs, blocks = ms.compute_segments_at(snap, device, seq, sites=sites, allocs=allocs)
    rows, z = ms.compute_segment_occupancy(segs, blocks)
    return segs, rows, z


# ---------------------------------------------------------------------------- pieces
#: URL values (``?ranks=``) of the rank layouts.
LAYOUTS = {"overlay": "overlay", "side": "side by side"}
GPU_WARN, HOST_WARN = 0.80, 0.75


def _controls(mem):
    """The timeline's view: series, x axis, rank layout, capacity scale and warning
    thresholds, each kept in the URL (``?series=`` repeated, ``?x=time``, ``?ranks=side``,
    ``?capacity=1``, ``?gpu_warn=``, ``?host_warn=``; a default is left out)."""
    has_gpu = any(mem[c].notna().any() for c in ("allocated_bytes", "reserved_bytes", "peak_bytes"))
    available = [c for c in SERIES_LABELS if mem[c].notna().any()]
    ranks = sorted(int(r) for r in mem["rank"].unique())
    ss = st.session_state
    if not set(ss.get("mem_series") or []) <= set(available):
        ss["mem_series"] = available  # the series of another run
    ss.setdefault("mem_series", available)
    ss.setdefault("mem_x", "step")
    ss.setdefault("mem_layout", "overlay")
    ss.setdefault("mem_capacity", False)
    ss.setdefault("mem_gpu_thr", GPU_WARN)
    ss.setdefault("mem_host_thr", HOST_WARN)
    _query.list_from_query("mem_series", available, name="series",
                           expected="one of this run's series (" + ", ".join(available) + ")")
    _query.from_query("mem_x", lambda v: v if v in ("step", "time") else None, name="x",
                      expected="'step' or 'time'")
    _query.from_query("mem_layout", LAYOUTS.get, name="ranks", expected="'overlay' or 'side'")
    _query.from_query("mem_capacity", _query.flag, name="capacity", expected="0 or 1")
    share = _query.number_in(0.5, 0.99, step=0.01)
    _query.from_query("mem_gpu_thr", share, name="gpu_warn", expected="a share from 0.5 to 0.99")
    _query.from_query("mem_host_thr", share, name="host_warn", expected="a share from 0.5 to 0.99")
    # The series' multiselect and the thresholds' sliders are in popovers named after their
    # values, drawn when opened: their code is not loaded before the chart (_ui.controls).
    bar = st.container(horizontal=True, vertical_alignment="bottom", gap="small")
    with bar, _ui.controls("Series", [SERIES_LABELS[k] for k in ss["mem_series"]],
                            icon=":material/checklist:"):
        chosen = st.multiselect("Series", available, format_func=SERIES_LABELS.get, key="mem_series")
    x = bar.segmented_control("X axis", ["step", "time"], key="mem_x") or "step"
    layout = "overlay"
    if len(ranks) > 1:
        layout = bar.segmented_control("Ranks", list(LAYOUTS.values()), key="mem_layout") or "overlay"
    show_cap = bar.toggle("Scale to capacity", key="mem_capacity",
                           help="Fit the y axis to the device's and host's capacity and the "
                                "warning bands. Off: it fits the data, and a capacity far above "
                                "it is named at the top of the chart.")
    with bar, _ui.controls("Thresholds", icon=":material/tune:"):
        gpu = st.slider("Warn above this share of GPU memory", 0.5, 0.99, step=0.01,
                        key="mem_gpu_thr", disabled=not has_gpu, format="%.2f")
        host = st.slider("Warn above this share of host memory", 0.5, 0.99, step=0.01,
                         key="mem_host_thr", format="%.2f")
    _query.list_to_query("mem_series", chosen, available, name="series")
    _query.to_query("mem_x", x, "step", name="x")
    _query.to_query("mem_layout", "side" if layout == "side by side" else "overlay", "overlay", name="ranks")
    _query.to_query("mem_capacity", "1" if show_cap else "0", "0", name="capacity")
    _query.to_query("mem_gpu_thr", f"{gpu:g}", f"{GPU_WARN:g}", name="gpu_warn")
    _query.to_query("mem_host_thr", f"{host:g}", f"{HOST_WARN:g}", name="host_warn")
    return chosen, ("wall_time" if x == "time" else "step"), layout, show_cap, gpu, host


def _leak_metrics(f):
    """A memory leak's numbers under its finding card."""
    if f.kind != "memory_leak":
        return
    from debugkit.analysis.memory import fmt_bytes

    ev = f.evidence
    _ui.figures([
        ("Growth per step", fmt_bytes(ev["bytes_per_step"])),
        ("Started at step", f"{ev['start_step']:,}"),
        ("Grown by", fmt_bytes(ev["growth_bytes"]), "Over the steps after warm-up, on each window's minimum."),
        ("Runs out at step", f"{ev['oom_step']:,}" if ev.get("oom_step") is not None else "—",
         "Where the fitted level reaches the capacity at this rate."),
    ])


def _oom_section(ooms, snapshots, run_id):
    st.subheader("Out-of-memory failures")
    for f in ooms:
        with st.container(border=True):
            st.markdown(f"**Step {f.get('step')} · rank {f.get('rank')} · "
                        f"{_ui.md(f.get('error_type') or 'out of memory')}**")
            st.code(_ui.recorded_text((f.get("message") or "").strip()[:1500], _data.recorded_roots(path, f)),
                    language=None, wrap_lines=True)
            c = st.columns(2)
            with c[0]:
                if not _routing.link_to("pages/replay.py", f"Replay the failing step {f.get('step')}",
                                       icon=":material/replay:", run=run_id, failure=f["id"],
                                       step=f.get("step")):
                    st.caption(f"Capture {_ui.code(f['id'])}: replay it with `debugkit replay`.")
            linked = [s for s in snapshots if s.get("failure") == f["id"]]
            with c[1]:
                for s in linked:
                    st.button(f"Open the memory snapshot {s['id']}", key=f"open_{s['id']}",
                              icon=":material/troubleshoot:", on_click=_open_snapshot, args=(s["id"],))


def _follow_oom_click(event, ooms, run_id) -> None:
    """A click on an OOM marker of the timeline opens that capture in Replay."""
    ids = {f["id"]: f for f in ooms}
    points = ((event or {}).get("selection") or {}).get("points") or []
    for p in points:
        fid = p.get("customdata")
        fid = fid[0] if isinstance(fid, list) and fid else fid
        if fid not in ids:
            continue  # a click on a memory curve, or a stale value
        f = ids[fid]
        if _routing.has_page("pages/replay.py"):
            st.switch_page("pages/replay.py", query_params={"run": run_id, "failure": fid,
                                                             "step": str(f.get("step"))})
        st.info(f"Out of memory at step {f.get('step')} on rank {f.get('rank')}: capture "
                f"{_ui.code(fid)}. Replay it with `debugkit replay` (the Replay page is not served here).",
                icon=":material/replay:")


def _open_snapshot(sid: str) -> None:
    st.session_state["mem_snapshot"] = sid
    st.query_params["snapshot"] = sid


def _snapshot_section(snapshots):
    from debugkit.analysis.memory import fmt_bytes

    st.header("PyTorch memory snapshots")
    if not snapshots:
        st.info("No memory snapshot in this run. On a CUDA device, record with "
                "`Recorder(..., record_memory_history=True)`: it writes one when a step fails "
                "(taken at the moment of an out-of-memory error) and one at close. Or add one "
                "written by `torch.cuda.memory._dump_snapshot(...)` with "
                "`debugkit import memory-snapshot FILE RUN_DIR`. "
                "(PyTorch records allocator history only for CUDA memory.)",
                icon=":material/info:")
        return
    ids = [s["id"] for s in snapshots]
    try:  # a link from a stranger, or to another run's snapshot
        wanted = _query.query_choice("snapshot", ids,
                                     lambda v: f"snapshot {str(v)[:80]!r}: no such snapshot in this run.")
    except DebugkitError as exc:
        st.warning(_ui.md(exc))
        wanted = None
    if not wanted and st.session_state.get("mem_snapshot") in ids:
        wanted = st.session_state["mem_snapshot"]  # query params are cleared on page change
    by_id = {s["id"]: s for s in snapshots}

    def _label(sid):
        s = by_id[sid]
        step = f"step {s['step']}" if isinstance(s.get("step"), int) else "no step"
        return f"{sid} · {s.get('reason')} · {step} · {fmt_bytes(s.get('size_bytes'))}"

    default = next((s["id"] for s in snapshots if s.get("reason") == "oom"), ids[-1])
    sid = wanted or default
    # The query parameter is the source of truth (deep links, the OOM buttons, the picker's
    # own changes through its callback); the picker is set to it before it is drawn.
    if st.session_state.get("mem_snap_pick") != sid:
        st.session_state["mem_snap_pick"] = sid
    st.selectbox("Snapshot", ids, format_func=_label, key="mem_snap_pick",
                 on_change=lambda: _open_snapshot(st.session_state["mem_snap_pick"]))
    if sid != st.query_params.get("snapshot"):
        st.query_params["snapshot"] = sid
    st.session_state["mem_snapshot"] = sid
    rec = by_id[sid]
    key = _snap_key(rec["path"])
    c = st.columns([2, 2, 3])
    st.session_state.setdefault("mem_depth", 1)
    st.session_state.setdefault("mem_user_code", True)
    _query.from_query("mem_depth", _query.number_in(1, 4, whole=True), name="frames",
                      expected="a number of frames from 1 to 4")
    _query.from_query("mem_user_code", _query.flag, name="user_code", expected="0 or 1")
    depth = c[0].slider("Frames per site", 1, 4, key="mem_depth",
                        help="How many stack frames name an allocation site.")
    user_code = c[1].toggle("Your code only", key="mem_user_code",
                            help="Name sites by the first frame outside site-packages, the "
                                 "standard library and torch.")
    _query.to_query("mem_depth", str(depth), "1", name="frames")
    _query.to_query("mem_user_code", "1" if user_code else "0", "1", name="user_code")
    try:
        with st.spinner(f"Reading the snapshot ({fmt_bytes(rec.get('size_bytes'))})…"):
            snap = _snapshot(key)
            devices = snap.devices or [0]
        device = devices[0]
        if len(devices) > 1:
            if st.session_state.get("mem_device") not in devices:
                st.session_state["mem_device"] = devices[0]
            _query.from_query("mem_device", lambda v: int(v) if v.isdigit() and int(v) in devices else None,
                              name="device", expected="one of this snapshot's devices "
                              + ", ".join(map(str, devices)))
            device = c[2].selectbox("Device", devices, format_func=lambda d: f"cuda:{d}",
                                    key="mem_device")
            _query.to_query("mem_device", str(device), str(devices[0]), name="device")
        with st.spinner("Aggregating…"):
            v = _snapshot_views(key, int(device), int(depth), bool(user_code))
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    except Exception as exc:  # an unexpected failure: say so, keep the page
        _ui.show_error(exc, "the memory snapshot")
        return
    s = v["summary"]
    _ui.figures([
        ("Reserved", fmt_bytes(s["reserved_bytes"]), "Held by the caching allocator."),
        ("Allocated", fmt_bytes(s["allocated_bytes"]), "In live tensors at the snapshot."),
        ("Peak active", fmt_bytes(v["peak"]["bytes"]) if v["peak"] else "—",
         "The highest active memory in the recorded history."),
    ])
    _ui.figures([("Segments", f"{s['segments']:,}"), ("Trace events", f"{v['n_events']:,}"),
                 ("OOM events", f"{len(v['oom'])}")])
    if rec.get("failure"):
        st.caption(f"Written for the failure capture {_ui.code(rec['failure'])}"
                   + (f" at step {rec['step']}" if isinstance(rec.get("step"), int) else "") + ".")
    if v["format"] == "legacy":
        st.caption("PyTorch 2.0 format (history on blocks).")
    tabs = _query.tabs(SNAPSHOT_TABS, "mem_snap_tab", run_path=path)
    # Only the open tab is built and sent (a click on another reruns the page); a closed
    # Segments tab keeps its moment and event, and still reads ?moment= from a link.
    draw = (lambda: _timeline_tab(v), lambda: _segments_tab(key, device, depth, user_code, v),
            lambda: _largest_tab(v), lambda: _leaks_tab(v))
    for i, (tab, fn) in enumerate(zip(tabs, draw)):
        if tab.open is False:
            if i == 1:
                _segments_moment(v)
                _ui.keep_widget_state("mem_seg_")
            continue
        with tab:
            fn()
    if v["settings"]:
        # drawn when opened: a collapsed expander still loads st.json's code
        box = st.expander("Allocator settings", key="mem_alloc_settings", on_change="rerun")
        if box.open:
            box.json(v["settings"], expanded=False)


def _timeline_tab(v):
    from debugkit.charts.memory import build_snapshot_timeline_figure

    if not len(v["timeline"]):
        st.info("This snapshot has no allocator history (it was taken without "
                "`torch.cuda.memory._record_memory_history()`), so there is no timeline; the "
                "other tabs show its state at the moment it was taken.")
        return
    st.caption("Memory held by live tensors over the recorded history, stacked by the line "
               "that allocated them. A band that only grows is memory nobody frees.")
    fig = build_snapshot_timeline_figure(v["timeline"], peak=v["peak"], oom_events=v["oom"])
    _ui.chart(fig, key="snap_timeline")
    if len(v["oom"]):
        from debugkit.analysis.memory import fmt_bytes

        for _, o in v["oom"].iterrows():
            st.error(f"Out of memory at event {o['seq']:,}: asked for "
                     f"{fmt_bytes(o['requested_bytes'])} with {fmt_bytes(o['device_free_bytes'])} "
                     f"free on the device (from {o['site']}).", icon=":material/error:")


def _segments_moment(v):
    """The Segments tab's moments (slugs, labels), with ``?moment=`` read (and a bad value
    warned about) whether the tab is open or not."""
    slugs = ["end"] + (["peak", "event"] if v["peak"] is not None else [])
    options = [MOMENTS[m] for m in slugs]
    if st.session_state.get("mem_seg_when") not in options:
        st.session_state["mem_seg_when"] = options[0]
    _query.from_query("mem_seg_when", lambda m: MOMENTS[m] if m in slugs else None, name="moment",
                      expected="one of " + ", ".join(repr(m) for m in slugs))
    return slugs, options


def _segments_tab(key, device, depth, user_code, v):
    slugs, options = _segments_moment(v)
    when = st.segmented_control("Moment", options, key="mem_seg_when") or options[0]
    _query.to_query("mem_seg_when", next(m for m in slugs if MOMENTS[m] == when), "end", name="moment")
    seq = None
    if when == MOMENTS["peak"]:
        seq = int(v["peak"]["seq"])
    elif when == MOMENTS["event"]:
        last = max(0, v["n_events"] - 1)
        st.session_state.setdefault("mem_seg_event", min(int(v["peak"]["seq"]), last))
        _query.from_query("mem_seg_event", _query.number_in(0, last, whole=True), name="event",
                          expected=f"an event number from 0 to {last}")
        seq = st.slider("Event", 0, last, key="mem_seg_event")
        _query.to_query("mem_seg_event", str(seq), "", name="event")
    elif "event" in st.query_params:
        del st.query_params["event"]
    try:
        segs, rows, z = _segments_view(key, int(device), int(depth), bool(user_code), seq)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    from debugkit.analysis.memory import fmt_bytes
    from debugkit.charts.memory import build_segments_figure

    total = int(segs["total_size"].sum())
    free = int(segs["free_bytes"].sum())
    st.caption(f"{len(segs):,} segments, {fmt_bytes(total)} reserved, {fmt_bytes(free)} of it "
               f"free ({free / max(total, 1):.0%}). Each row is one cudaMalloc'd segment; dark is "
               f"in use. Free space split into small ranges is fragmentation: the allocator "
               f"cannot hand it to a larger tensor." + (" Only the largest segments are drawn."
                                                        if len(rows) < len(segs) else ""))
    _ui.chart(build_segments_figure(rows, z), key="snap_segments")
    show = segs.sort_values("total_size", ascending=False).head(200)
    st.dataframe(show.assign(address=show["address"].map(hex),
                             size=show["total_size"].map(fmt_bytes),
                             allocated=show["allocated_bytes"].map(fmt_bytes),
                             free=show["free_bytes"].map(fmt_bytes),
                             largest_free=show["largest_free_bytes"].map(fmt_bytes)),
                 hide_index=True, height=_height(len(show)),
                 column_order=["address", "size", "segment_type", "stream", "allocated", "free",
                               "largest_free", "free_share", "allocations"],
                 column_config={"free_share": st.column_config.ProgressColumn(
                     "free share", min_value=0.0, max_value=1.0, format="percent"),
                     "largest_free": st.column_config.TextColumn(
                         "largest free range", help="The largest tensor this segment could still take.")})


def _largest_tab(v):
    from debugkit.analysis.memory import fmt_bytes
    from debugkit.charts.memory import build_largest_allocations_figure

    t = v["largest"]
    if v["peak"] is not None:
        st.caption(f"The {len(t)} largest of the tensors alive at the peak "
                   f"({fmt_bytes(v['peak']['bytes'])} active, event {v['peak']['seq']:,}).")
    else:
        st.caption("No history: the largest tensors alive when the snapshot was taken.")
    _ui.chart(build_largest_allocations_figure(t), key="snap_largest")
    st.dataframe(t.assign(addr=t["addr"].map(hex), bytes=t["size"], size=t["size"].map(fmt_bytes)),
                 hide_index=True, height=_height(len(t)),
                 column_order=["size", "share", "site", "age_s", "addr", "stack"],
                 column_config={"share": st.column_config.NumberColumn("share", format="percent"),
                                "age_s": st.column_config.NumberColumn("age (s)", format="%.3f")})


def _leaks_tab(v):
    from debugkit.charts.memory import build_leaked_sites_figure

    t = v["leaked"]
    st.caption("Tensors still alive when the snapshot was taken, by site. Red: allocated all "
               "along the trace and never freed, the signature of a leak.")
    _ui.chart(build_leaked_sites_figure(t), key="snap_leaks")
    from debugkit.analysis.memory import fmt_bytes

    st.dataframe(t.assign(live=t["live_bytes"].map(fmt_bytes)), hide_index=True, height=_height(len(t)),
                 column_order=["site", "live", "live_count", "allocated_in_trace", "still_alive_share",
                               "span_share", "accumulating", "first_alloc_s", "last_alloc_s",
                               "preexisting", "stack"],
                 column_config={"live_count": "alive", "allocated_in_trace": "allocated in trace",
                                "still_alive_share": st.column_config.NumberColumn(
                                    "still alive", format="percent"),
                                "span_share": st.column_config.NumberColumn(
                                    "span of trace", format="percent"),
                                "first_alloc_s": st.column_config.NumberColumn("first (s)", format="%.3f"),
                                "last_alloc_s": st.column_config.NumberColumn("last (s)", format="%.3f"),
                                "preexisting": "before the trace"})


def _height(rows: int) -> int:
    """A table height that fits ``rows`` rows, up to about ten."""
    return 38 + 35 * max(1, min(rows, 10))


# ---------------------------------------------------------------------------- page
def render():
    from debugkit.analysis.memory import compute_bands, oom_failures
    from debugkit.charts.memory import build_memory_timeline_figure

    try:
        info = _data.summary(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    if _inference.is_inference(info):  # a debugkit.serve run: memory per request
        _inference.render_memory(path, info)
        return
    try:
        mem = _data.read_memory(path)
        cap = _data.read_memory_capacity(path)
        failures = _data.read_failures(path)
        snapshots = _data.read_memory_snapshots(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    st.title(f"Memory · {_ui.md(info['name'])}")
    _ui.about("Memory per step as the Recorder measured it (on CUDA the allocator's allocated, reserved and peak bytes; on every device the process RSS), a leak finding when memory keeps growing after warm-up (a robust fit over each window's minimum), and, when the run holds PyTorch memory snapshots, which line of code allocated what is alive.")
    run_id = _runs.run_id_for(path)
    ooms = oom_failures(failures)
    if not len(mem) and len(snapshots) and not info["ranks"]:
        st.info("This run holds memory snapshots only (imported, or written without a Recorder): "
                "no per-step memory rows. The snapshots are below.", icon=":material/memory:")
    elif not len(mem):
        st.info("No memory rows yet: the Recorder writes one per step.", icon=":material/hourglass:")
    else:
        series, x, layout, show_cap, gpu_thr, host_thr = _controls(mem)
        try:
            findings = _findings(path, gpu_thr, host_thr)
        except DebugkitError as exc:
            _ui.show_error(exc)
            findings = []
        _ui.show_findings(findings, empty="No leak, pressure or fragmentation found.", detail=_leak_metrics,
                          roots=_data.recorded_roots(path))
        bands = compute_bands(cap, {"gpu_threshold": gpu_thr, "host_threshold": host_thr})
        leaks = [{**f.evidence, "rank": f.rank} for f in findings if f.kind == "memory_leak"]
        fig = build_memory_timeline_figure(
            mem, bands, metrics=series or list(SERIES_LABELS), x=x,
            layout="side" if layout == "side by side" else "overlay", oom_failures=ooms,
            leaks=leaks if x == "step" else (), scale_to_capacity=show_cap)
        event = _ui.chart(fig, key="mem_timeline", on_select="rerun",
                                selection_mode="points")
        _follow_oom_click(event, ooms, run_id)
        if not len(bands):
            st.caption("No capacity recorded for this run (runs recorded by an older debugkit "
                       "lack it), so there is no capacity line or band.")
    if ooms:
        _oom_section(ooms, snapshots, run_id)
    _snapshot_section(snapshots)


_data.render_live(path, render, every_s=5)
