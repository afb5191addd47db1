"""``debugkit diagnose RUN [--json]``: every finding of every detector, ordered by step."""

from __future__ import annotations

from ._output import print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="find what went wrong in a run")
    p.add_argument("run", help="run directory or .zip")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--severity", choices=["error", "warning", "info"], default="info",
                   help="lowest severity to show (default: info)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..diagnose import diagnose
    from ..io.run import open_run

    r = open_run(args.run)
    keep = {"error": {"error"}, "warning": {"error", "warning"},
            "info": {"error", "warning", "info"}}[args.severity]
    findings = [f for f in diagnose(r) if f.severity in keep]
    if args.json:
        print_json({"run": r.name, "path": str(r.path), "status": r.status,
                    "findings": [f.to_dict() for f in findings]})
        return 0
    print(f"{r.name}: {r.status}, {len(findings)} finding(s)")
    if findings:
        print_table([f.to_dict() for f in findings],
                    ["step", "rank", "severity", "kind", "layer", "message"])
    return 0
