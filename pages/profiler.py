"""Profiler: py-spy flamegraphs, torch.profiler traces and stack dumps of one run."""

from __future__ import annotations

import gzip
from pathlib import Path

import streamlit as st

from debugkit.errors import DebugkitError
from pages import _common

_common.page_guard()

path = _common.require_run("its profiles")

THREAD_CHOICES = {"main": "Main thread", "dataloader": "DataLoader workers", "all": "All threads",
                  "pick": "Pick threads…"}
FOLD_CHOICES = {0.001: "0.1 %", 0.005: "0.5 %", 0.01: "1 %"}


# ---------------------------------------------------------------------------- deep links
def _from_url(key: str, validate) -> None:
    """Seed widget ``key`` from ``?key=`` once per distinct URL value (query params are
    strings from strangers: ``validate`` returns the value to use, or None to ignore)."""
    raw = st.query_params.get(key)
    seen = f"_url_{key}"
    if raw is None or st.session_state.get(seen) == raw:
        return
    st.session_state[seen] = raw
    value = validate(str(raw))
    if value is not None:
        st.session_state[key] = value


def _to_url(key: str, value: str, default: str) -> None:
    """Mirror a widget's value in the URL (removed when it is the default)."""
    if value == default:
        if key in st.query_params:
            del st.query_params[key]
    elif st.query_params.get(key) != value:
        st.query_params[key] = value
    st.session_state[f"_url_{key}"] = st.query_params.get(key)


# ---------------------------------------------------------------------------- cached work
@st.cache_resource(max_entries=4, ttl=900, show_spinner="Reading the profile…")
def _load(run_path: str, sig: tuple, profile_id: str):
    """The parsed profile (shared read-only between sessions; never mutated)."""
    from debugkit.io.profile_cache import read_entry_cached
    from debugkit.io.profile_store import get_profile
    from debugkit.io.run import open_run

    # Parsed once per profile file into the cache folder: a new server does not parse again.
    return read_entry_cached(get_profile(open_run(run_path), profile_id))


def load(run_path: str, profile_id: str):
    return _load(run_path, _common.signature(run_path), profile_id)


@st.cache_data(**_common.CACHE, show_spinner=False)
def _sampled_views(run_path: str, sig: tuple, profile_id: str, threads: tuple | None, by: str, fold: float,
                   idle: bool = False):
    from debugkit.analysis import profile as ap

    prof = _load(run_path, sig, profile_id)
    th = list(threads) if threads is not None else None
    tree = ap.compute_flame_tree(prof, th, by=by, min_fraction=fold)
    table = ap.compute_function_table(prof, th, by="frame" if by == "frame" else "function", include_idle=idle)
    return tree, table, ap.compute_idle_summary(prof, th)


@st.cache_data(**_common.CACHE, show_spinner=False)
def _breakdown(run_path: str, sig: tuple, profile_id: str, threads: tuple | None):
    from debugkit.analysis import profile as ap

    prof = _load(run_path, sig, profile_id)
    bd, info = ap.compute_step_breakdown(prof, list(threads) if threads is not None else None)
    return bd, info, ap.compute_worker_hotspots(prof)


@st.cache_data(**_common.CACHE, show_spinner=False)
def _loop_tree(run_path: str, sig: tuple, profile_id: str, threads: tuple | None, by: str, fold: float):
    from debugkit.analysis import profile as ap

    prof = _load(run_path, sig, profile_id)
    return ap.compute_loop_flame_tree(prof, list(threads) if threads is not None else None, by=by,
                                      min_fraction=fold)[0]


@st.cache_data(**_common.CACHE, show_spinner="Comparing the profiles…")
def _diff(base_path: str, base_sig: tuple, base_id: str, base_threads, new_path: str, new_sig: tuple,
          new_id: str, new_threads, fold: float):
    from debugkit.analysis import profile as ap

    base = _load(base_path, base_sig, base_id)
    new = _load(new_path, new_sig, new_id)
    bt = list(base_threads) if base_threads is not None else None
    nt = list(new_threads) if new_threads is not None else None
    return (ap.compute_diff_tree(base, new, bt, nt, min_fraction=fold),
            ap.compute_profile_diff(base, new, bt, nt))


