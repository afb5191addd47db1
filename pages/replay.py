"""Replay a captured failure: its error, the code it runs, and what the replay found.

The view lives in the URL: ``?failure=<id>`` the capture, ``?checkpoint=<step>`` the
weights, ``?device=auto|cpu|cuda`` and ``?timeout=<s>`` the replay's options (defaults
left out). A link selects; the replay runs only on a click of *Replay*."""

import streamlit as st

from debugkit.errors import DebugkitError
from pages import _auth, _data, _inference, _query, _routing, _runs, _ui

_routing.page_guard()

RESULTS = "debugkit_replay_results"
REQUEST = "debugkit_replay_request"
OK_ICON = {True: ":green[:material/check_circle:]", False: ":red[:material/cancel:]",
           None: ":gray[:material/remove_circle_outline:]"}
STATUS_BADGE = {"verified": ("green", ":material/verified:"), "changed": ("orange", ":material/edit:"),
                "unrecorded": ("orange", ":material/help:"), "installed": ("orange", ":material/inventory_2:")}

DEFAULT_DEVICE = "auto"
DEFAULT_TIMEOUT_S = 120.0

path = _runs.require_run("its failure replays")


def _code_roots(path: str) -> list:
    """The folders whose code this server lets a replay of ``path`` run (the operator's
    DEBUGKIT_CODE_ROOTS; by default the bundled examples/, for the bundled samples only)."""
    from debugkit.replay.policy import server_code_roots

    return server_code_roots(path)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _identities(path: str, sig: tuple, fid: str, roots: tuple) -> list[dict]:
    from debugkit.io.run import open_run
    from debugkit.replay import plan_identities
    from debugkit.replay.policy import HINT_SERVER

    run = open_run(path)
    return [i.to_dict() for i in plan_identities(run, run.failure(fid), code_roots=list(roots),
                                                 hint=HINT_SERVER)]


@st.cache_data(**_data.CACHE, show_spinner=False)
def _sample(path: str, sig: tuple, fid: str, input_path: str, sample: int):
    from debugkit.io.run import open_run
    from debugkit.replay.loading import read_sample

    return read_sample(open_run(path).failure(fid), input_path, sample)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _batch_inputs(path: str, sig: tuple, fid: str) -> list[str]:
    from debugkit.io.run import open_run
    from debugkit.replay.loading import format_path, iter_leaves, load_batch

    return [format_path(p) for p, t in iter_leaves(load_batch(open_run(path).failure(fid)))
            if len(t.shape) >= 1]


@st.cache_data(max_entries=8, ttl=900, show_spinner=False)
def _repro(path: str, sig: tuple, fid: str, report_key: str, _report) -> bytes:
    from debugkit.io.run import open_run
    from debugkit.replay import plan_identities
    from debugkit.replay.repro import build_repro

    run = open_run(path)
    rec = run.failure(fid)
    return build_repro(run, rec, plan_identities(run, rec, code_roots=_code_roots(path)), _report)


@st.cache_data(**_data.CACHE, show_spinner=False)
def _guard(path: str, sig: tuple, fid: str) -> dict:
    from debugkit.io.run import open_run
    from debugkit.replay.guard_suggestion import suggest_guard

    run = open_run(path)
    g = suggest_guard(run.failure(fid), run.manifest.get("num_classes"))
    return {"source": g.source, "healthy_batches": g.healthy_batches, "catches": g.catches,
            "violations": [str(v) for v in g.violations], "rules": sorted({v.rule for v in g.violations}),
            "spec_json": g.spec_json(), "problem": g.problem}


@st.cache_data(**_data.CACHE, show_spinner=False)
def _checkpoint_problem(path: str, sig: tuple, step: int) -> str | None:
    """The library's own check of the checkpoint the replay would use (present, verified)."""
    from debugkit.replay import checkpoint_weights

    try:
        checkpoint_weights(path, step)
    except DebugkitError as exc:
        return str(exc)
    return None


