"""Bias audit: verdict, group fairness metrics, SHAP attributions, provenance; share links."""

import datetime as dt
import os
import urllib.parse

import streamlit as st

from debugkit.audit import report as rep
from debugkit.errors import DebugkitError
from pages import _auth, _data, _query, _routing, _runs, _share, _ui

_routing.page_guard()

VERDICT = {"pass": ("Pass", "green", ":material/check_circle:"),
           "needs_review": ("Needs review", "orange", ":material/rate_review:"),
           "fail": ("Fail", "red", ":material/gpp_bad:")}
EXPIRY = {"1 day": "1d", "7 days": "7d", "14 days": "14d", "30 days": "30d", "90 days": "90d"}
#: The view a share link carries besides the signed run and audit: the open tabs and charts.
VIEW_PARAMS = ("attr", "shap_attr", "rates", "shap", "shap_groups")
GROUP_COLUMNS = ("base_rate", "selection_rate", "tpr", "fpr", "fnr", "precision", "accuracy")

share = _share.share_context()
read_only = share is not None
if read_only:
    path = share["run_path"]
else:
    path = _runs.require_run("its bias audits")


# ---------------------------------------------------------------------------- cached reads
@st.cache_data(**_data.CACHE, show_spinner=False)
def _audits(path: str, sig: tuple):
    from debugkit.audit.stored_audits import list_audits

    return list_audits(path)


@st.cache_data(**_data.CACHE, show_spinner="Reading the audit…")
def _audit(path: str, sig: tuple, audit_id: str, shared: bool):
    """The stored audit. ``shared`` has no default: Streamlit keys a cached call on the
    arguments as passed, so ``_audit(p, s, a)`` and ``_audit(p, s, a, False)`` each read
    the audit (twice per cold page load before its first chart: 0.05 s each)."""
    from debugkit.audit.stored_audits import load_audit

    a = load_audit(path, audit_id)
    if shared:  # a share link sees the audit without who/where/which command computed it
        from debugkit.audit.share import shared_view

        a = shared_view(a)
    return {"doc": a.doc, "rows": a.rows, "json": a.json_bytes(), "sha256": a.json_sha256}


@st.cache_data(max_entries=16, ttl=900, show_spinner=False)
def _figure_keys(path: str, sig: tuple, audit_id: str) -> list[str]:
    a = _audit(path, sig, audit_id, False)
    return rep.figure_keys(a["doc"], a["rows"])


@st.cache_data(max_entries=64, ttl=900, show_spinner="Drawing the chart…")
def _figure(path: str, sig: tuple, audit_id: str, key: str):
    a = _audit(path, sig, audit_id, False)
    return rep.figure(a["doc"], a["rows"], key)


class _Figures:
    """The audit's figures by key, each built (and cached) when a section draws it: a page
    load builds the open attribute's disparity chart, not the audit's 14 figures (0.25-0.35 s
    of server CPU, issue 35 item 9)."""

    def __init__(self, path: str, sig: tuple, audit_id: str):
        self.args = (path, sig, audit_id)
        self.keys = set(_figure_keys(*self.args))

    def __contains__(self, key: str) -> bool:
        return key in self.keys

    def __getitem__(self, key: str):
        return _figure(*self.args, key)


@st.cache_data(max_entries=4, ttl=900, show_spinner="Building the report…")
def _report(path: str, sig: tuple, audit_id: str, shared: bool = False) -> bytes:
    from debugkit.audit.stored_audits import load_audit

    a = load_audit(path, audit_id)
    if shared:  # part of the cache key: a share link never gets the full audit's cache entry
        from debugkit.audit.share import shared_view

        a = shared_view(a)
    roots = _data.recorded_roots(path)  # the command without the folders of its machine
    return rep.build_report_html(a, shown=lambda v: _ui.recorded_text(v, roots)).encode("utf-8")


@st.cache_data(**_data.CACHE, show_spinner=False)
def _targets(path: str, sig: tuple):
    from debugkit.audit.targets import read_targets

    return read_targets(path)


def _sig():
    """The run's files, and the audits the store and the team's shared audit store hold
    of it (a run outside the store)."""
    from debugkit.audit.stored_audits import audits_signature

    try:
        extra = audits_signature(path)
    except (OSError, DebugkitError) as exc:
        extra = (("unlisted", str(exc)),)  # not a cached list's key: _audits runs and says so
    return (*_data.signature(path), extra)