@st.cache_data(**_common.CACHE, show_spinner="Analysing the trace…")
def _trace_views(run_path: str, sig: tuple, profile_id: str):
    from debugkit.analysis import trace as at

    tr = _load(run_path, sig, profile_id)
    return {"ops": at.compute_operator_table(tr), "ops_shapes": at.compute_operator_table(tr, by_shapes=True),
            "kernels": at.compute_kernel_table(tr), "gpu": (gpu := at.compute_gpu_idle(tr)),
            "gpu_note": at.describe_gpu_idle(gpu),
            "steps": at.compute_trace_steps(tr), "threads": at.trace_threads(tr),
            "annotated": at.compute_annotated_steps(tr), "phases": at.summarize_step_phases(tr),
            "window": at.trace_window(tr)}


@st.cache_data(**_common.CACHE, show_spinner=False)
def _timeline(run_path: str, sig: tuple, profile_id: str, max_events: int, max_depth: int):
    from debugkit.analysis import trace as at

    return at.compute_trace_timeline(_load(run_path, sig, profile_id), max_events=max_events,
                                     max_depth=max_depth)


@st.cache_data(ttl=30, max_entries=8, show_spinner=False)
def _other_profiles(roots_key: tuple[str, ...], here: str) -> list[tuple[str, str, str, str]]:
    """(run id, run path, profile id, label) of sampled profiles in the other served runs."""
    from debugkit.io import store
    from debugkit.io.profile_store import describe
    from debugkit.io.run import open_run

    out = []
    for e in store.find_runs([Path(r) for r in roots_key]):
        if str(e.path) == here:
            continue
        try:
            for p in open_run(e.path).profiles():
                if p["kind"] == "sampled":
                    out.append((e.id, str(e.path), p["id"], describe(p)))
        except DebugkitError:
            continue
    return out


def _original_bytes(entry: dict) -> bytes:
    data = Path(entry["path"]).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


# ---------------------------------------------------------------------------- sampled profiles
def _thread_selection(prof, key: str) -> tuple[tuple | None, str]:
    """The chosen threads (None: all) and a description of them."""
    roles = set(prof.threads["role"].tolist())
    options = [k for k in ("main", "dataloader", "all", "pick") if k in ("all", "pick") or k in roles]
    choice = st.segmented_control("Threads", options, default=options[0], format_func=THREAD_CHOICES.get,
                                  key=f"{key}_threads", required=True,
                                  help="Main thread: the training loop. DataLoader workers: the worker "
                                       "processes (with py-spy --subprocesses).")
    t = prof.threads
    if choice == "pick":
        labels = {int(r.thread_id): f"{r.name or 'thread'} · tid {r.tid} · pid {r.pid} · {r.role} "
                                    f"({r.samples:,} samples)" for r in t.itertuples()}
        picked = st.multiselect("Threads to include", list(labels), default=list(labels)[:1],
                                format_func=labels.get, key=f"{key}_picked")
        return (tuple(sorted(picked)) if picked else None), f"{len(picked)} picked thread(s)"
    if choice in ("main", "dataloader"):
        ids = tuple(sorted(int(x) for x in t.loc[t["role"] == choice, "thread_id"]))
        return ids, THREAD_CHOICES[choice].lower()
    return None, "all threads"


def _fmt_secs(s) -> str:
    if s is None:
        return "—"
    return f"{s:.1f} s" if s < 120 else f"{int(s) // 60} min {int(s) % 60} s"


