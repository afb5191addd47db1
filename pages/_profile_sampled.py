"""The Profiler page's view of a sampled profile (py-spy): step breakdown, flamegraph,
function table, and the comparison with another profile."""

from __future__ import annotations

import streamlit as st

from debugkit.errors import DebugkitError
from debugkit.location import as_path
from pages import _data, _query, _runs, _ui
from pages._flamegraph import flamegraph
from pages._profile_load import original_bytes, read_profile

THREAD_CHOICES = {"main": "Main thread", "dataloader": "DataLoader workers", "all": "All threads",
                  "pick": "Pick threads…"}
FOLD_CHOICES = {0.001: "0.1 %", 0.005: "0.5 %", 0.01: "1 %"}
BY_CHOICES = {"function": "by function", "frame": "by line"}
# The views under the step breakdown, like speedscope's (flame graph, "sandwich" table).
VIEWS = {"flame": "Flamegraph", "functions": "Top functions", "threads": "Threads", "compare": "Compare"}
TABLES = {"self": "Self time (code running)", "total": "Total time (on the stack)"}
# Keys (prefixes) of the widgets drawn inside those tabs.
VIEW_WIDGETS = {"flame": ("sp_scope", "sp_zoom_", "sp_flame"), "functions": ("sp_idle", "sp_table_tab"),
                "compare": ("sp_compare",)}


@st.cache_data(**_data.CACHE, show_spinner=False)
def _flame_tree(run_path: str, sig: tuple, profile_id: str, threads: tuple | None, by: str, fold: float):
    from debugkit.analysis import profile as ap

    prof = read_profile(run_path, sig, profile_id)
    return ap.compute_flame_tree(prof, list(threads) if threads is not None else None, by=by, min_fraction=fold)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _function_table(run_path: str, sig: tuple, profile_id: str, threads: tuple | None, by: str, idle: bool):
    from debugkit.analysis import profile as ap

    prof = read_profile(run_path, sig, profile_id)
    th = list(threads) if threads is not None else None
    table = ap.compute_function_table(prof, th, by="frame" if by == "frame" else "function", include_idle=idle)
    return table, ap.compute_idle_summary(prof, th)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _phases(run_path: str, sig: tuple, profile_id: str, threads: tuple | None):
    """The step breakdown with the loop's samples, computed once for the breakdown's words
    and the loop's flamegraph (twice before: 0.03-0.06 s of a cold page load each), and
    kept with the parsed profile in the cache folder: a new server's first visit reads it
    (20-30 ms of its script run before the flamegraph otherwise)."""
    from debugkit.analysis import profile as ap
    from debugkit.io.profile_cache import derived

    prof = read_profile(run_path, sig, profile_id)
    th = list(threads) if threads is not None else None
    return derived(prof, "step_phases", [th], lambda: ap.compute_step_phases(prof, th), _pack_phases, _unpack_phases)


def _pack_phases(res):
    df, info, inside, loop_fn = res
    return {"breakdown": df}, {"inside": inside}, {"info": info, "loop_fn": list(loop_fn) if loop_fn else None}


def _unpack_phases(tables, arrays, head):
    loop_fn = head["loop_fn"]
    return tables["breakdown"], head["info"], arrays["inside"], tuple(loop_fn) if loop_fn else None


def _breakdown(run_path: str, sig: tuple, profile_id: str, threads: tuple | None):
    return _phases(run_path, sig, profile_id, threads)[:2]


@st.cache_data(**_data.CACHE, show_spinner=False)
def _worker_hotspots(run_path: str, sig: tuple, profile_id: str):
    from debugkit.analysis import profile as ap

    return ap.compute_worker_hotspots(read_profile(run_path, sig, profile_id))