# ---------------------------------------------------------------------------- pieces
def _verdict_box(doc):
    label, color, icon = VERDICT.get(doc["verdict"], (doc["verdict"], "gray", None))
    reasons = doc.get("reasons") or []
    box = {"pass": st.success, "needs_review": st.warning, "fail": st.error}.get(doc["verdict"], st.info)
    head = f"**Verdict: {label}.** "
    if not reasons:
        head += "No disparity outside the band, no sensitive feature or proxy among the most important features."
    else:
        n_fail = sum(1 for a in doc["sensitive"].values() for f in a.get("findings", [])
                     if f["severity"] == "fail")
        head += (f"{n_fail} disparit{'y' if n_fail == 1 else 'ies'} outside the band with "
                 f"{'its' if n_fail == 1 else 'their'} whole confidence interval; "
                 if n_fail else "") + f"{len(reasons)} reason(s) in all."
    body = "\n".join(f"- {_ui.md(r)}" for r in reasons[:6])
    box(head + ("\n\n" + body if body else ""), icon=icon)
    if len(reasons) > 6:
        with st.expander(f"All {len(reasons)} reasons"):
            st.markdown("\n".join(f"- {_ui.md(r)}" for r in reasons))


#: Groups listed as a Markdown table above the charts; more are a sortable grid below them.
TABLE_GROUPS = 12


def _group_text_table(rows: list[dict]) -> str:
    import pandas as pd

    def num(v):
        return "—" if v is None or v != v else f"{v:.3f}"

    df = pd.DataFrame(rows)
    for m in GROUP_COLUMNS:
        df[rep.METRIC_LABELS[m]] = df[rep.METRIC_LABELS[m]].map(num)
    for m in ("selection_rate", "tpr", "fpr"):  # the interval beside its value: fewer columns
        label = rep.METRIC_LABELS[m]
        ci = df.pop(label + " CI").fillna("")
        df[label] = [f"{v} ({c})" if c and c != "—" else v for v, c in zip(df[label], ci)]
    return _ui.text_table(df.fillna("—"))


def _group_section(doc, figs, view):
    st.subheader("Group metrics")
    st.caption(rep.FOUR_FIFTHS_NOTE)
    names = list(doc["sensitive"])
    labels = {n: f"{n} · {VERDICT.get(doc['sensitive'][n]['verdict'], ('?',))[0]}" for n in names}
    # opens on the first attribute that fails; the open one is ?attr=<attribute>
    failing = next((n for n in names if doc["sensitive"][n]["verdict"] == "fail"), None)
    tabs = _query.tabs(labels, "audit_attr_tab", name="attr", default=failing, run_path=view)
    for tab, name in zip(tabs, names):
        a = doc["sensitive"][name]
        if tab.open is False:
            continue  # only the open attribute is built and sent (a click reruns the page)
        with tab:
            notes = [f"reference group **{_ui.md(a['reference_group'])}**"]
            if a.get("binning"):
                b = a["binning"]
                notes.append(f"binned ({_ui.md(b['rule'])}): {_ui.md(', '.join(b['labels']))}")
            if a.get("derived_from"):
                notes.append(f"derived from {_ui.code(a['derived_from'])}")
            ci = f"{round(a.get('ci_level', 0.95) * 100)} %"
            notes.append(f"intervals: {ci} percentile bootstrap, {a.get('n_boot')} resamples")
            st.caption(" · ".join(notes))
            # a judgement other than "within" in red, as st.metric's inverse delta drew it
            _ui.figures([(r["metric"], rep.fmt_num(r["value"]), f"CI {r['ci']}; {r['judgement']}",
                          (r["judgement"] if r["judgement"] == "within" else f"!{r['judgement']}")
                          if r["judgement"] else None)
                         for r in rep.summary_rows(a)[:4]])
            rows = [{"group": r["group"], "rows": r["count"],
                     **{rep.METRIC_LABELS[m]: r[m] for m in GROUP_COLUMNS},
                     **{rep.METRIC_LABELS[m] + " CI": r[m + "_ci"] for m in ("selection_rate", "tpr", "fpr")}}
                    for r in rep.group_table_rows(a)]
            many = len(rows) > TABLE_GROUPS
            if not many:  # a few groups: a Markdown table (a data grid's JavaScript comes before the charts)
                st.markdown(_group_text_table(rows))
            st.markdown("**Disparity: each group's rate divided by the reference group's** "
                        "(shaded: the acceptable band; bars: bootstrap intervals)")
            _ui.chart(figs[f"disparity:{name}"], key=f"disp_{name}")
            # built when opened (?rates=1): the disparity chart is the page's first (issue 35 item 9)
            box = _query.expander("**Rates per group** (bars: bootstrap intervals)", "audit_rates_open",
                                  name="rates", run_path=view, icon=":material/bar_chart:")
            if box.open:
                with box:
                    _ui.chart(figs[f"group_metrics:{name}"], key=f"bars_{name}")
            if many:  # many groups: the sortable grid, below the charts
                st.dataframe(rows, hide_index=True, width="stretch",
                             column_config={rep.METRIC_LABELS[m]: st.column_config.NumberColumn(format="%.3f")
                                            for m in GROUP_COLUMNS})
            findings = a.get("findings") or []
            if findings:
                with st.expander(f"{len(findings)} finding(s) for {_ui.md(name)}"):
                    st.markdown("\n".join(f"- **{f['severity'].replace('_', ' ')}**: {_ui.md(f['text'])}"
                                          for f in findings))