def _checkpoint_param() -> int | None:
    """``?checkpoint=<step>``: replay with that checkpoint's weights (validated)."""
    try:
        step = _query.query_int("checkpoint", signed=False, expected="a checkpoint step (a whole number)")
        if step is None:
            return None
        problem = _checkpoint_problem(path, _data.signature(path), step)
        if problem:
            raise DebugkitError(f"?{problem}; replaying with the captured weights")
    except DebugkitError as exc:
        st.warning(_ui.md(_ui.visitor_text(exc)), icon=":material/link_off:")
        return None
    return step


def _show_guard(f: dict) -> None:
    try:
        g = _guard(path, _data.signature(path), f["id"])
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    st.subheader("Guard")
    if g["problem"]:
        st.caption(f"No guard to suggest: {_ui.md(g['problem'])}")
        return
    learned = (f"the spec the Recorder learned from the {g['healthy_batches']} healthy batches before it"
               if g["source"] == "healthy_batches" else
               "a spec inferred from the captured batch itself (labels in [0, num_classes), floating "
               "inputs finite; this capture predates learned specs, so shapes and integer ranges are "
               "not checked)")
    with st.container(border=True, key="guard_box"):
        if g["catches"]:
            st.success(f"A batch guard would have stopped this batch before it reached the model: "
                       f"{learned} rejects it ({_ui.md(', '.join(g['rules']))}).", icon=":material/shield:")
            st.markdown("  \n".join(f"- {_ui.md(v)}" for v in g["violations"][:10])
                        + (f"  \n- … {len(g['violations']) - 10} more" if len(g["violations"]) > 10 else ""))
            st.code('spec = debugkit.BatchSpec.load("batch_spec.json")\n'
                    'rec = Recorder(run_dir, model, optimizer=opt, guard=spec, guard_action="skip")\n'
                    'for batch in loader:\n'
                    '    with rec.step(batch) as s:\n'
                    '        if s.skipped:  # counted and logged as a batch_skipped event\n'
                    '            continue\n'
                    '        ...', language="python")
            st.caption("`guard_action=\"raise\"` stops at the bad batch instead, with a capture; "
                       "`debugkit scan-dataset module:build_dataset --spec batch_spec.json` lists every "
                       "violating sample of a dataset offline.")
            st.download_button("Download batch_spec.json", data=g["spec_json"], file_name="batch_spec.json",
                               mime="application/json", icon=":material/download:", on_click="ignore",
                               key="guard_download")
        else:
            st.info(f"No batch guard learned from the data would have caught this: {learned} accepts "
                    "the batch (every tensor has the dtype, shape, whole-tensor value range and "
                    "finiteness of the healthy ones). The cause is in the model or the step, or in a "
                    "rule a spec does not learn (such as one column of a tabular tensor holding an id "
                    "its embedding lacks). Replay it to find the module and op.",
                    icon=":material/gpp_maybe:")


def _pick_failure(failures: list[dict]) -> dict:
    from debugkit.replay.loading import validate_failure_id

    ids = [f["id"] for f in failures]
    index = 0
    try:
        wanted = _query.query_choice("failure", ids, validate=validate_failure_id,
                                     message=lambda v: f"failure {v!r}: this run has no such capture; "
                                                       f"showing {ids[0]}")
        if wanted:
            index = ids.index(wanted)
    except DebugkitError as exc:
        st.warning(_ui.md(_ui.visitor_text(exc)), icon=":material/link_off:")
    by_id = {f["id"]: f for f in failures}
    fid = st.selectbox("Failure", ids, index=index, key=_ui.key_for("replay_failure", path),
                       format_func=lambda i: _inference.request_label(by_id[i])
                       if by_id[i].get("kind") == "request" else
                       f"step {by_id[i].get('step')} · rank {by_id[i].get('rank')} · "
                       f"{by_id[i].get('error_type') or by_id[i].get('kind')} · {i}")
    if st.query_params.get("failure") != fid:
        st.query_params["failure"] = fid
    return by_id[fid]