def render_sampled(entry: dict, prof):
    from debugkit.analysis import profile as ap
    from debugkit.charts import profile as cp

    sig = _common.signature(path)
    meta = prof.meta
    opts = entry.get("pyspy") or {}
    c = st.columns(5)
    c[0].metric("Samples", f"{prof.total_samples:,}")
    c[1].metric("Duration", _fmt_secs(meta.get("duration_s")))
    c[2].metric("Threads", len(prof.threads))
    c[3].metric("Rate", f"{meta['rate_hz']:.0f} Hz" if meta.get("rate_hz") else "—")
    tool = (entry.get("tool") or meta.get("exporter") or entry["format"]).replace("@", " ")
    c[4].metric("Recorded by", tool.split(" ")[0], help=tool)
    count = ap.explain_sample_count(opts.get("samples_reported"), prof, opts.get("errors_reported"))
    if count and (count["launcher"] or count["unexplained"]):
        st.caption(count["note"])  # numbers and our own words only
    if entry.get("command"):
        cmd = entry["command"] if isinstance(entry["command"], str) else " ".join(entry["command"])
        status = entry.get("exit_status")
        st.caption(_common.code(cmd) + (f" · exit status {status}" if status is not None else ""))
    if opts and opts.get("idle") is False:
        st.warning("Recorded without `--idle`: time the training thread spends waiting (for data, "
                   "for a lock) is not sampled, so data loading looks cheaper than it is.",
                   icon=":material/warning:")

    threads, thread_desc = _thread_selection(prof, "sp")
    left, mid, right = st.columns([3, 1.2, 1.2])
    _from_url("search", lambda v: v[:200])
    query = left.text_input("Search a function", key="search", max_chars=200,
                            placeholder="e.g. backward, DataLoader, my_model.py",
                            help="Highlights every frame whose function name or file contains this text.")
    by = mid.segmented_control("Frames", ["function", "frame"], default="function", required=True,
                               format_func={"function": "by function", "frame": "by line"}.get, key="sp_by")
    fold = right.selectbox("Fold frames under", list(FOLD_CHOICES), format_func=FOLD_CHOICES.get,
                           key="sp_fold", help="Frames with fewer samples are merged into one grey block "
                                               "per parent, so the figure stays small.")

    _to_url("search", query.strip(), default="")
    if threads is not None and not len(threads):
        st.info(f"No {thread_desc} in this profile.")
        return
    idle = st.session_state.get("sp_idle", False)
    tree, table, idle_info = _sampled_views(path, sig, entry["id"], threads, by, fold, idle)

    # Step breakdown (main thread by default).
    bd_threads = threads if threads is not None or "main" not in set(prof.threads["role"]) else \
        tuple(prof.thread_ids("main"))
    bd, info, workers = _breakdown(path, sig, entry["id"], bd_threads)
    data_share = float(bd.loc[bd["phase"] == "data", "fraction"].iloc[0]) if info.get("loop_samples") else 0.0
    hot = workers if data_share >= 0.3 or info.get("workers_only") else None
    st.subheader("Where the training step goes")
    if info.get("loop_samples"):
        st.plotly_chart(cp.build_step_breakdown_figure(bd), key="step_breakdown",
                        config={"displayModeBar": False})
        st.markdown(ap.describe_breakdown(bd, info, hot))
        st.caption(f"Training loop: {_common.code(info['loop'])} · {info['loop_samples']:,} samples of {thread_desc}; "
                   f"{info['outside_samples']:,} samples outside it (imports, set-up) are left out.")
    else:
        st.info(ap.describe_breakdown(bd, info, hot), icon=":material/info:")

    st.subheader("Flamegraph")
    # By default the training loop alone (imports and set-up around it left out).
    loop_tree = _loop_tree(path, sig, entry["id"], bd_threads, by, fold) \
        if info.get("loop") and threads == bd_threads else None
    scope = "all"
    if loop_tree is not None:
        scope = st.segmented_control("Flamegraph of", ["loop", "all"], default="loop", required=True,
                                     format_func={"loop": "the training loop", "all": "the whole profile"}.get,
                                     key="sp_scope", help="The training loop: only the samples the step "
                                     "breakdown counts, each stack starting at the loop's function.")
        if scope == "loop":
            tree = loop_tree
    mask = ap.match_frames(tree, query)
    if query.strip():
        hit = ap.search_summary(prof, query, list(threads) if threads is not None else None)
        shown = _common.code(query.strip())  # a URL's text stays inside its code span
        if hit["samples"]:
            st.markdown(f":material/search: **{hit['matches']}** function(s) match {shown}: "
                        f"on the stack in **{hit['samples']:,}** samples (**{hit['fraction']:.1%}** of "
                        f"{thread_desc}), highlighted in pink.")
        else:
            st.markdown(f":material/search_off: Nothing matches {shown} in {thread_desc}.")
    names = dict(zip(tree["node_id"].astype(int), tree["name"]))
    shares = dict(zip(tree["node_id"].astype(int), tree["fraction"]))
    loop_node = _loop_node(tree, info) if info.get("loop") and threads == bd_threads and scope == "all" else None
    if mask.any():
        zoom_opts = [-1] + [int(n) for n in tree.loc[mask, "node_id"].tolist()[:200]]
    else:
        zoom_opts = [-1] + ([loop_node] if loop_node is not None else []) + [
            int(n) for n in tree[(tree["depth"] > 0) & (tree["folded"] == 0)]
            .sort_values("samples", ascending=False)["node_id"].head(40) if int(n) != loop_node]

    def zoom_label(n):
        if n < 0:
            return "the training loop (all of it)" if scope == "loop" else "the whole profile"
        return ("the training loop: " if n == loop_node else "") + f"{names[n]} ({shares[n]:.1%})"

    z1, z2 = st.columns([3, 1])
    zoom = z1.selectbox("Zoom into", zoom_opts, key=f"sp_zoom_{entry['id']}_{by}_{scope}", format_func=zoom_label,
                        help="Or click a frame in the figure to zoom into it; click the bar above "
                             "the figure to zoom back out.")
    flame = z2.toggle("Root at the bottom", value=False, key="sp_flame",
                      help="Flame graph (root at the bottom) instead of an icicle (root on top).")
    fig = cp.build_flamegraph_figure(tree, highlight=mask if mask.any() else None,
                                     root_id=None if zoom < 0 else zoom, flame=flame)
    st.plotly_chart(fig, key="flamegraph", config={"displayModeBar": False})
    folded = int((tree["folded"] > 0).sum())
    st.caption(f"{len(tree):,} frames of {thread_desc}" + (" in the training loop" if scope == "loop" else "")
               + f" ({int(tree['depth'].max())} levels; "
               f"{cp.MAX_LEVELS} shown at once: click a frame to zoom in)"
               + (f"; {int(tree['folded'].sum()):,} frames under {FOLD_CHOICES[fold]} of the samples "
                  f"folded into {folded:,} grey blocks" if folded else "")
               + ". Width: share of the samples; colour: package (your code blue, torch orange, "
                 "Python grey). Hover a frame for its file, line and samples.")

    st.subheader("Top functions")
    st.toggle("Show idle frames", key="sp_idle",
              help="Samples whose innermost frame waits (Condition.wait, select, socket.accept, queue "
                   "get ...) are left out of the self-time table by default.")
    if not idle and idle_info["samples"]:
        st.caption(f"{idle_info['samples']:,} idle samples ({idle_info['fraction']:.0%} of {thread_desc}) "
                   "left out of the self time, waiting in " + ", ".join(_common.code(r["name"]) for r in idle_info["top"][:3])
                   + ".")
    _function_tables(table, by, query)

    with st.expander(f"Threads ({len(prof.threads)})"):
        st.dataframe(prof.threads.drop(columns=["thread_id"]), hide_index=True, width="stretch",
                     column_config={"weight_s": st.column_config.NumberColumn("seconds", format="%.2f")})

    _compare(entry, prof, threads)
    st.download_button("Download the original file", data=_original_bytes(entry),
                       file_name=f"{entry['id']}" + (".speedscope.json" if entry["format"] == "speedscope" else ".txt"),
                       help="Opens in speedscope.app too.", icon=":material/download:")