def _shap_section(doc, figs, view):
    sh = doc["shap"]
    st.subheader("Attributions (SHAP)")
    details = sh.get("details") or {}
    extra = _ui.md(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in details.items()))
    st.markdown(f"**{_ui.md(sh['explainer'])}** on the model's **{_ui.md(sh['output'])}** output"
                f"{' (' + extra + ')' if extra else ''}; base value {sh['base_value']:.4f}; "
                f"additivity: the largest |Σ SHAP + base − output| over the rows is "
                f"**{sh['additivity_max_error']:.2g}**.")
    flags = doc.get("flags") or []
    if flags:
        for f in flags:
            st.warning(_ui.md(f["message"]), icon=":material/flag:")
    else:
        st.caption("No sensitive feature or likely proxy ranks in the top "
                   f"{doc['provenance']['thresholds']['top_k']} by mean |SHAP| or holds "
                   f"{doc['provenance']['thresholds']['share']:.0%} of the total.")
    st.markdown(_top_features(sh["mean_abs"], doc))
    # The charts are built when opened (?shap=1, ?shap_groups=1): each figure sent and drawn
    # with the first delayed the page's first chart; the beeswarm alone is 195 kB of JSON.
    box = _query.expander("**SHAP summary** (one dot per row, ● sensitive feature, ◆ likely proxy) "
                          "and **mean |SHAP| per feature**", "audit_shap_open", name="shap", run_path=view,
                          icon=":material/scatter_plot:")
    if box.open:
        with box:
            _ui.chart(figs["beeswarm"], key="beeswarm")
            st.markdown("**Mean |SHAP| per feature** (red: sensitive, orange: likely proxy)")
            _ui.chart(figs["mean_abs"], key="mean_abs")
    names = list(doc["sensitive"])
    box = _query.expander("**Per sensitive attribute**: how its feature pushes each group (dependence), "
                          "and the mean SHAP of the top features within each group", "audit_shap_groups_open",
                          name="shap_groups", default="shap_attr" in st.query_params, run_path=view,
                          icon=":material/groups:")
    if not box.open:
        _ui.keep_widget_state("audit_shap_tab")
        return
    with box:
        _shap_groups(doc, figs, view, names)


def _top_features(mean_abs: dict, doc, top: int = 5) -> str:
    """The features with the largest mean |SHAP|, in words (the charts are drawn on demand)."""
    sens, prox = rep.sensitive_features(doc), rep.proxy_features(doc)

    def mark(f):
        return " (sensitive)" if f in sens else " (likely proxy)" if f in prox else ""

    ranked = sorted(mean_abs.items(), key=lambda kv: -abs(kv[1]))[:top]
    return ("Largest mean |SHAP|: " + ", ".join(f"**{_ui.md(f)}**{mark(f)} {v:.4g}" for f, v in ranked)
            + f" (of {len(mean_abs)} features).")


def _shap_groups(doc, figs, view, names):
    # the open attribute is ?shap_attr=<attribute>
    tabs = _query.tabs({n: n for n in names}, "audit_shap_tab", name="shap_attr", run_path=view)
    for tab, name in zip(tabs, names):
        if tab.open is False:
            continue  # as above: the open attribute's two charts only
        with tab:
            left, right = st.columns(2)
            with left:
                if f"dependence:{name}" in figs:
                    _ui.chart(figs[f"dependence:{name}"], key=f"dep_{name}")
                else:
                    st.info(f"{_ui.md(name)} is not a feature of the model, so it has no SHAP value of its "
                            "own; see the per-group comparison and the proxy table.")
            with right:
                _ui.chart(figs[f"by_group:{name}"], key=f"bygroup_{name}")
            assoc = [r for r in doc.get("associations", []) if r["attribute"] == name and not r["is_source"]][:6]
            if assoc:
                st.caption("Strongest associations with " + _ui.md(name) + ": " + ", ".join(
                    f"{_ui.md(r['feature'])} ({_ui.md(r['measure'])} {r['association']:.2f})" for r in assoc))