def _show_failure(f: dict) -> None:
    roots = _data.recorded_roots(path, f)  # the recording machine's folders are not shown
    st.markdown(f"**{_ui.md(f.get('error_type') or 'Non-finite values')}** at step "
                f"{_ui.md(f.get('step'))}, rank {_ui.md(f.get('rank'))}, on {_ui.code(f.get('device') or '?')}")
    st.code(_ui.recorded_text(f.get("message") or "", roots), language=None, wrap_lines=True)
    idx = f.get("dataset_indices")
    if idx:
        st.caption(f"Batch of {len(idx)} samples; dataset indices {_ui.md(idx[:10])}"
                   + (" …" if len(idx) > 10 else ""))
    if f.get("capture_errors"):
        st.caption("Parts that could not be captured: "
                   + "; ".join(f"{_ui.md(k)}: {_ui.md(_ui.recorded_text(v, roots))}"
                               for k, v in f["capture_errors"].items()))
    if f.get("traceback"):
        with st.expander("Traceback"):
            st.code(_ui.recorded_text(f["traceback"], roots), language="python")


def _show_code(idents: list[dict], roots: tuple) -> None:
    for i in idents:
        color, icon = STATUS_BADGE.get(i["status"], ("red", ":material/block:"))
        st.markdown(f"{_ui.code(i['spec'])} ({i['role'].replace('_', ' ')})")
        st.badge(i["status"].replace("_", " "), color=color, icon=icon)
        # this server's file relative to the code root it was found in (no server folders)
        here = (i["search_root"],) if i.get("search_root") else ()
        lines = [f"File here: {_ui.code(_ui.recorded_path(i['local_file'], here) or 'not found')}"]
        if i["local_sha256"] and i["local_sha256"] == i["recorded_sha256"]:
            lines.append(f"SHA-256 {_ui.code(i['local_sha256'])}, as recorded")
        else:
            lines += [f"SHA-256 here: {_ui.code(i['local_sha256'] or '—')}",
                      f"SHA-256 recorded: {_ui.code(i['recorded_sha256'] or '—')}"]
        # where it was on the recording machine: relative to its code root (no folders of
        # that machine, which may be an uploader's home or this server)
        lines.append(f"Recorded at: {_ui.code(_ui.recorded_path(i['recorded_file'], roots) or '—')}")
        st.caption("  \n".join(lines))
        if i["status"] != "verified":
            st.caption(_ui.md(_ui.recorded_text(i["message"], here + roots)))


def _show_culprit(report: dict, f: dict) -> None:
    c = report["culprit"]
    with st.container(border=True, key="culprit"):
        st.markdown("#### :red[:material/target:] Culprit")
        if not any(v is not None for v in c.values()):
            st.info("No culprit found: no check failed and the replay raised nothing it could "
                    "attribute.", icon=":material/search_off:")
            return
        if report.get("request", {}).get("detail"):
            _inference.show_request_culprit(report)
        else:
            st.error(_ui.md(c.get("detail") or "see the checks below"), icon=":material/target:")
        fields = [(label, c.get(key)) for label, key in (("Module", "module"), ("Op", "op"),
                                                          ("Input", "input"))]
        st.markdown("  \n".join(
            f"**{label}:** " + ("—" if v is None else "`(the model's top level)`" if v == "" else _ui.code(v))
            for label, v in fields))
        if not report.get("request"):  # a request has no dataset index; its row is in the table
            cols = st.columns(4)
            cols[0].metric("Sample", "—" if c.get("sample_index") is None else str(c["sample_index"]))
            cols[1].metric("Dataset index", "—" if c.get("dataset_index") is None else str(c["dataset_index"]))
        if c.get("input") and c.get("sample_index") is not None:
            _show_sample_values(f, c, report.get("culprit_positions") or [])


