"""Checkpoints: the run's checkpoints (verified by hash), how each layer's weights moved
between them, NaN/Inf in weights, two checkpoints compared, replay from one.

Deep link: ``?run=<id>&a=<step>&b=<step>`` opens the comparison of those two checkpoints;
``&moved=1`` with its "Moved most" chart open.
"""

import math

import streamlit as st

from debugkit.errors import DebugkitError, InvalidInputError
from debugkit.location import as_path
from pages import _data, _query, _routing, _runs, _ui

_routing.page_guard()
path = _runs.require_run("its checkpoints")

FOLDER_KEY = "ckpt_folder"
MAX_CHECKPOINTS = 60
TOP_MOVED = 20
#: The heatmap's tabs, by their URL value (``?tab=``).
TABS = {"change": "Relative change", "norms": "Weight norms"}


# ----------------------------------------------------------------------------- cached work
def _folder() -> str | None:
    return st.session_state.get(FOLDER_KEY) or None


@st.cache_data(**_data.CACHE, show_spinner=False)
def _listing(path: str, sig: tuple, folder: str | None, folder_sig: tuple):
    from debugkit.io.run import open_run

    return open_run(path).checkpoints(folder)


@st.cache_data(**_data.CACHE, show_spinner="Reading checkpoint weights…")
def _stats(path: str, sig: tuple, folder: str | None, folder_sig: tuple):
    from debugkit.analysis.checkpoints import compute_change_matrix, detect_first_nonfinite
    from debugkit.checkpoints import read_weight_stats

    listing = _listing(path, sig, folder, folder_sig)
    stats = read_weight_stats(listing, max_checkpoints=MAX_CHECKPOINTS)
    order = _model_order(path, sig)
    return compute_change_matrix(stats, order), detect_first_nonfinite(stats, order)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _model_order(path: str, sig: tuple) -> list:
    grads = _data.read_grad_norms(path)
    return list(dict.fromkeys(grads["layer"])) if len(grads) else []


def _findings(path: str) -> list:
    """What `debugkit diagnose` finds in the checkpoints, in its order."""
    return _data.findings(path, sources=("checkpoints",))


@st.cache_data(**_data.CACHE, show_spinner="Comparing…")
def _compare(path: str, sig: tuple, a: str, b: str, folder_sig: tuple):
    from debugkit.analysis.checkpoints import compute_movement
    from debugkit.checkpoints import read_checkpoint_diff

    diff = read_checkpoint_diff(a, b)
    return diff, compute_movement(diff, _model_order(path, sig))


def _folder_signature(folder: str | None) -> tuple:
    if not folder:
        return ()
    try:
        return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                            for p in as_path(folder).iterdir() if p.is_file()))
    except OSError:
        return ()


# ----------------------------------------------------------------------------- helpers
def _label(row) -> str:
    step = row["step"]
    name = f"step {int(step)}" if step == step else as_path(row["path"]).name
    return name + ("" if row["source"] == "debugkit" else f" ({as_path(row['path']).name})"
                   if step == step else "")


def _param_step(name: str, steps: list) -> int | None:
    step = _query.query_int(name, signed=False, expected="a checkpoint step (a whole number)")
    if step is not None and step not in steps:
        raise InvalidInputError(f"?{name}={_query.query_text(name)}: this run has no verified "
                                "checkpoint at that step")
    return step


def _pick_folder() -> None:
    from debugkit.io.access import check_allowed

    # a popover, drawn when opened: its form's text input is not loaded before the heatmap
    with _ui.controls("Also read state_dict files from a folder", icon=":material/folder_open:"):
        with st.form("ckpt_folder_form", border=False):
            text = st.text_input("Folder with `*.safetensors`, `*.pt`, `*.pth` or `*.bin` files",
                                 value=_folder() or "", placeholder="/checkpoints/my-run",
                                 help="Files are opened with safetensors or torch.load(weights_only=True), "
                                      "never plain pickle. By default the run folder itself is read.")
            if st.form_submit_button("Read folder"):
                if not text.strip():
                    st.session_state.pop(FOLDER_KEY, None)
                    st.rerun()
                try:
                    folder = check_allowed(text.strip())
                    if not as_path(folder).is_dir():
                        raise InvalidInputError(f"{text.strip()}: not a folder")
                except DebugkitError as exc:
                    st.session_state["ckpt_folder_error"] = str(exc)
                else:
                    st.session_state.pop("ckpt_folder_error", None)
                    st.session_state[FOLDER_KEY] = str(folder)
                st.rerun()
    if msg := st.session_state.get("ckpt_folder_error"):
        st.error(_ui.md(msg), icon=":material/folder_off:")