def _provenance(doc, sha256, roots=()):
    st.subheader("Provenance")
    with st.container(border=True):
        st.markdown(f"SHA-256 of the audit JSON: `{sha256}`")
        import pandas as pd

        # the command without the folders of the machine that computed it (roots: the run's)
        # a Markdown table: st.table would load 1 MB of Arrow JavaScript (text_table escapes)
        st.markdown(_ui.text_table(pd.DataFrame([{"what": k, "value": _ui.recorded_text(v, roots)}
                                                 for k, v in rep.provenance_rows(doc)])))


def _base_url() -> str:
    try:
        url = st.context.url or ""
    except Exception:  # noqa: BLE001 - no browser context (AppTest)
        url = ""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        p = parts.path
        p = p[: p.rfind("/audit")] if "/audit" in p else p.rstrip("/")
        return f"{parts.scheme}://{parts.netloc}{p}"
    return "http://localhost:8501"


def _default_base() -> str:
    """The share links' address: ``$DEBUGKIT_BASE_URL`` (a share-only server's, say),
    else this page's."""
    return os.environ.get("DEBUGKIT_BASE_URL") or _base_url()


def _share_box(audit_id):
    from debugkit.audit.share import parse_duration, server_secret, share_link

    rid = _runs.run_id_for(path)
    with st.popover("Share with compliance", icon=":material/share:"):
        st.caption(_share.share_reach_text())
        with st.form("share_form", border=False):
            st.selectbox("Expires after", list(EXPIRY), index=2, key="share_expiry")
            st.text_input("Dashboard address", value=_default_base(), key="share_base",
                          help="The address the recipient opens: this server's, or a share-only "
                               "server's started from the same folder")
            st.form_submit_button("Create link", icon=":material/link:",
                                  on_click=lambda: st.session_state.update(share_request=True))
        if st.session_state.pop("share_request", False):
            try:
                if not rid:
                    raise DebugkitError("this run is not in the served folders; open it from the run "
                                        "store or sample runs to share it")
                link, exp_at = share_link(st.session_state["share_base"], rid, audit_id,
                                          expires_in_s=parse_duration(EXPIRY[st.session_state["share_expiry"]]),
                                          secret=server_secret(_runs.store_dir()))
            except DebugkitError as exc:
                _ui.show_error(exc)
            else:
                # the recipient opens the tabs the sender has open (not signed: a view only)
                view = {k: st.query_params[k] for k in VIEW_PARAMS if st.query_params.get(k)}
                link += "&" + urllib.parse.urlencode(view) if view else ""
                st.session_state["share_link"] = (audit_id, link, exp_at)
        made = st.session_state.get("share_link")
        if made and made[0] == audit_id:
            st.code(made[1], language=None, wrap_lines=True)
            st.caption("Valid until " + dt.datetime.fromtimestamp(made[2], dt.timezone.utc)
                       .strftime("%Y-%m-%d %H:%M UTC"))


def _parse_lines(text: str, what: str) -> dict:
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if ":" not in line:
            raise DebugkitError(f"{what}: {line.strip()!r} is not of the form 'attribute: value'")
        k, v = line.split(":", 1)
        out[k.strip()] = v.strip()
    return out