@st.cache_data(**_data.CACHE, show_spinner=False)
def _loop_tree(run_path: str, sig: tuple, profile_id: str, threads: tuple | None, by: str, fold: float):
    """The training loop's flame tree (None: no loop), kept in the cache folder as
    :func:`_phases` is."""
    from debugkit.analysis import profile as ap
    from debugkit.io.profile_cache import derived

    prof = read_profile(run_path, sig, profile_id)
    th = list(threads) if threads is not None else None

    def compute():
        return ap.compute_loop_flame_tree(prof, th, by=by, min_fraction=fold,
                                          phases=_phases(run_path, sig, profile_id, threads))[0]

    return derived(prof, "loop_tree", [th, by, fold], compute,
                   lambda tree: ({} if tree is None else {"tree": tree}, {}, {}),
                   lambda tables, arrays, head: tables.get("tree"))


@st.cache_data(**_data.CACHE, show_spinner="Comparing the profiles…")
def _diff(base_path: str, base_sig: tuple, base_id: str, base_threads, new_path: str, new_sig: tuple,
          new_id: str, new_threads, fold: float):
    from debugkit.analysis import profile as ap

    base = read_profile(base_path, base_sig, base_id)
    new = read_profile(new_path, new_sig, new_id)
    bt = list(base_threads) if base_threads is not None else None
    nt = list(new_threads) if new_threads is not None else None
    return (ap.compute_diff_tree(base, new, bt, nt, min_fraction=fold),
            ap.compute_profile_diff(base, new, bt, nt))


@st.cache_data(ttl=30, max_entries=8, show_spinner=False)
def _other_profiles(roots_key: tuple[str, ...], here: str) -> list[tuple[str, str, str, str]]:
    """(run id, run path, profile id, label) of sampled profiles in the other served runs."""
    from debugkit.io import served_runs
    from debugkit.io.run import open_run
    from debugkit.io.run_profiles import describe

    out = []
    for e in served_runs.find_runs([as_path(r) for r in roots_key]):
        if str(e.path) == here:
            continue
        try:
            for p in open_run(e.path).profiles():
                if p["kind"] == "sampled":
                    out.append((e.id, str(e.path), p["id"], describe(p)))
        except DebugkitError:
            continue
    return out


def _thread_selection(prof, key: str) -> tuple[tuple | None, str]:
    """The chosen threads (None: all) and a description of them."""
    roles = set(prof.threads["role"].tolist())
    options = [k for k in ("main", "dataloader", "all", "pick") if k in ("all", "pick") or k in roles]
    if st.session_state.get(f"{key}_threads") not in options:
        st.session_state[f"{key}_threads"] = options[0]
    _query.from_query(f"{key}_threads", lambda v: v if v in options else None, name="threads",
                      expected="one of " + ", ".join(repr(o) for o in options))
    choice = st.segmented_control("Threads", options, format_func=THREAD_CHOICES.get,
                                  key=f"{key}_threads", required=True,
                                  help="Main thread: the training loop. DataLoader workers: the worker "
                                       "processes (with py-spy --subprocesses).")
    _query.to_query(f"{key}_threads", choice, options[0], name="threads")
    t = prof.threads
    if choice == "pick":
        labels = {int(r.thread_id): f"{r.name or 'thread'} · tid {r.tid} · pid {r.pid} · {r.role} "
                                    f"({r.samples:,} samples)" for r in t.itertuples()}
        ids = [str(i) for i in labels]
        if not set(st.session_state.get(f"{key}_picked") or []) <= set(labels):
            st.session_state[f"{key}_picked"] = list(labels)[:1]  # the threads of another profile
        st.session_state.setdefault(f"{key}_picked", list(labels)[:1])
        if "thread" in st.query_params:  # ?thread=<id> repeated, as the multiselect holds ints
            raw = st.query_params.get_all("thread")
            if st.session_state.get("_url_thread") != raw:
                st.session_state["_url_thread"] = raw
                bad = [v for v in raw if v not in ids]
                if bad:
                    st.warning(_ui.md(_query.MSG_BAD_VALUES.format(
                        name="thread", raw=", ".join(bad)[:60], expected="a thread id of this profile")),
                        icon=":material/link_off:")
                known = [int(v) for v in dict.fromkeys(raw) if v in ids]
                if known:
                    st.session_state[f"{key}_picked"] = known
        picked = st.multiselect("Threads to include", list(labels), format_func=labels.get, key=f"{key}_picked")
        _query.list_to_query(f"{key}_picked", [str(i) for i in picked], ids[:1], name="thread")
        return (tuple(sorted(picked)) if picked else None), f"{len(picked)} picked thread(s)"
    if "thread" in st.query_params:
        del st.query_params["thread"]
    if choice in ("main", "dataloader"):
        ids = tuple(sorted(int(x) for x in t.loc[t["role"] == choice, "thread_id"]))
        return ids, THREAD_CHOICES[choice].lower()
    return None, "all threads"


