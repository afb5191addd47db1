"""The audit's figures, and the standalone HTML report a compliance reviewer downloads.

The report is one HTML file with plotly.js inlined (no external scripts, fonts or
styles), readable offline, printing the SHA-256 of the audit JSON served with it so the
two files can be matched in a compliance record.
"""

from __future__ import annotations

import html
from typing import Any

from ..charts import audit as charts
from .auditor import METRIC_LABELS, SUMMARY_LABELS

VERDICT_TEXT = {"pass": "Pass", "needs_review": "Needs review", "fail": "Fail"}
VERDICT_COLOR = {"pass": "#1b7f3b", "needs_review": "#b26a00", "fail": "#b42318"}
FOUR_FIFTHS_NOTE = (
    "The 0.80-1.25 band is Aequitas' default and mirrors the \"four-fifths rule\" of the "
    "US Uniform Guidelines on Employee Selection Procedures (1978): a convention for US "
    "employment selection, not a universal legal standard. Use the band your jurisdiction, "
    "regulator and internal policy require.")
JUDGEMENT_TEXT = {"within": "within", "outside": "outside (significant)",
                  "outside_uncertain": "outside (not significant)",
                  "outside_too_few": "outside (too few rows)", "undefined": "undefined", None: ""}


# ----------------------------------------------------------------------------- helpers
def sensitive_features(doc: dict) -> dict[str, str]:
    """``{feature: attribute}`` for model features that are sensitive attributes."""
    out = {}
    for name, a in doc.get("sensitive", {}).items():
        for f in a.get("source_features") or []:
            out.setdefault(f, name)
    return out


def proxy_features(doc: dict) -> dict[str, str]:
    """``{feature: attribute}`` of likely proxies (association >= the threshold)."""
    thr = (doc.get("provenance", {}).get("thresholds") or {}).get("proxy_threshold", 0.3)
    out = {}
    for r in doc.get("associations", []):
        if not r.get("is_source") and (r.get("association") or 0) >= thr:
            out.setdefault(r["feature"], r["attribute"])
    return out


def attribution_features(doc: dict, top: int = 10) -> list[str]:
    """The features the per-group comparison shows: the top ``top`` by mean |SHAP|, plus
    every sensitive feature and proxy."""
    ranked = list(doc["shap"]["mean_abs"])
    keep = ranked[:top]
    for f in list(sensitive_features(doc)) + list(proxy_features(doc)):
        if f in ranked and f not in keep:
            keep.append(f)
    return keep


def figure_keys(doc: dict, rows) -> list[str]:
    """The keys of every figure of an audit, in the report's order: ``group_metrics:<attr>``,
    ``disparity:<attr>``, ``mean_abs``, ``beeswarm``, ``dependence:<attr>`` (an attribute
    whose first source feature has SHAP values), ``by_group:<attr>``."""
    keys = [k for name in doc["sensitive"] for k in (f"group_metrics:{name}", f"disparity:{name}")]
    keys += ["mean_abs", "beeswarm"]
    for name, a in doc["sensitive"].items():
        src = (a.get("source_features") or [None])[0]
        if src is not None and f"shap:{src}" in rows:
            keys.append(f"dependence:{name}")
        keys.append(f"by_group:{name}")
    return keys