def _loop_node(tree, info) -> int | None:
    """The flame-tree node of the training loop's function (its heaviest occurrence)."""
    name = info["loop"].split(" (", 1)[0]
    cand = tree[(tree["name"] == name) & (tree["folded"] == 0)]
    return int(cand.sort_values("samples", ascending=False)["node_id"].iloc[0]) if len(cand) else None


def _function_tables(table, by: str, query: str):
    cols = {"self_fraction": st.column_config.ProgressColumn("self %", format="percent", min_value=0, max_value=1),
            "total_fraction": st.column_config.ProgressColumn("total %", format="percent", min_value=0, max_value=1),
            "self_s": st.column_config.NumberColumn("self s", format="%.2f"),
            "total_s": st.column_config.NumberColumn("total s", format="%.2f"),
            "self_samples": st.column_config.NumberColumn("self samples"),
            "total_samples": st.column_config.NumberColumn("total samples")}
    show = table.copy()
    show["file"] = [f.split("site-packages/", 1)[-1] for f in show["file"]]
    if by != "frame":
        show = show.drop(columns=["line"])
    if query.strip():
        q = query.strip().lower()
        show = show[(show["name"].str.lower().str.contains(q, regex=False))
                    | (show["file"].str.lower().str.contains(q, regex=False))]
    t1, t2 = st.tabs(["Self time (code running)", "Total time (on the stack)"])
    order = ["name", "file"] + (["line"] if by == "frame" else [])
    with t1:
        st.dataframe(show.head(200), hide_index=True, width="stretch", height=360, column_config=cols,
                     column_order=order + ["self_fraction", "self_samples", "self_s", "total_fraction"])
    with t2:
        tot = show.sort_values(["total_samples", "self_samples"], ascending=False, kind="stable")
        st.dataframe(tot.head(200), hide_index=True, width="stretch", height=360, column_config=cols,
                     column_order=order + ["total_fraction", "total_samples", "total_s", "self_fraction"])


