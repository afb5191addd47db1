"""``debugkit diagnose RUN [--json]``: every finding of every detector, ordered by step."""

from __future__ import annotations

from ._output import print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="find what went wrong in a run")
    p.add_argument("run", help="run directory or .zip")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--severity", choices=["error", "warning", "info"], default="info",
                   help="lowest severity to show (default: info)")
    p.add_argument("--set", action="append", default=[], metavar="SOURCE.KEY=VALUE",
                   help="override a detector threshold, e.g. --set gradients.explode_factor=20 "
                        "(VALUE is JSON; see docs/gradients.md)")
    p.set_defaults(func=run)


def parse_overrides(items: list[str]) -> dict:
    """``["gradients.explode_factor=20"]`` -> ``{"gradients": {"explode_factor": 20}}``."""
    import json

    from ..diagnose import SOURCES
    from ..errors import InvalidInputError

    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        source, dot, name = key.partition(".")
        if not sep or not dot or not name:
            raise InvalidInputError(f"--set {item!r}: expected SOURCE.KEY=VALUE, e.g. gradients.explode_factor=20")
        if source not in SOURCES:
            raise InvalidInputError(f"--set {item!r}: unknown source {source!r}; known: {', '.join(SOURCES)}")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        out.setdefault(source, {})[name] = value
    return out


def run(args) -> int:
    from ..diagnose import diagnose
    from ..io.run import open_run

    r = open_run(args.run)
    keep = {"error": {"error"}, "warning": {"error", "warning"},
            "info": {"error", "warning", "info"}}[args.severity]
    config = parse_overrides(getattr(args, "set", []) or [])
    findings = [f for f in diagnose(r, config) if f.severity in keep]
    if args.json:
        print_json({"run": r.name, "path": str(r.path), "status": r.status,
                    "findings": [f.to_dict() for f in findings]})
        return 0
    print(f"{r.name}: {r.status}, {len(findings)} finding(s)")
    if findings:
        print_table([f.to_dict() for f in findings],
                    ["step", "rank", "severity", "kind", "layer", "message"])
    return 0