# ----------------------------------------------------------------------------- sections
#: Checkpoints listed as a Markdown table; a longer list opens its grid instead.
TABLE_ROWS = 12


def _listing_table(listing) -> None:
    """The checkpoints: a Markdown table of their main columns, and every column (hash,
    path) in a grid drawn when its expander is opened. A data grid is 1.5 MB of JavaScript
    the browser loads and runs before the heatmap is drawn; the Markdown renderer is
    already loaded. A list longer than :data:`TABLE_ROWS` is the grid, open."""
    import pandas as pd

    shown = pd.DataFrame({
        "checkpoint": [_label(r) for _, r in listing.iterrows()],
        "ok": listing["ok"],
        "size (KiB)": (listing["bytes"] / 1024).round(1),
        "SHA-256": listing["sha256"].str[:16],
        "source": listing["source"].map({"debugkit": "rec.checkpoint()", "file": "state_dict file"}),
        "problem": listing["problem"],
        "path": listing["path"].map(_ui.visitor_text),  # relative to the served folders
    })
    long = len(shown) > TABLE_ROWS
    if not long:
        short = shown[["checkpoint", "ok", "size (KiB)", "source", "problem"]].assign(
            ok=shown["ok"].map({True: "✓", False: "✗"}), problem=shown["problem"].fillna("").replace("", "—"))
        st.markdown(_ui.text_table(short.rename(columns={"ok": "verified"})))
    box = st.expander(f"All {len(shown)} checkpoints (SHA-256, path)", key="ckpt_listing",
                      on_change="rerun", expanded=long)
    if box.open:
        box.dataframe(shown, hide_index=True, width="stretch",
                      column_config={"ok": st.column_config.CheckboxColumn("verified", width="small")},
                      height=min(400, 35 * (len(shown) + 1) + 3))
    bad = listing[~listing["ok"]]
    for _, r in bad.iterrows():
        st.warning(f"{_ui.md(_label(r))} is skipped: {_ui.md(r['problem'])}", icon=":material/broken_image:")


def _findings_panel(findings) -> None:
    st.subheader("Findings")

    def layers(f):
        names = (f.evidence or {}).get("layers") or []
        if len(names) > 1:
            st.caption("Parameters: " + ", ".join(_ui.code(x) for x in names[:12])
                       + (" …" if len(names) > 12 else ""))

    _ui.show_findings(findings, empty="Every verified checkpoint is finite, and every layer that "
                      "receives gradients moves between checkpoints.", detail=layers,
                      roots=_data.recorded_roots(path))


def _heatmap(m, first_bad) -> None:
    from debugkit.charts.checkpoints import build_change_heatmap_figure, build_weight_norm_figure

    tab_change, tab_norm = _query.tabs(TABS, "ckpt_tab", run_path=path)
    # only the open tab's chart is built and sent (a click on the other reruns the page)
    if tab_change.open is not False:
        with tab_change:
            if len(m.labels) < 2:
                st.info("One verified checkpoint: the change between checkpoints needs at least two.",
                        icon=":material/looks_one:")
            else:
                _ui.chart(build_change_heatmap_figure(m), key="ckpt_heatmap", width="stretch")
                st.caption("Each cell: how far a layer's weights moved since the previous checkpoint, "
                           "‖w_now − w_before‖ / ‖w_before‖, on a log scale. Grey: bit-identical "
                           "(a frozen layer), magenta: NaN/Inf.")
    if tab_norm.open is not False:
        with tab_norm:
            _ui.chart(build_weight_norm_figure(m), key="ckpt_norms", width="stretch")
    if len(first_bad):
        r = first_bad.iloc[0]
        st.error(f"NaN/Inf first appears in **{_ui.md(r['checkpoint'])}**, in {_ui.code(r['layer'])} "
                 f"({int(r['nan_count'])} NaN, {int(r['inf_count'])} Inf)"
                 + (f"; {len(first_bad)} layers in all." if len(first_bad) > 1 else "."),
                 icon=":material/warning:")


def _top_moved(moved) -> str:
    """The tensor that moved most and by how much (the closed chart's label says it)."""
    r = moved.iloc[0]
    v = float(r["rel_change"])
    return f"largest {r['layer']} ({f'{v:.3g}' if math.isfinite(v) else 'NaN/Inf'})"