def _fmt_secs(s) -> str:
    if s is None:
        return "—"
    return f"{s:.1f} s" if s < 120 else f"{int(s) // 60} min {int(s) % 60} s"


def render_sampled(path: str, entry: dict, prof):
    from debugkit.analysis import profile as ap
    from debugkit.charts import profile as cp

    sig = _data.signature(path)
    opts = entry.get("pyspy") or {}
    if opts and opts.get("idle") is False:
        st.warning("Recorded without `--idle`: time the training thread spends waiting (for data, "
                   "for a lock) is not sampled, so data loading looks cheaper than it is.",
                   icon=":material/warning:")

    threads, thread_desc = _thread_selection(prof, "sp")
    if threads is not None and not len(threads):
        st.info(f"No {thread_desc} in this profile.")
        _profile_facts(path, entry, prof)
        return

    # Step breakdown (main thread by default).
    bd_threads = threads if threads is not None or "main" not in set(prof.threads["role"]) else \
        tuple(prof.thread_ids("main"))
    bd, info = _breakdown(path, sig, entry["id"], bd_threads)
    data_share = float(bd.loc[bd["phase"] == "data", "fraction"].iloc[0]) if info.get("loop_samples") else 0.0
    # The workers' hot functions are named only when waiting for data is a large share.
    hot = _worker_hotspots(path, sig, entry["id"]) if data_share >= 0.3 or info.get("workers_only") else None
    st.subheader("Where the training step goes")
    if info.get("loop_samples"):
        # the finding and the shares: two paragraphs of one element
        st.markdown(ap.describe_breakdown(bd, info, hot) + "\n\n" + " · ".join(
            f"{cp.PHASE_LABELS.get(r.phase, r.phase)} **{100 * float(r.fraction):.0f} %**" for r in bd.itertuples()))
        # the bar of the same shares is built when opened (?breakdown=1): the flamegraph is the
        # page's first chart, and a second figure sent and drawn with it delayed it (issue 35 item 9)
        box = _query.expander("Step breakdown chart", "sp_breakdown_open", name="breakdown",
                              run_path=f"{path}#{entry['id']}", icon=":material/bar_chart:")
        if box.open:
            with box:
                _ui.chart(cp.build_step_breakdown_figure(bd), key="step_breakdown",
                          config={"displayModeBar": False})
        st.caption(f"Training loop: {_ui.code(_ui.recorded_text(info['loop'], _data.recorded_roots(path)))} · {info['loop_samples']:,} samples of {thread_desc}; "
                   f"{info['outside_samples']:,} samples outside it (imports, set-up) are left out.")
    else:
        st.info(ap.describe_breakdown(bd, info, hot), icon=":material/info:")

    # The views below the breakdown (speedscope's flame graph and "sandwich" table), one
    # drawn at a time (the browser then loads no data grid, and the server computes no
    # table, before the flamegraph), picked with a segmented control like speedscope's view
    # buttons: a tab container of four cost the flamegraph more to mount (issue 35 item 9)
    # One toolbar for the views: which view, the search, and how frames are grouped and
    # folded (a popover: its select box's code is loaded when opened). The sample counts
    # and the command line come under the views: every element mounted before the
    # flamegraph delayed it (issue 35 item 9).
    labels = list(VIEWS.values())
    if st.session_state.get("sp_view") not in labels:
        st.session_state["sp_view"] = labels[0]
    _query.from_query("sp_view", VIEWS.get, name="view", expected="one of " + ", ".join(repr(s) for s in VIEWS))
    bar = st.container(horizontal=True, vertical_alignment="center", gap="small")
    shown = bar.segmented_control("View", labels, key="sp_view", required=True, label_visibility="collapsed")
    view = next((s for s, lab in VIEWS.items() if lab == shown), "flame")
    _query.to_query("sp_view", view, "flame", name="view")
    by, fold = _frame_options(bar)
    _query.from_query("search", lambda v: v[:200])
    query = bar.text_input("Search a function", key="search", max_chars=200, width="stretch",
                           label_visibility="collapsed", placeholder="Search a function",
                           help="Highlights every frame whose function name or file contains this "
                                "text (backward, DataLoader, my_model.py).")
    _query.to_query("search", query.strip(), default="")
    for name, prefixes in VIEW_WIDGETS.items():  # kept while another view is shown
        if name != view:
            _ui.keep_widget_state(*prefixes)
    if view == "flame":
        _flamegraph(path, sig, entry, prof, threads, thread_desc, bd_threads, info, query, by, fold)
    elif view == "functions":
        _top_functions(path, sig, entry, threads, thread_desc, by, query)
    elif view == "threads":
        # a thread's name may hold its process's command line: no folders of that machine
        st.dataframe(_ui.recorded_frame(prof.threads.drop(columns=["thread_id"]), _data.recorded_roots(path)),
                     hide_index=True, width="stretch",
                     column_config={"weight_s": st.column_config.NumberColumn("seconds", format="%.2f")})
    else:
        _compare(path, entry, prof, threads)
    _profile_facts(path, entry, prof)
    # read (and gunzipped) when clicked, not in each script run after the flamegraph
    st.download_button("Download the original file", data=lambda: original_bytes(entry), on_click="ignore",
                       file_name=f"{entry['id']}" + (".speedscope.json" if entry["format"] == "speedscope" else ".txt"),
                       help="Opens in speedscope.app too.", icon=":material/download:")