def figure(doc: dict, rows, key: str):
    """One figure of an audit by its key (:func:`figure_keys`), built alone: a page that
    shows one chart first builds that one (14 figures of the German-credit audit are
    0.25-0.35 s of CPU, the first of them most of it)."""
    kind, _, name = key.partition(":")
    shap_doc = doc["shap"]
    out = output_label(doc)
    if kind in ("group_metrics", "disparity", "dependence", "by_group") and name not in doc["sensitive"]:
        raise KeyError(key)
    if kind == "group_metrics":
        return charts.build_group_metrics_figure(doc["sensitive"][name])
    if kind == "disparity":
        thresholds = doc.get("provenance", {}).get("thresholds") or {}
        band = tuple(thresholds.get("band", (0.8, 1.25)))
        judged = thresholds.get("judged_metrics") or ["selection_rate", "tpr", "fpr", "fnr", "precision"]
        return charts.build_disparity_figure(doc["sensitive"][name], band=band, metrics=tuple(judged))
    if kind == "mean_abs":
        return charts.build_mean_abs_figure(shap_doc["mean_abs"], sensitive=set(sensitive_features(doc)),
                                            proxies=proxy_features(doc), output=out)
    if kind == "beeswarm":
        feats = list(shap_doc["mean_abs"])
        sv = rows[[f"shap:{f}" for f in feats]].set_axis(feats, axis=1)
        fv = rows[[f"value:{f}" for f in feats]].set_axis(feats, axis=1)
        return charts.build_beeswarm_figure(sv, fv, feats, sensitive=set(sensitive_features(doc)),
                                            proxies=proxy_features(doc), output=out)
    if kind == "dependence":
        a = doc["sensitive"][name]
        src = (a.get("source_features") or [None])[0]
        if src is None or f"shap:{src}" not in rows:
            raise KeyError(key)
        x = rows[f"raw:{name}"] if f"raw:{name}" in rows and a.get("derived_from") is None \
            else rows[f"value:{src}"]
        return charts.build_dependence_figure(
            x.to_numpy(), rows[f"shap:{src}"].to_numpy(), rows[f"group:{name}"].to_numpy(),
            a.get("order") or [], feature=src, attribute=name, output=out)
    if kind == "by_group":
        a = doc["sensitive"][name]
        return charts.build_group_attribution_figure(
            shap_doc["by_group"][name], a.get("order") or [], attribution_features(doc),
            attribute=name, highlight=set(sensitive_features(doc)) | set(proxy_features(doc)), output=out)
    raise KeyError(key)


def figures(doc: dict, rows) -> dict[str, Any]:
    """Every figure of an audit by key (:func:`figure_keys`)."""
    return {k: figure(doc, rows, k) for k in figure_keys(doc, rows)}


def output_label(doc: dict) -> str:
    return str(doc.get("shap", {}).get("output") or "")


def fmt_num(v, digits: int = 3) -> str:
    if v is None:
        return "—"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    try:
        return f"{float(v):.{digits}f}"
    except (TypeError, ValueError):
        return str(v)


def fmt_ci(ci, digits: int = 3) -> str:
    if not ci or ci[0] is None or ci[1] is None:
        return "—"
    return f"{ci[0]:.{digits}f}–{ci[1]:.{digits}f}"


def group_table_rows(attr: dict) -> list[dict]:
    """Rows of the group metrics table: one per group, value and interval per metric."""
    rows = []
    for g in attr.get("order") or attr["groups"]:
        m = attr["groups"][g]
        ci = attr.get("groups_ci", {}).get(g, {})
        row = {"group": g + (" (reference)" if g == attr.get("reference_group") else ""),
               "count": m["count"]}
        for k in ("base_rate", "selection_rate", "tpr", "fpr", "fnr", "precision", "accuracy"):
            row[k] = m.get(k)
            row[k + "_ci"] = fmt_ci(ci.get(k))
        rows.append(row)
    return rows


def summary_rows(attr: dict) -> list[dict]:
    out = []
    for k, label in SUMMARY_LABELS.items():
        out.append({"metric": label, "value": attr.get(k), "ci": fmt_ci((attr.get("summary_ci") or {}).get(k)),
                    "judgement": JUDGEMENT_TEXT.get((attr.get("summary_judgement") or {}).get(k), "")})
    return out