def _compare_section(listing, sig, folder_sig) -> None:
    ok = listing[listing["ok"]].reset_index(drop=True)
    st.subheader("Compare two checkpoints")
    if len(ok) < 2:
        st.info("Two verified checkpoints are needed to compare.", icon=":material/compare:")
        return
    labels = [_label(r) for _, r in ok.iterrows()]
    steps = [int(s) for s in ok["step"] if s == s]
    ia, ib = 0, len(ok) - 1
    try:
        qa, qb = _param_step("a", steps), _param_step("b", steps)
    except DebugkitError as exc:
        st.warning(_ui.md(exc), icon=":material/link_off:")
        qa = qb = None
    by_step = {int(s): i for i, s in enumerate(ok["step"]) if s == s}
    ia = by_step.get(qa, ia) if qa is not None else ia
    ib = by_step.get(qb, ib) if qb is not None else ib
    # popovers named after the picked checkpoints (_ui.controls): their select boxes' code is
    # not loaded before the heatmap
    bar = st.container(horizontal=True, vertical_alignment="center", gap="small")
    cur_a, cur_b = (st.session_state.get(k, i) for k, i in (("ckpt_a", ia), ("ckpt_b", ib)))
    with bar, _ui.controls("A (before)", labels[cur_a] if cur_a in range(len(ok)) else labels[ia]):
        a = st.selectbox("A (before)", range(len(ok)), index=ia, format_func=labels.__getitem__, key="ckpt_a")
    with bar, _ui.controls("B (after)", labels[cur_b] if cur_b in range(len(ok)) else labels[ib]):
        b = st.selectbox("B (after)", range(len(ok)), index=ib, format_func=labels.__getitem__, key="ckpt_b")
    for name, i in (("a", a), ("b", b)):
        s = ok["step"].iloc[i]
        if s == s and st.query_params.get(name) != str(int(s)):
            st.query_params[name] = str(int(s))
    if a == b:
        st.info("Pick two different checkpoints.", icon=":material/compare_arrows:")
        return
    try:
        diff, mv = _compare(path, sig, ok["path"].iloc[a], ok["path"].iloc[b], folder_sig)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    from debugkit.charts.checkpoints import build_movement_figure

    total = mv["total_rel_change"]
    _ui.figures([
        ("Total relative change", "—" if total != total else f"{total:.3g}"),
        ("Tensors that moved", f"{len(mv['moved'])} / {len(diff)}"),
        ("Never moved", str(len(mv["never_moved"]))),
        ("NaN/Inf in B", str(len(mv["nonfinite"]))),
    ])
    left, right = st.columns([3, 2])
    with left:
        if len(mv["moved"]):
            # built when opened (?moved=1): a second figure sent and drawn with the heatmap
            # delayed the page's first chart (issue 35 item 9)
            box = _query.expander(f"**Moved most** (top {min(TOP_MOVED, len(mv['moved']))}): "
                                  f"{_ui.md(_top_moved(mv['moved']))}", "ckpt_moved_open", name="moved",
                                  run_path=path, icon=":material/bar_chart:")
            if box.open:
                with box:
                    _ui.chart(build_movement_figure(mv["moved"], top=TOP_MOVED, label_a=labels[a],
                                                    label_b=labels[b]), key="ckpt_moved", width="stretch")
        else:
            st.markdown("**Moved most**")
            st.caption("Nothing changed: the two checkpoints hold identical weights.")
    with right:
        st.markdown("**Never moved** (bit-identical in both)")
        if 0 < len(mv["never_moved"]) <= TABLE_ROWS:  # a few names: text, no data grid to load
            st.markdown("\n".join(f"- {_ui.code(t)}" for t in mv["never_moved"]))
        elif mv["never_moved"]:
            st.dataframe({"tensor": mv["never_moved"]}, hide_index=True, width="stretch",
                         height=min(300, 35 * len(mv["never_moved"]) + 40))
        else:
            st.caption("Every tensor changed.")
        if mv["only_a"] or mv["only_b"]:
            st.warning(f"Only in A: {_ui.md(', '.join(mv['only_a']) or '—')}; only in B: "
                       f"{_ui.md(', '.join(mv['only_b']) or '—')}", icon=":material/difference:")
    box = st.expander(f"All {len(diff)} tensors", key="ckpt_all_tensors", on_change="rerun")
    if box.open:  # drawn when opened (a data grid's JavaScript is loaded only then)
        box.dataframe(diff, hide_index=True, width="stretch")