def _compute_box(sig):
    # drawn when opened (open at first where the run has no audit yet): its form's eight
    # number inputs, text area and text inputs were drawn, collapsed, on every visit
    box = st.expander("Compute a new audit", icon=":material/calculate:", expanded=not _audits(path, sig),
                      key="audit_compute_open", on_change="rerun")
    if not box.open:
        return
    targets = _targets(path, sig)
    with box:
        if not targets:
            st.info("This run declares no audit target. A training script makes its models "
                    "auditable here by writing `audit_targets.json` (see docs/audit.md), or computes "
                    "audits itself with `debugkit.audit.audit_model(...)`.")
            return
        allowed = [t for t in targets if t["allowed"]]
        for t in targets:
            if not t["allowed"]:
                st.warning(f"Target {_ui.md(repr(t['name']))} uses loader {_ui.md(repr(t['loader']))}, which this server's "
                           "operator does not allow (DEBUGKIT_AUDIT_LOADERS lists the loaders it may "
                           "call; a run file never chooses code).")
        if not allowed:
            return
        if _auth.auth_providers() is not None and not _auth.logged_in():
            st.info("Sign in to compute an audit: on a server with sign-in, only signed-in "
                    "users compute anything.")
            return
        with st.form("compute_audit"):
            st.selectbox("Model", [t["name"] for t in allowed], key="ac_target",
                         format_func=lambda n: next(t["title"] for t in allowed if t["name"] == n))
            c = st.columns(4)
            c[0].number_input("Band low", 0.5, 1.0, 0.8, 0.01, key="ac_low")
            c[1].number_input("Band high", 1.0, 2.0, 1.25, 0.01, key="ac_high")
            c[2].number_input("Max difference", 0.0, 1.0, 0.1, 0.01, key="ac_maxd")
            c[3].number_input("Bootstrap resamples", 0, 10_000, 1000, 100, key="ac_nboot")
            c = st.columns(4)
            c[0].number_input("Min group size", 1, 10_000, 30, 1, key="ac_min_group")
            c[1].number_input("Flag top k features", 1, 100, 5, 1, key="ac_top_k")
            c[2].number_input("...or share of total", 0.0, 1.0, 0.10, 0.01, key="ac_share")
            c[3].number_input("Proxy association", 0.0, 1.0, 0.3, 0.05, key="ac_proxy")
            st.text_area("Bins (one per line, attribute: cut points)", value="age_in_years: 25, 35, 45, 60",
                         height=68, key="ac_bins")
            st.text_input("Reference groups (attribute: group; ...), default the largest", value="",
                          placeholder="sex: male; age_in_years: 25-34", key="ac_refs")
            # A callback, not the button's return value: it survives the router's rerun.
            st.form_submit_button("Compute audit", type="primary", icon=":material/play_arrow:",
                                  on_click=lambda: st.session_state.update(audit_compute_request=True))
        if not st.session_state.pop("audit_compute_request", False):
            return
        ss = st.session_state
        try:
            bins = {k: [float(x) for x in v.replace(";", ",").split(",") if x.strip()]
                    for k, v in _parse_lines(ss["ac_bins"], "bins").items()}
            refs = _parse_lines(ss["ac_refs"].replace(";", "\n"), "reference groups")
        except (ValueError, DebugkitError) as exc:
            _ui.show_error(exc if isinstance(exc, DebugkitError) else
                               DebugkitError(f"bins: {exc}"))
            return
        _run_audit(ss["ac_target"], {"band": (ss["ac_low"], ss["ac_high"]), "max_difference": ss["ac_maxd"],
                                     "n_boot": int(ss["ac_nboot"]), "min_group_size": int(ss["ac_min_group"]),
                                     "top_k": int(ss["ac_top_k"]), "share": ss["ac_share"],
                                     "proxy_threshold": ss["ac_proxy"], "reference": refs}, bins)


def _run_audit(tname, settings, bins):
    from debugkit.audit.stored_audits import server_audits_dir
    from debugkit.audit.worker import compute_audit
    from debugkit.io.upload import check_store_room

    # The loader and the audit run in a separate process with a time and memory limit
    # (DEBUGKIT_AUDIT_TIMEOUT_S, DEBUGKIT_AUDIT_MEMORY_MB), never in the server's. The
    # audit is written inside the run store only (a run outside it: the team's shared
    # audit store, DEBUGKIT_AUDIT_STORE, else the store's .audits/), and not when the
    # store is at its quota.
    bar = st.progress(0.0, text="Loading the model and the data…")
    try:
        store = _runs.store_dir()
        check_store_room(store, "audit")
        audit = compute_audit(path, tname, {**settings, "band": list(settings["band"])}, bins,
                              progress=lambda f, msg: bar.progress(min(max(f, 0.0), 1.0), text=msg),
                              store_in=server_audits_dir(path, store))
    except DebugkitError as exc:
        bar.empty()
        _ui.show_error(exc)
        return
    except Exception as exc:  # noqa: BLE001 - show what failed, keep the page up
        bar.empty()
        _ui.show_error(exc, "the audit")
        return
    _audits.clear()
    st.session_state["audit_done"] = f"Stored audit {audit['id']} ({VERDICT[audit['verdict']][0]})."
    st.query_params["audit"] = audit["id"]
    st.rerun()