def _frame_options(bar) -> tuple[str, float]:
    """Frames grouped by function or by line, and folded under a share of the samples: one
    popover in the views' toolbar, named after both (``Frames: by function · fold 0.1 %``)."""
    if st.session_state.get("sp_by") not in BY_CHOICES:
        st.session_state["sp_by"] = "function"
    if st.session_state.get("sp_fold") not in FOLD_CHOICES:
        st.session_state["sp_fold"] = next(iter(FOLD_CHOICES))
    _query.from_query("sp_by", lambda v: v if v in BY_CHOICES else None, name="by",
                      expected="'function' or 'frame'")
    _query.from_query("sp_fold", lambda v: next((f for f in FOLD_CHOICES if f"{f:g}" == v), None),
                      name="fold", expected="one of " + ", ".join(f"{f:g}" for f in FOLD_CHOICES))
    shown = f"{BY_CHOICES[st.session_state['sp_by']]} · fold {FOLD_CHOICES[st.session_state['sp_fold']]}"
    with bar, _ui.controls("Frames", shown, icon=":material/unfold_less:"):
        by = st.segmented_control("Frames", list(BY_CHOICES), required=True, format_func=BY_CHOICES.get,
                                  key="sp_by")
        fold = st.selectbox("Fold frames under", list(FOLD_CHOICES), format_func=FOLD_CHOICES.get,
                            key="sp_fold", help="Frames with fewer samples are merged into one grey block "
                                                "per parent, so the figure stays small.")
    _query.to_query("sp_by", by, "function", name="by")
    _query.to_query("sp_fold", f"{fold:g}", f"{next(iter(FOLD_CHOICES)):g}", name="fold")
    return by, fold