def _show_sample_values(f: dict, c: dict, positions: list) -> None:
    sig = _data.signature(path)
    try:
        df = _sample(path, sig, f["id"], c["input"], int(c["sample_index"]))
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    st.markdown(f"**Sample {c['sample_index']} of {_ui.code(c['input'])}**")
    if len(df) == 1:
        v = df["value"].iloc[0]
        st.metric(f"value of {c['input']}[{c['sample_index']}]",
                  f"{int(v)}" if float(v).is_integer() else f"{v:g}")
    else:
        marked = {str(p) for p in positions}
        bad = df[~df["finite"] | df["position"].isin(marked)]
        if len(bad):
            what = "non-finite" if (~df["finite"]).any() else "offending"
            st.markdown(f":red[{len(bad)} {what} value(s)] at position(s) "
                        + ", ".join(_ui.code(p) for p in bad["position"].head(20)))
        if len(df) <= 16:
            st.table(_highlight(_row(df), marked | set(df.loc[~df["finite"], "position"])))
        else:
            if len(bad):
                st.table(_highlight(_row(bad), set(bad["position"])))
            with st.expander(f"All {len(df)} values of the sample", expanded=not len(bad)):
                st.dataframe(df.set_index("position")[["value"]].T, height=80)
    others = [p for p in _batch_inputs(path, sig, f["id"]) if p != c["input"]]
    if others:
        with st.expander("The same sample's other inputs"):
            for p in others:
                try:
                    o = _sample(path, sig, f["id"], p, int(c["sample_index"]))
                except DebugkitError:
                    continue
                st.caption(_ui.md(p))
                st.dataframe(o.set_index("position")[["value"]].T, height=80)


def _fmt(v: float) -> str:
    return f"{int(v)}" if v == v and abs(v) != float("inf") and float(v).is_integer() else f"{v:g}"


def _row(df):
    """One sample's values as a one-row table, positions as columns."""
    import pandas as pd

    return pd.DataFrame([df["value"].map(_fmt).tolist()], columns=df["position"].tolist(),
                        index=["value"])


def _highlight(table, columns: set):
    red = "background-color: rgba(255, 75, 75, 0.30); font-weight: 600"
    return table.style.apply(lambda col: [red if str(col.name) in columns else ""] * len(col), axis=0)


def _show_report(report: dict, f: dict) -> None:
    from debugkit.replay.advice import advice_for

    rep = report["replay"]
    cols = st.columns(4)
    cols[0].metric("Reproduced", "yes" if report["reproduced"] else "no")
    cols[1].metric("Same error", "yes" if report["same_error"] else "no")
    cols[2].metric("Replayed on", report["device"])
    cols[3].metric("Forward time" if report.get("request") else "Step time", f"{rep['seconds']:.3f} s" if rep and rep.get("seconds") is not None else "—")
    if rep:
        st.code(f"{rep['type']}: {rep['message']}", language=None, wrap_lines=True)
    else:
        st.success("The replayed step raised nothing and produced finite values.")
    if report.get("ran"):
        st.caption(f"Ran: {_ui.md(report['ran']['detail'])}")
    _show_culprit(report, f)
    advice = advice_for(report)
    if advice:
        st.markdown("#### What to do")
        for a in advice:
            st.warning(_ui.md(a), icon=":material/build:")
    st.markdown("#### Checks")
    for ch in report["checks"]:
        st.markdown(f"{OK_ICON[ch['ok']]} **{_ui.md(ch['name'])}**: {_ui.md(ch['detail'])}")
    if report.get("cross_check"):
        x = report["cross_check"]
        with st.expander("CPU cross-check", expanded=True):
            xr = x.get("replay")
            st.code(f"{xr['type']}: {xr['message']}" if xr else "no error on the CPU", language=None,
                    wrap_lines=True)
            for ch in x["checks"]:
                st.markdown(f"{OK_ICON[ch['ok']]} **{_ui.md(ch['name'])}**: {_ui.md(ch['detail'])}")
    for n in report.get("notes") or []:
        st.caption(f":material/info: {_ui.md(n)}")
    with st.expander("Report (JSON)"):
        st.json(report, expanded=False)