def _compare(entry: dict, prof, threads):
    from debugkit.charts import profile as cp
    from debugkit.io.profile_store import describe

    st.subheader("Compare with another profile")
    here = [(None, path, p["id"], describe(p)) for p in _common.table(path, "profiles")
            if p["kind"] == "sampled" and p["id"] != entry["id"]]
    others = _other_profiles(tuple(str(r) for r in _common.roots()), str(Path(path)))
    choices = here + [(rid, rp, pid, f"{rid} / {label}") for rid, rp, pid, label in others]
    if not choices:
        st.caption("Record a second profile (e.g. after a change) with `debugkit profile RUN_DIR "
                   "--name after -- python train.py ...` to see what got slower.")
        return
    labels = {i: c[3] for i, c in enumerate(choices)}
    pick = st.selectbox("Before (the baseline); this profile is after", [-1] + list(labels),
                        format_func=lambda i: "—" if i < 0 else labels[i], key="sp_compare")
    if pick < 0:
        return
    _, base_path, base_id, _ = choices[pick]
    try:
        base = _load(base_path, _common.signature(base_path), base_id)
    except DebugkitError as exc:
        _common.show_error(exc)
        return
    # The same kind of threads on both sides (main thread vs main thread, workers vs workers).
    role = next((r for r in ("main", "dataloader") if threads is not None
                 and set(threads) == set(prof.thread_ids(r))), None)
    base_threads = tuple(sorted(base.thread_ids(role))) if role and base.thread_ids(role) else None
    if threads is not None and base_threads is None:
        st.caption("Comparing against all threads of the baseline (it has no threads of the "
                   "kind selected here).")
    tree, table = _diff(base_path, _common.signature(base_path), base_id, base_threads, path,
                        _common.signature(path), entry["id"], threads, 0.001)
    st.plotly_chart(cp.build_diff_flamegraph_figure(tree), key="diff_flamegraph",
                    config={"displayModeBar": False})
    st.caption("Sizes: this profile. Red: a larger share of the samples than in the baseline "
               "(slower, or called more); blue: a smaller share.")
    cols = {c: st.column_config.NumberColumn(c.replace("_", " "), format="percent")
            for c in ("base_self_fraction", "new_self_fraction", "self_delta", "base_total_fraction",
                      "new_total_fraction", "total_delta")}
    show = table.copy()
    show["file"] = [f.split("site-packages/", 1)[-1] for f in show["file"]]
    a, b = st.columns(2)
    with a:
        st.markdown("**Got slower** (larger share now)")
        st.dataframe(show[show["self_delta"] > 0].head(25), hide_index=True, width="stretch", column_config=cols,
                     column_order=["name", "file", "base_self_fraction", "new_self_fraction", "self_delta"])
    with b:
        st.markdown("**Got faster** (smaller share now)")
        st.dataframe(show[show["self_delta"] < 0].sort_values("self_delta").head(25), hide_index=True,
                     width="stretch", column_config=cols,
                     column_order=["name", "file", "base_self_fraction", "new_self_fraction", "self_delta"])