def _profile_facts(path: str, entry: dict, prof) -> None:
    """The profile's sample count, duration, threads, rate and recorder, with the sample
    count explained and the recorded command line, under the views."""
    from debugkit.analysis import profile as ap

    meta = prof.meta
    opts = entry.get("pyspy") or {}
    tool = (entry.get("tool") or meta.get("exporter") or entry["format"]).replace("@", " ")
    _ui.figures([
        ("Samples", f"{prof.total_samples:,}"),
        ("Duration", _fmt_secs(meta.get("duration_s"))),
        ("Threads", len(prof.threads)),
        ("Rate", f"{meta['rate_hz']:.0f} Hz" if meta.get("rate_hz") else "—"),
        ("Recorded by", tool.split(" ")[0], tool),
    ])
    count = ap.explain_sample_count(opts.get("samples_reported"), prof, opts.get("errors_reported"))
    notes = []  # one caption of lines
    if count and (count["launcher"] or count["unexplained"]):
        notes.append(count["note"])  # numbers and our own words only
    if entry.get("command"):
        cmd = entry["command"] if isinstance(entry["command"], str) else " ".join(entry["command"])
        status = entry.get("exit_status")
        # no folders of the recording machine (its home, checkout, interpreter)
        notes.append(_ui.code(_ui.recorded_text(cmd, _data.recorded_roots(path)))
                     + (f" · exit status {status}" if status is not None else ""))
    if notes:
        st.caption("  \n".join(notes))


def _flamegraph(path: str, sig: tuple, entry: dict, prof, threads, thread_desc: str, bd_threads, info: dict,
                query: str, by: str, fold: float):
    """The flamegraph (an icicle by default), opening at the training loop."""
    from debugkit.analysis import profile as ap
    from debugkit.charts import profile as cp

    # By default the training loop alone (imports and set-up around it left out). Only the
    # tree shown is built: the whole profile's took a third of a cold page load's script run
    # before the first chart, to be thrown away (issue 35 item 9)
    has_loop = bool(info.get("loop")) and threads == bd_threads
    scope = "all"
    # one row above the figure: what it draws, the zoom, root at the bottom
    bar = st.container(horizontal=True, vertical_alignment="center", gap="small")
    if has_loop:
        st.session_state.setdefault("sp_scope", "loop")
        _query.from_query("sp_scope", lambda v: v if v in ("loop", "all") else None, name="scope",
                          expected="'loop' or 'all'")
        scope = bar.segmented_control("Flamegraph of", ["loop", "all"], required=True, label_visibility="collapsed",
                                     format_func={"loop": "the training loop", "all": "the whole profile"}.get,
                                     key="sp_scope", help="The training loop: only the samples the step "
                                     "breakdown counts, each stack starting at the loop's function.")
        _query.to_query("sp_scope", scope, "loop", name="scope")
    tree = (_loop_tree(path, sig, entry["id"], bd_threads, by, fold) if scope == "loop"
            else _flame_tree(path, sig, entry["id"], threads, by, fold))
    mask = ap.match_frames(tree, query)
    if query.strip():
        hit = ap.search_summary(prof, query, list(threads) if threads is not None else None)
        shown = _ui.code(query.strip())  # a URL's text stays inside its code span
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

    zkey = f"sp_zoom_{entry['id']}_{by}_{scope}"
    if st.session_state.get(zkey) not in zoom_opts:
        st.session_state[zkey] = -1
    _query.from_query(zkey, lambda v: int(v) if v.isdigit() and int(v) in zoom_opts else None, name="zoom",
                      expected="a frame this view offers to zoom into")
    st.session_state.setdefault("sp_flame", False)
    _query.from_query("sp_flame", _query.flag, name="flame", expected="0 or 1")
    # in a popover named after the zoom (_ui.controls): the select box's code is not loaded
    # before the flamegraph
    with bar, _ui.controls("Zoom", zoom_label(st.session_state[zkey]), icon=":material/zoom_in:"):
        zoom = st.selectbox("Zoom into", zoom_opts, key=zkey, format_func=zoom_label,
                            help="Or click a frame in the figure to zoom into it; click it again, or an "
                                 "ancestor above it, or press Esc to zoom back out.")
    flame = bar.toggle("Root at the bottom", key="sp_flame",
                      help="Flame graph (root at the bottom) instead of an icicle (root on top).")
    _query.to_query(zkey, str(zoom), "-1", name="zoom")
    _query.to_query("sp_flame", "1" if flame else "0", "0", name="flame")
    roots = _data.recorded_roots(path)
    flamegraph(cp.flamegraph_data(tree, highlight=mask if mask.any() else None,
                                  root_id=None if zoom < 0 else zoom, flame=flame, roots=roots,
                                  dark=_ui.is_dark()),
               lambda: cp.flamegraph_table(tree, roots), key="flamegraph")
    folded = int((tree["folded"] > 0).sum())
    levels = int(tree["depth"].max()) + 1
    st.caption(f"{len(tree):,} frames of {thread_desc}" + (" in the training loop" if scope == "loop" else "")
               + f" ({levels} levels" + (f", {cp.VISIBLE_LEVELS} shown at once: scroll for the others"
                                          if levels > cp.VISIBLE_LEVELS else "")
               + "; click a frame to zoom into it, click it again or press Esc to zoom out)"
               + (f"; {int(tree['folded'].sum()):,} frames under {FOLD_CHOICES[fold]} of the samples "
                  f"folded into {folded:,} grey blocks" if folded else "")
               + ". Width: share of the samples; colour: package (your code blue, torch orange, "
                 "Python grey). Hover a frame for its file, line and samples.")