def _run_replay(f: dict, device: str, allow: bool, timeout: float, checkpoint: int | None) -> None:
    from debugkit.replay import replay

    key = f"{path}|{f['id']}|{checkpoint}"
    where = "" if checkpoint is None else f" with the weights of step {checkpoint}"
    with st.status(f"Replaying {f['id']} on {device}{where}…", expanded=True) as status:
        try:
            from debugkit.replay.policy import HINT_SERVER

            report = replay(path, f["id"], device=device, allow_code=allow, timeout_s=timeout,
                            progress=status.write, checkpoint=checkpoint,
                            code_roots=_code_roots(path), code_hint=HINT_SERVER,
                            refetch=False)  # a data-loading capture: no code of the run runs here
        except DebugkitError as exc:
            status.update(label="The replay could not run", state="error", expanded=True)
            _ui.show_error(exc)
            return
        except Exception as exc:  # never a blank page
            status.update(label="The replay failed", state="error", expanded=True)
            _ui.show_error(exc, "the replay")
            return
        label = ("Reproduced" if report["reproduced"] else "Not reproduced") + \
            (" (same error)" if report["same_error"] else "") + f" on {report['device']}"
        status.update(label=label, state="complete", expanded=False)
    st.session_state.setdefault(RESULTS, {})[key] = report


def _may_trust() -> bool:
    """Whether this visitor may allow code the recorded hash does not cover (an
    anonymous visitor of an open server may not, unless DEBUGKIT_CODE_TRUST=anyone)."""
    from debugkit.replay.policy import may_trust_code

    try:
        return may_trust_code(_auth.auth_providers() is not None, _auth.logged_in())
    except DebugkitError as exc:
        _ui.show_error(exc)
        return False