# ---------------------------------------------------------------------------- traces
def render_trace(entry: dict, trace):
    from debugkit.charts import profile as cp

    sig = _common.signature(path)
    v = _trace_views(path, sig, entry["id"])
    gpu = v["gpu"]
    w0, w1 = v["window"]
    c = st.columns(5)
    c[0].metric("Events", f"{trace.n_events:,}")
    c[1].metric("Window", f"{(w1 - w0) / 1e3:,.1f} ms")
    c[2].metric("Threads / streams", len(v["threads"]))
    c[3].metric("Steps", len(v["steps"]) or "—")
    c[4].metric("GPU idle", f"{gpu['idle_fraction'].mean():.0%}" if len(gpu) else "no GPU",
                help="Holistic Trace Analysis' idle share: of the span from the first to the last GPU "
                     "event, the time the GPU ran nothing (last ProfilerStep left out; per device: see below).")
    if entry.get("label"):
        st.caption(_common.md(entry["label"]))
    if len(v["annotated"]):
        st.subheader("Steps (your annotations)")
        st.plotly_chart(cp.build_annotated_steps_figure(v["annotated"]), key="trace_steps",
                        config={"displayModeBar": False})
        ph = v["phases"]
        st.caption("Per `ProfilerStep`, split by your `record_function` annotations: " + ", ".join(
            f"{_common.md(k)} {p['fraction']:.0%}" for k, p in ph["phases"].items() if p["fraction"] >= 0.005)
            + (f". Note: {_common.md(ph['note'])}." if ph.get("note") else "."))
    elif len(v["steps"]):
        st.subheader("Steps")
        st.plotly_chart(cp.build_trace_steps_figure(v["steps"]), key="trace_steps",
                        config={"displayModeBar": False})
        s = v["steps"]
        tot = float(s["dur_ms"].sum()) or 1.0
        st.caption("Per `ProfilerStep`: " + ", ".join(
            f"{k} {s[f'{k}_ms'].sum() / tot:.0%}" for k in ("data", "forward", "backward", "optimizer", "other")))
    else:
        st.caption("No `ProfilerStep#` annotations: record with `schedule=` and call `prof.step()` each "
                   "step to see the per-step breakdown.")
    st.subheader("Operators")
    shapes = st.toggle("Group by input shapes", key="tr_shapes",
                       disabled=not (v["ops_shapes"]["input_shapes"] != "").any() if len(v["ops_shapes"]) else True,
                       help="Needs `record_shapes=True` when profiling.")
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
    max_events = c1.select_slider("Events drawn (the longest)", [500, 1000, 3000, 10000], value=3000, key="tr_max")
    depth = c2.select_slider("Nesting levels", [0, 1, 2, 3, 4], value=2, key="tr_depth")
    tl = _timeline(path, sig, entry["id"], max_events, depth)
    st.plotly_chart(cp.build_trace_timeline_figure(tl), key="trace_timeline")
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
    st.download_button("Download the trace (chrome://tracing, Perfetto)", data=_original_bytes(entry),
                       file_name=f"{entry['id']}.json", icon=":material/download:")


# ---------------------------------------------------------------------------- stack dumps
WAIT_HINTS = {
    "collective": "waiting in a collective (all_reduce, barrier ...): another rank is behind, or dead",
    "dataloader": "waiting for a DataLoader batch: a worker is slow, stuck or dead",
    "queue": "waiting on a queue", "lock": "waiting on a lock, event or join",
    "socket": "waiting on a socket or pipe", "sleep": "sleeping", "io": "in file or pipe I/O",
}