def _top_functions(path: str, sig: tuple, entry: dict, threads, thread_desc: str, by: str, query: str):
    """Self and total time per function (or per line), idle frames left out by default."""
    st.session_state.setdefault("sp_idle", False)
    _query.from_query("sp_idle", _query.flag, name="idle", expected="0 or 1")
    idle = st.toggle("Show idle frames", key="sp_idle",
                     help="Samples whose innermost frame waits (Condition.wait, select, socket.accept, "
                          "queue get ...) are left out of the self-time table by default.")
    _query.to_query("sp_idle", "1" if idle else "0", "0", name="idle")
    table, idle_info = _function_table(path, sig, entry["id"], threads, by, idle)
    if not idle and idle_info["samples"]:
        st.caption(f"{idle_info['samples']:,} idle samples ({idle_info['fraction']:.0%} of {thread_desc}) "
                   "left out of the self time, waiting in " + ", ".join(_ui.code(r["name"]) for r in idle_info["top"][:3])
                   + ".")
    _function_tables(table, by, query, _data.recorded_roots(path))


def _loop_node(tree, info) -> int | None:
    """The flame-tree node of the training loop's function (its heaviest occurrence)."""
    name = info["loop"].split(" (", 1)[0]
    cand = tree[(tree["name"] == name) & (tree["folded"] == 0)]
    return int(cand.sort_values("samples", ascending=False)["node_id"].iloc[0]) if len(cand) else None


def _function_tables(table, by: str, query: str, roots: tuple = ()):
    cols = {"self_fraction": st.column_config.ProgressColumn("self %", format="percent", min_value=0, max_value=1),
            "total_fraction": st.column_config.ProgressColumn("total %", format="percent", min_value=0, max_value=1),
            "self_s": st.column_config.NumberColumn("self s", format="%.2f"),
            "total_s": st.column_config.NumberColumn("total s", format="%.2f"),
            "self_samples": st.column_config.NumberColumn("self samples"),
            "total_samples": st.column_config.NumberColumn("total samples")}
    show = table.copy()
    show["file"] = [_ui.recorded_path(f, roots) for f in show["file"]]
    if by != "frame":
        show = show.drop(columns=["line"])
    if query.strip():
        q = query.strip().lower()
        show = show[(show["name"].str.lower().str.contains(q, regex=False))
                    | (show["file"].str.lower().str.contains(q, regex=False))]
    # Only the open tab's grid is drawn (a data grid is a browser chunk to load and draw).
    t1, t2 = _query.tabs(TABLES, "sp_table_tab", name="table")
    order = ["name", "file"] + (["line"] if by == "frame" else [])
    if t1.open:
        t1.dataframe(show.head(200), hide_index=True, width="stretch", height=360, column_config=cols,
                     column_order=order + ["self_fraction", "self_samples", "self_s", "total_fraction"])
    if t2.open:
        tot = show.sort_values(["total_samples", "self_samples"], ascending=False, kind="stable")
        t2.dataframe(tot.head(200), hide_index=True, width="stretch", height=360, column_config=cols,
                     column_order=order + ["total_fraction", "total_samples", "total_s", "self_fraction"])