# ---------------------------------------------------------------------------- page
def main():
    sig = _sig()
    try:
        entries = [e for e in _audits(path, sig) if not e.get("error")]
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    if read_only:
        audit_id = share["audit_id"]
    else:
        st.title("Bias audit")
        if msg := st.session_state.pop("audit_done", None):
            st.success(_ui.md(msg), icon=":material/task_alt:")
        if not entries:
            st.info("No audit stored in this run yet. Compute one below, or from Python with "
                    "`debugkit.audit.audit_model(model, X, y, sensitive=[...], run_dir=..., name=...)`.",
                    icon=":material/balance:")
            _compute_box(sig)
            return
        ids = [e["id"] for e in entries]
        try:
            wanted = _query.query_choice("audit", ids, lambda v: f"Audit {str(v)[:40]!r} is not stored "
                                                                  "in this run; showing the first failing "
                                                                  "audit, or the newest.")
        except DebugkitError as exc:
            st.warning(_ui.md(exc))
            wanted = None
        labels = {e["id"]: f"{e['name']} · {VERDICT.get(e['verdict'], (e['verdict'],))[0]} · "
                            f"{(e['created_at'] or '')[:16].replace('T', ' ')} · {e['id']}" for e in entries}
        # Without ?audit=, the first failing audit (what needs attention), else the newest.
        first = next((i for i, e in enumerate(entries) if e.get("verdict") == "fail"), 0)
        index = ids.index(wanted) if wanted else first
        picked = st.session_state.get(f"audit_pick_{wanted}")
        # in a popover named after the open audit (_ui.controls): the select box's code is not
        # loaded before the first chart
        with _ui.controls("Audit", labels[picked if picked in labels else ids[index]],
                          icon=":material/balance:"):
            audit_id = st.selectbox("Audit", ids, index=index, format_func=labels.get, key=f"audit_pick_{wanted}")
        if st.query_params.get("audit") != audit_id:
            st.query_params["audit"] = audit_id
    try:
        data = _audit(path, sig, audit_id, read_only)
        figs = _Figures(path, sig, audit_id)
    except DebugkitError as exc:
        _ui.show_error(exc)
        return
    doc = data["doc"]
    prov = doc.get("provenance", {})
    if read_only:
        st.title(f"Bias audit: {_ui.md(doc['name'])}")
        exp = dt.datetime.fromtimestamp(share["expires_at"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        st.caption(f"Shared read-only view of audit {_ui.code(audit_id)} of run **{_ui.md(prov.get('run', {}).get('name'))}**; "
                   f"this link expires {exp}.")
    else:
        st.caption(f"Run **{_ui.md(prov.get('run', {}).get('name'))}** · model {_ui.code(doc['model'].get('estimator'))} · "
                   f"{doc['dataset']['rows']:,} rows · computed {_ui.md(prov.get('created_at'))} by "
                   f"{_ui.md(prov.get('created_by'))}")
    _ui.about("One stored, immutable audit of a model from this run on a held-out dataset. The **verdict** lists each group whose rate differs from the reference group beyond the configured band (with a bootstrap 95 % confidence interval); the fairness tables give selection rate, error rates and their differences per sensitive attribute (fairlearn's MetricFrame); the SHAP charts show which features drive the model's predictions, overall and per group." + ("" if read_only else ' Share it read-only with *Share with compliance*: the link opens this audit alone and expires.'))
    _verdict_box(doc)
    top = st.columns([1, 1, 1] if not read_only else [1, 1])
    with top[0]:
        st.download_button("Download report (HTML)", data=lambda: _report(path, sig, audit_id, read_only),
                           file_name=f"audit-{audit_id}.html", mime="text/html",
                           icon=":material/description:", on_click="ignore", key="dl_html",
                           help="Standalone, readable offline; prints the audit JSON's SHA-256")
    with top[1]:
        st.download_button("Download audit JSON", data=data["json"], file_name=f"audit-{audit_id}.json",
                           mime="application/json", icon=":material/data_object:", on_click="ignore",
                           key="dl_json", help=f"SHA-256 {data['sha256']}")
    if not read_only:
        with top[2]:
            _share_box(audit_id)
    view = f"{path}#{audit_id}"  # another audit opens on its own default tabs
    _group_section(doc, figs, view)
    _shap_section(doc, figs, view)
    _provenance(doc, data["sha256"], _data.recorded_roots(path))
    if not read_only:
        _compute_box(sig)


main()