def render_dump(entry: dict, dump):
    t = dump.threads
    c = st.columns(4)
    c[0].metric("Threads", len(t))
    c[1].metric("Processes", int(t["pid"].nunique()))
    c[2].metric("Running", int(t["active"].sum()))
    c[3].metric("Holding the GIL", int(t["owns_gil"].sum()))
    waiting = t[~t["active"] & (t["waiting_in"] != "")]
    if len(t) and not t["active"].any():
        top = waiting["waiting_in"].value_counts()
        what = WAIT_HINTS.get(top.index[0], _common.md(top.index[0])) if len(top) else "idle"
        st.warning(f"Every thread is idle: the process looks hung. Most threads are {what}.",
                   icon=":material/hourglass_empty:")
    st.dataframe(t.drop(columns=["thread"]), hide_index=True, width="stretch")
    for r in t.itertuples():
        state = "running" if r.active else (f"idle · {r.waiting_in}" if r.waiting_in else "idle")
        with st.expander(_common.md(f"{r.name or 'thread'} · tid {r.tid} · pid {r.pid} · {state} · {r.leaf}")):
            fr = dump.frames[dump.frames["thread"] == r.thread]
            lines = [f"{f.name}  ({f.file}:{f.line})" if str(f.line) != "<NA>" else f"{f.name}  ({f.file})"
                     for f in fr.itertuples()]
            st.code("\n".join(lines) or "(no Python frames)", language=None)
            loc = [f for f in fr.itertuples() if f.locals]
            if loc:
                st.json({f"{f.name}:{f.line}": f.locals for f in loc}, expanded=False)


# ---------------------------------------------------------------------------- the page
def render():
    from debugkit.io.profile_store import describe

    try:
        entries = _common.table(path, "profiles")
        info = _common.summary(path)
    except DebugkitError as exc:
        _common.show_error(exc)
        return
    st.title("Profiler")
    _common.about('Sampled stacks (py-spy) and torch.profiler traces stored in this run: where the training step spends its time (data loading, forward, backward, optimizer), a flamegraph per thread, the slowest functions, and the operators and kernels of a torch.profiler trace. Record one with `debugkit profile RUN -- python train.py`.')
    st.caption(f"{_common.md(info['name'])} · py-spy flamegraphs, torch.profiler traces and stack dumps")
    if not entries:
        st.info("This run holds no profiles yet.", icon=":material/speed:")
        st.markdown(
            "- Profile the training with py-spy: `debugkit profile RUN_DIR -- python train.py ...`\n"
            "- Attach to a running job for 30 s: `debugkit profile RUN_DIR --pid PID --duration 30`\n"
            "- Stacks of every thread of a hung process: `debugkit dump --pid PID RUN_DIR`\n"
            "- Add existing files: `debugkit import pyspy profile.json RUN_DIR`, "
            "`debugkit import torch-trace trace.json.gz RUN_DIR`")
        return
    ids = [e["id"] for e in entries]
    by_id = {e["id"]: e for e in entries}
    _from_url("profile", lambda v: v if v in by_id else None)
    pid = st.selectbox("Profile", ids, index=0, key="profile", format_func=lambda i: describe(by_id[i]))
    _to_url("profile", pid, default=ids[0])
    entry = by_id[pid]
    try:
        obj = load(path, pid)
    except DebugkitError as exc:
        _common.show_error(exc)
        return
    from debugkit.io.chrome_trace import ChromeTrace
    from debugkit.io.profile_model import SampledProfile

    try:
        if isinstance(obj, SampledProfile):
            render_sampled(entry, obj)
        elif isinstance(obj, ChromeTrace):
            render_trace(entry, obj)
        else:
            render_dump(entry, obj)
    except DebugkitError as exc:
        _common.show_error(exc)
    for w in info.get("warnings") or []:
        st.caption(f":material/info: {_common.md(w)}")


try:
    render()
except Exception as exc:  # a short message and a collapsed traceback, never a blank page
    _common.show_error(exc, "the Profiler page")