def provenance_rows(doc: dict) -> list[tuple[str, str]]:
    p = doc.get("provenance", {})
    run = p.get("run") or {}
    ck = p.get("checkpoint")
    versions = ", ".join(f"{k} {v}" for k, v in (p.get("versions") or {}).items() if v)
    t = p.get("thresholds") or {}
    thresholds = (f"band {t.get('band')}, max difference {t.get('max_difference')}, "
                  f"judged {', '.join(t.get('judged_metrics') or [])}, min group {t.get('min_group_size')}, "
                  f"{t.get('n_boot')} bootstrap resamples at {t.get('ci_level')}, seed {t.get('seed')}, "
                  f"top-k {t.get('top_k')}, share {t.get('share')}, proxy threshold "
                  f"{t.get('proxy_threshold')}, decision threshold {t.get('decision_threshold')}, "
                  f"reference groups {t.get('reference') or 'largest'}")
    model = doc.get("model", {})
    data = doc.get("dataset", {})
    bins = []
    for name, a in doc.get("sensitive", {}).items():
        b = a.get("binning")
        if b:
            bins.append(f"{name}: {b.get('rule')}, cut at {', '.join(f'{e:g}' for e in b.get('edges') or [])} "
                        f"({', '.join(b.get('labels') or [])})")
        elif a.get("derived_from"):
            bins.append(f"{name}: derived from {a['derived_from']}")
    return [
        ("Run", f"{run.get('name')} (run_id {run.get('run_id')})"),
        ("Checkpoint", f"{ck['path']} (sha256 {ck['sha256'][:16]}…)" if ck else "none in the run matches"),
        ("Model", f"{model.get('estimator')} ({model.get('kind')}); decisions: {model.get('decision')}"),
        ("Model hash", f"{model.get('sha256')} — {model.get('hash_of')}"),
        ("Dataset", f"{data.get('rows')} rows × {len(data.get('columns') or [])} columns; "
                    f"positive label {data.get('positive_label')!r}"),
        ("Dataset hash", f"{data.get('sha256')} — {data.get('hash_of')}"),
        ("Groups", "; ".join(bins) or "categorical attributes as given"),
        ("Explainer", f"{doc['shap'].get('explainer')} on {doc['shap'].get('output')}; "
                      f"additivity max error {doc['shap'].get('additivity_max_error'):.3g}; "
                      f"{doc['shap'].get('details')}"),
        ("Versions", versions),
        ("Thresholds", thresholds),
    ] + ([("Computed", f"at {p.get('created_at')}; who computed it, on which machine, with which "
                      "command and from which folder are not shared"),
           ("Full audit", f"SHA-256 of the full audit.json: {doc['shared_view'].get('full_audit_sha256')}")]
          if doc.get("shared_view") else
          [("Computed by", f"{p.get('created_by')} at {p.get('created_at')}"),
           ("Command", " ".join(p.get("command") or []))])