def _replay_links(listing, failures, rid) -> None:
    own = listing[(listing["source"] == "debugkit") & listing["ok"]]
    if not failures or not len(own) or not _routing.has_page("pages/replay.py"):
        return
    st.subheader("Replay from a checkpoint")
    st.caption("Replay a captured failing batch with the weights of a checkpoint instead of the "
               "captured ones: did the batch fail with the weights of step N too? (a label out of "
               "range fails with any weights; a NaN that builds up does not)")
    c1, c2 = st.columns(2)  # the choice, in popovers named after it (_ui.controls)
    steps = [int(s) for s in own["step"]]
    by_id = {f["id"]: f for f in failures}
    # ?replay_step=<checkpoint step>&capture=<failure id>: this choice, from a link
    if st.session_state.get("ckpt_replay_step") not in steps:
        st.session_state["ckpt_replay_step"] = steps[-1]
    if st.session_state.get("ckpt_replay_failure") not in by_id:
        st.session_state["ckpt_replay_failure"] = next(iter(by_id))
    _query.from_query("ckpt_replay_step", lambda v: int(v) if v.isdigit() and int(v) in steps else None,
                      name="replay_step", expected="the step of one of this run's checkpoints")
    _query.from_query("ckpt_replay_failure", lambda v: v if v in by_id else None, name="capture",
                      expected="one of this run's failure captures")
    def capture(i):
        return f"step {by_id[i].get('step')} · {by_id[i].get('error_type') or by_id[i].get('kind')}"

    with c1, _ui.controls("Checkpoint", f"step {st.session_state['ckpt_replay_step']}"):
        step = st.selectbox("Checkpoint", steps, format_func=lambda s: f"step {s}", key="ckpt_replay_step")
    with c2, _ui.controls("Capture", capture(st.session_state["ckpt_replay_failure"])):
        fid = st.selectbox("Capture", list(by_id), key="ckpt_replay_failure", format_func=capture)
    _query.to_query("ckpt_replay_step", str(step), str(steps[-1]), name="replay_step")
    _query.to_query("ckpt_replay_failure", fid, next(iter(by_id)), name="capture")
    _routing.link_to("pages/replay.py", f"Replay capture {fid} from checkpoint at step {step}",
                    icon=":material/replay:", run=rid, failure=fid, checkpoint=step)


def render() -> None:
    try:
        sig = _data.signature(path)
        info = _data.summary(path)
        folder = _folder()
        fsig = _folder_signature(folder)
        listing = _listing(path, sig, folder, fsig)
        failures = _data.read_failures(path)
    except DebugkitError as exc:
        st.title("Checkpoints")
        _ui.show_error(exc)
        return
    rid = _runs.run_id_for(path)
    st.title("Checkpoints")
    _ui.about("Checkpoints written by `rec.checkpoint()` (model weights in safetensors, optimizer state, a SHA-256 per file) and plain `state_dict` files found in the run folder. Each is verified against its recorded hashes; a truncated or corrupted one is flagged and skipped, as `debugkit.resume_latest` skips it. The heatmap shows how far each layer's weights moved between consecutive checkpoints; grey cells are layers that did not move at all (often parameters missing from the optimizer), magenta cells hold NaN/Inf. Compare any two checkpoints below, or replay a captured failing batch from one.")
    st.caption(f"{_ui.md(info['name'])} · {info['status']} · {len(listing)} checkpoint(s)"
               + (f" · also reading `{folder}`" if folder else ""))
    _pick_folder()
    if not len(listing):
        st.info("This run has no checkpoints. Call `rec.checkpoint()` in the training loop (for "
                "example every 500 steps, `keep_last=3`) to write verified checkpoints that "
                "`debugkit.resume_latest(run_dir, model, optimizer)` resumes from, or point at a "
                "folder of `torch.save` / safetensors state_dict files above.",
                icon=":material/save:")
        return
    _listing_table(listing)
    if not listing["ok"].any():
        st.error("No checkpoint verifies, so there is nothing to analyse.", icon=":material/error:")
        return
    try:
        m, first_bad = _stats(path, sig, folder, fsig)
        findings = _findings(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    left, right = st.columns([3, 1])
    with left:
        st.subheader("Weights across checkpoints")
        _heatmap(m, first_bad)
    with right:
        _findings_panel(findings)
    _compare_section(listing, sig, fsig)
    _replay_links(listing, failures, rid)


# While the run is written, the page follows it (a fragment that reruns every 5 s).
_data.render_live(path, render, every_s=5)
