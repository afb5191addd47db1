"""``debugkit audit show|list|report RUN``: read a run's stored bias audits."""

from __future__ import annotations

from pathlib import Path

from ._output import print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("audit", help="show a run's stored bias audits (SHAP + fairness)")
    actions = p.add_subparsers(dest="action", metavar="ACTION")

    show = actions.add_parser("show", help="print a stored audit (the newest by default)")
    show.add_argument("run", help="run directory or .zip")
    show.add_argument("--audit", metavar="ID", default=None, help="audit id (default: the newest)")
    show.add_argument("--json", action="store_true", help="print the audit JSON")
    show.set_defaults(func=run_show)

    ls = actions.add_parser("list", help="list a run's stored audits")
    ls.add_argument("run", help="run directory or .zip")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=run_list)

    rep = actions.add_parser("report", help="write the standalone HTML report and the audit JSON")
    rep.add_argument("run", help="run directory or .zip")
    rep.add_argument("--audit", metavar="ID", default=None, help="audit id (default: the newest)")
    rep.add_argument("--out", default=".", help="folder to write audit-<id>.html and .json into")
    rep.set_defaults(func=run_report)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _load(args):
    from ..audit.stored_audits import latest_audit_id, load_audit
    from ..io.run import open_run

    run = open_run(args.run)
    aid = args.audit or latest_audit_id(run.path)
    return run, load_audit(run.path, aid)


def run_show(args) -> int:
    run, audit = _load(args)
    doc = audit.doc
    if args.json:
        print_json(doc)
        return 0
    print(f"audit {audit.id}: {doc.get('name')}")
    print(f"run:      {run.name} ({run.path})")
    print(f"model:    {doc['model'].get('estimator')} ({doc['model'].get('kind')}); "
          f"sha256 {doc['model'].get('sha256', '')[:16]}...")
    print(f"dataset:  {doc['dataset']['rows']} rows; sha256 {doc['dataset']['sha256'][:16]}...")
    print(f"shap:     {doc['shap']['explainer']} on {doc['shap']['output']}; additivity max error "
          f"{doc['shap']['additivity_max_error']:.3g}")
    print(f"verdict:  {doc['verdict']}")
    for name, a in doc["sensitive"].items():
        print(f"\n{name}: {a['verdict']} (reference group {a['reference_group']}); "
              f"DP difference {a['demographic_parity_difference']:.3f}, DP ratio "
              f"{a['demographic_parity_ratio']:.3f}, EO difference {a['equalized_odds_difference']:.3f}, "
              f"EOpp difference {a['equal_opportunity_difference']:.3f}")
        rows = [{"group": g, **{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in m.items()}}
                for g, m in a["groups"].items()]
        print_table(rows, ["group", "count", "base_rate", "selection_rate", "tpr", "fpr", "fnr",
                           "precision", "accuracy"])
    if doc.get("reasons"):
        print("\nreasons:")
        for r in doc["reasons"]:
            print(f"  - {r}")
    return 0


def run_list(args) -> int:
    from ..audit.stored_audits import list_audits
    from ..io.run import open_run

    run = open_run(args.run)
    entries = list_audits(run.path)
    if args.json:
        print_json({"run": run.name, "path": str(run.path), "audits": entries})
        return 0
    if not entries:
        print(f"{run.name}: no stored audits")
        return 0
    print_table(entries, ["id", "verdict", "created_at", "model", "name", "error"])
    return 0


def run_report(args) -> int:
    from ..audit.report import build_report_html

    _, audit = _load(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    html_path = out / f"audit-{audit.id}.html"
    json_path = out / f"audit-{audit.id}.json"
    json_path.write_bytes(audit.json_bytes())
    html_path.write_text(build_report_html(audit, json_file_name=json_path.name), encoding="utf-8")
    print(html_path)
    print(json_path)
    print(f"sha256 {audit.json_sha256}  {json_path.name}")
    return 0