def render() -> None:
    from debugkit.child_harness import cuda_possible
    from debugkit.replay.code import NEVER
    from debugkit.replay.code import needs_trust as code_needs_trust
    from debugkit.replay.policy import is_bundled_sample

    try:
        failures = _data.read_failures(path)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    st.title("Replay")
    _ui.about('A failure capture holds the batch, the weights and optimizer state as the failing step saw them, the RNG state and the error. *Replay* re-runs that step in a separate process with a probe on every module and anomaly detection on, and names the sample, the module and the op that caused it; *Download a minimal repro* gives a plain-PyTorch script of the same.')
    if not failures:
        st.info("This run has no failure capture. A step that raises inside `with rec.step(batch):` "
                "(or goes NaN with `halt_on_nonfinite=True`) is captured automatically.",
                icon=":material/check:")
        return
    f = _pick_failure(failures)
    # A data-loading capture replays by collating its samples again with torch's own
    # collate function: none of the run's code runs.
    data_only = f.get("kind") == "data_loading"
    try:
        idents = [] if data_only else _identities(path, _data.signature(path), f["id"],
                                                  tuple(str(r) for r in _code_roots(path)))
    except DebugkitError as exc:
        _ui.show_error(exc)
        idents = []
    left, right = st.columns([3, 2])
    with left:
        st.subheader("What failed")
        if f.get("kind") == "request":  # a failing request of a debugkit.serve run
            _inference.show_request_failure(f, _data.recorded_roots(path, f))
        else:
            _show_failure(f)
    with right:
        st.subheader("Code the replay runs")
        _show_code(idents, _data.recorded_roots(path, f))
        if data_only:
            st.caption("None of the run's code: the DataLoader failed to build this batch, and the "
                       "replay collates the captured samples again with torch's collate function.")

    never = [i for i in idents if i["status"] in NEVER]
    needs_trust = code_needs_trust(path, idents)
    if f.get("kind") != "request":  # a batch guard is for training batches
        _show_guard(f)
    checkpoint = _checkpoint_param()
    st.subheader("Replay")
    if checkpoint is not None:
        st.info(f"Weights: the checkpoint at step {checkpoint} instead of the ones captured at step "
                f"{f.get('step')}.", icon=":material/save:")
        if st.button("Use the captured weights", key="replay_captured_weights", type="tertiary",
                     icon=":material/undo:"):
            del st.query_params["checkpoint"]
            st.rerun()
    c1, c2 = st.columns([2, 1])
    devices = ["auto", "cpu", "cuda"] if cuda_possible() else ["auto", "cpu"]
    # The options live in the URL (?device=, ?timeout=): a link selects them, the replay
    # itself still runs only on a click.
    _query.from_query("replay_device", lambda v: v if v in devices else None, name="device",
                      expected="one of " + ", ".join(repr(d) for d in devices) + " on this server")
    _query.from_query("replay_timeout", _query.number_in(5.0, 3600.0), name="timeout",
                      expected="a number of seconds from 5 to 3600")
    if st.session_state.get("replay_device") not in devices:
        st.session_state["replay_device"] = DEFAULT_DEVICE
    st.session_state.setdefault("replay_timeout", DEFAULT_TIMEOUT_S)
    device = c1.radio("Device", devices, horizontal=True, key="replay_device",
                      help="auto: CUDA where this server has it, else the CPU" +
                           ("" if cuda_possible() else " (this server has no GPU)"))
    timeout = c2.number_input("Timeout (s)", min_value=5.0, max_value=3600.0, step=10.0,
                              key="replay_timeout")
    _query.to_query("replay_device", device, DEFAULT_DEVICE, name="device")
    _query.to_query("replay_timeout", f"{timeout:g}", f"{DEFAULT_TIMEOUT_S:g}", name="timeout")
    trusted = True
    if never:
        here = (never[0]["search_root"],) if never[0].get("search_root") else ()
        st.error(_ui.md(_ui.recorded_text(never[0]["message"], here + _data.recorded_roots(path, f))),
                 icon=":material/block:")
    elif needs_trust and not _may_trust():
        trusted = False
        st.error("Only a signed-in user may trust a run's code on this server"
                 + (" (sign in first)" if _auth.auth_providers() is not None else
                    " (it has no `[auth]`, so every visitor is anonymous)")
                 + ": this run was uploaded or opened from outside the bundled samples, or its code "
                   "differs from the recorded one. The operator can let every visitor trust code "
                   "with DEBUGKIT_CODE_TRUST=anyone (docs/security.md).", icon=":material/lock:")
    elif needs_trust:
        why = ("this run was uploaded or opened from outside the bundled samples"
               if not is_bundled_sample(path) else "the code differs from the recorded one")
        i0 = idents[0]
        i0_file = _ui.recorded_path(i0["local_file"], (i0["search_root"],) if i0.get("search_root") else ())
        trusted = st.checkbox(
            f"I trust this code ({why}): run {_ui.code(i0['spec'])} from {_ui.code(i0_file)} "
            f"(SHA-256 `{(i0['local_sha256'] or '')[:16]}…`)"
            + (" and " + ", ".join(f"`{i['spec']}`" for i in idents[1:]) if len(idents) > 1 else ""),
            key=_ui.key_for(f"replay_trust_{f['id']}", path))
        st.caption("A replay executes the model's code in a separate process with a timeout and "
                   "a memory cap; it is not a sandbox.")
    # The click is kept in session state by a callback (not read from the button's return
    # value), so a rerun that page_guard() triggers does not lose it.
    request = f"{path}|{f['id']}|{checkpoint}"
    st.button("Replay", type="primary", icon=":material/replay:", key="replay_button",
              disabled=bool(never) or (not idents and not data_only) or not trusted,
              on_click=lambda: st.session_state.__setitem__(REQUEST, request))
    if st.session_state.pop(REQUEST, None) == request:
        _run_replay(f, device, allow=needs_trust and trusted, timeout=float(timeout),
                    checkpoint=checkpoint)
    report = st.session_state.get(RESULTS, {}).get(request)
    if report is not None:  # as shown: without the recording machine's folders
        _show_report(_ui.recorded_values(report, _data.recorded_roots(path, f)), f)
    if idents and not never:
        try:
            rkey = repr(report.get("culprit")) if report else ""
            data = _repro(path, _data.signature(path), f["id"], rkey, report)
            st.download_button("Download a minimal repro", data=data, file_name=f"{f['id']}-repro.zip",
                               mime="application/zip", icon=":material/download:", on_click="ignore",
                               key="repro_download",
                               help="repro.py plus the capture: reproduces the error with torch and "
                                    "safetensors only, without debugkit, for a bug report")
        except DebugkitError as exc:
            _ui.show_error(exc)


render()