def _compare(path: str, entry: dict, prof, threads):
    from debugkit.charts import profile as cp
    from debugkit.io.run_profiles import describe

    st.caption("This profile against a baseline: what takes a larger or smaller share of the samples.")
    here = [(None, path, p["id"], describe(p)) for p in _data.read_profiles(path)
            if p["kind"] == "sampled" and p["id"] != entry["id"]]
    others = _other_profiles(tuple(str(r) for r in _runs.roots()), str(path))
    choices = here + [(rid, rp, pid, f"{rid} / {label}") for rid, rp, pid, label in others]
    if not choices:
        st.caption("Record a second profile (e.g. after a change) with `debugkit profile RUN_DIR "
                   "--name after -- python train.py ...` to see what got slower.")
        return
    labels = {i: c[3] for i, c in enumerate(choices)}
    # ?baseline=<profile id> (of this run) or <run id>/<profile id>
    slugs = {(c[2] if c[0] is None else f"{c[0]}/{c[2]}"): i for i, c in enumerate(choices)}
    if st.session_state.get("sp_compare") not in [-1, *labels]:
        st.session_state["sp_compare"] = -1
    _query.from_query("sp_compare", slugs.get, name="baseline",
                      expected="a sampled profile of this run (its id) or of another run (run/id)")
    pick = st.selectbox("Before (the baseline); this profile is after", [-1] + list(labels),
                        format_func=lambda i: "—" if i < 0 else labels[i], key="sp_compare")
    _query.to_query("sp_compare", next((k for k, i in slugs.items() if i == pick), ""), "", name="baseline")
    if pick < 0:
        return
    _, base_path, base_id, _ = choices[pick]
    try:
        base = read_profile(base_path, _data.signature(base_path), base_id)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    # The same kind of threads on both sides (main thread vs main thread, workers vs workers).
    role = next((r for r in ("main", "dataloader") if threads is not None
                 and set(threads) == set(prof.thread_ids(r))), None)
    base_threads = tuple(sorted(base.thread_ids(role))) if role and base.thread_ids(role) else None
    if threads is not None and base_threads is None:
        st.caption("Comparing against all threads of the baseline (it has no threads of the "
                   "kind selected here).")
    tree, table = _diff(base_path, _data.signature(base_path), base_id, base_threads, path,
                        _data.signature(path), entry["id"], threads, 0.001)
    roots = _data.recorded_roots(path)
    data = cp.diff_flamegraph_data(tree, roots=roots)
    flamegraph(data, lambda: cp.flamegraph_table(tree, roots, diff=True), key="diff_flamegraph")
    st.caption("Sizes: this profile. Red: a larger share of the samples than in the baseline "
               f"(slower, or called more); blue: a smaller share; the deepest colours at ±{data['lim']:.1f} "
               "points. Hover a frame for both shares; click it to zoom in.")
    cols = {c: st.column_config.NumberColumn(c.replace("_", " "), format="percent")
            for c in ("base_self_fraction", "new_self_fraction", "self_delta", "base_total_fraction",
                      "new_total_fraction", "total_delta")}
    show = table.copy()
    show["file"] = [_ui.recorded_path(f, _data.recorded_roots(path)) for f in show["file"]]
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