# ----------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:0 auto;
max-width:1100px;padding:24px;color:#1d2330;line-height:1.45}
h1{font-size:1.6rem;margin:0 0 .2rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd;
padding-bottom:.2rem}h3{font-size:1.05rem;margin-top:1.4rem}
.badge{display:inline-block;padding:.25rem .7rem;border-radius:1rem;color:#fff;font-weight:600}
.hash{font-family:ui-monospace,Menlo,Consolas,monospace;background:#f3f4f6;padding:.5rem .7rem;
border-radius:6px;word-break:break-all;display:block}
table{border-collapse:collapse;margin:.6rem 0;font-size:.88rem}td,th{border:1px solid #ddd;
padding:.25rem .5rem;text-align:right}th{background:#f6f7f9}td:first-child,th:first-child{text-align:left}
.note{background:#fff8e6;border-left:4px solid #e0a100;padding:.5rem .8rem;margin:1rem 0}
.muted{color:#667}ul.reasons li{margin:.2rem 0}.prov td{text-align:left;vertical-align:top}
"""


def _e(v) -> str:
    return html.escape(str(v), quote=True)


def _table(headers: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def build_report_html(audit, *, json_file_name: str | None = None, shown=None) -> str:
    """The standalone HTML report of a stored :class:`~debugkit.audit.stored_audits.Audit`.

    ``shown(text)``: how a provenance value is written (the dashboard passes one that
    leaves out the folders of the machine that computed the audit); as recorded without it.
    """
    import plotly.io as pio

    doc = audit.doc
    figs = figures(doc, audit.rows)
    first = [True]

    def fig_html(key: str) -> str:
        if key not in figs:
            return ""
        inc = first[0]
        first[0] = False
        return pio.to_html(figs[key], full_html=False, include_plotlyjs=inc, include_mathjax=False,
                           config={"displaylogo": False, "responsive": True}, div_id=None)

    v = doc.get("verdict")
    json_name = json_file_name or f"audit-{audit.id}.json"
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>Bias audit {_e(audit.id)}: {_e(doc.get('name'))}</title>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Bias audit: {_e(doc.get('name'))}</h1>",
        f"<p class='muted'>Audit <code>{_e(audit.id)}</code> of run "
        f"{_e((doc.get('provenance', {}).get('run') or {}).get('name'))}, computed "
        f"{_e(doc.get('provenance', {}).get('created_at'))}"
        + ("" if doc.get("shared_view") else f" by {_e(doc.get('provenance', {}).get('created_by'))}")
        + ". Generated by debugkit.</p>",
        f"<p><span class='badge' style='background:{VERDICT_COLOR.get(v, '#555')}'>"
        f"{_e(VERDICT_TEXT.get(v, v))}</span></p>",
        f"<p><b>SHA-256 of the audit JSON</b> (<code>{_e(json_name)}</code>, served with this report; "
        f"<code>sha256sum {_e(json_name)}</code> must print the same):"
        f"<span class='hash' id='json-sha256'>{_e(audit.json_sha256)}</span></p>",
    ]
    reasons = doc.get("reasons") or []
    if reasons:
        parts.append("<h2>Why</h2><ul class='reasons'>" +
                     "".join(f"<li>{_e(r)}</li>" for r in reasons) + "</ul>")
    else:
        parts.append("<p>No disparity outside the band and no attribution flag.</p>")
    parts.append(f"<div class='note'>{_e(FOUR_FIFTHS_NOTE)}</div>")

    parts.append("<h2>Group metrics</h2>")
    for name, a in doc["sensitive"].items():
        parts.append(f"<h3>{_e(name)} — {_e(VERDICT_TEXT.get(a.get('verdict'), a.get('verdict')))}; "
                     f"reference group {_e(a.get('reference_group'))}</h3>")
        b = a.get("binning")
        if b:
            parts.append(f"<p class='muted'>Binned: {_e(b.get('rule'))}; groups "
                         f"{_e(', '.join(b.get('labels') or []))}.</p>")
        if a.get("derived_from"):
            parts.append(f"<p class='muted'>Derived from the column {_e(a['derived_from'])}.</p>")
        metrics = ("base_rate", "selection_rate", "tpr", "fpr", "fnr", "precision", "accuracy")
        rows = [[r["group"], fmt_num(r["count"])] + [f"{fmt_num(r[m])} [{r[m + '_ci']}]" for m in metrics]
                for r in group_table_rows(a)]
        parts.append(_table(["group", "rows"] + [METRIC_LABELS[m] for m in metrics], rows))
        parts.append(_table(["summary metric (fairlearn)", "value", "CI", "judgement"],
                            [[r["metric"], fmt_num(r["value"]), r["ci"], r["judgement"]]
                             for r in summary_rows(a)]))
        parts.append(fig_html(f"disparity:{name}"))
        parts.append(fig_html(f"group_metrics:{name}"))

    sh = doc["shap"]
    parts.append("<h2>Attributions (SHAP)</h2>")
    parts.append(f"<p>{_e(sh.get('explainer'))} on the model's {_e(sh.get('output'))} output; "
                 f"base value {fmt_num(sh.get('base_value'), 4)}; largest additivity error "
                 f"|Σ SHAP + base − output| = {sh.get('additivity_max_error'):.3g}.</p>")
    flags = doc.get("flags") or []
    if flags:
        parts.append("<ul class='reasons'>" + "".join(f"<li>{_e(f['message'])}</li>" for f in flags) + "</ul>")
    else:
        parts.append("<p>No sensitive feature or likely proxy ranks among the most important features.</p>")
    parts.append(fig_html("mean_abs"))
    parts.append(fig_html("beeswarm"))
    for name in doc["sensitive"]:
        if f"dependence:{name}" in figs:
            parts.append(f"<h3>Dependence: {_e(name)}</h3>" + fig_html(f"dependence:{name}"))
        parts.append(f"<h3>Mean SHAP per group: {_e(name)}</h3>" + fig_html(f"by_group:{name}"))
    assoc = [r for r in doc.get("associations", []) if not r.get("is_source")]
    top = {}
    for r in assoc:
        top.setdefault(r["attribute"], []).append(r)
    parts.append("<h3>Strongest associations with sensitive attributes (proxy candidates)</h3>")
    parts.append(_table(["attribute", "feature", "measure", "association"],
                        [[r["attribute"], r["feature"], r["measure"], fmt_num(r["association"])]
                         for rs in top.values() for r in rs[:5]]))

    parts.append("<h2>Provenance</h2>")
    parts.append(_table(["", ""], [[k, v if shown is None else shown(v)] for k, v in provenance_rows(doc)],
                        cls="prov"))
    parts.append("</body></html>")
    return "\n".join(parts)
