"""``debugkit diagnose RUN [--json]``: every finding of every detector, ordered by step.

``debugkit diagnose --kinds [--json]``: the catalogue of finding kinds
(:mod:`debugkit.analysis.kinds`): area, default severity, title, page and doc section."""

from __future__ import annotations

from ._output import print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="find what went wrong in a run")
    p.add_argument("run", nargs="?", help="run directory or .zip")
    p.add_argument("--kinds", action="store_true",
                   help="list every kind of finding (area, default severity, title, page, doc) and exit")
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


def print_kinds(as_json: bool) -> int:
    from ..analysis.kinds import KINDS

    if as_json:
        print_json({"kinds": [k.to_dict() for k in KINDS]})
        return 0
    print_table([{**k.to_dict(), "severity": "/".join(k.severities)} for k in KINDS],
                ["kind", "area", "severity", "page", "doc", "title"])
    return 0


def run(args) -> int:
    from ..diagnose import diagnose
    from ..errors import InvalidInputError
    from ..io.run import open_run

    if getattr(args, "kinds", False):
        if args.run:
            raise InvalidInputError(f"diagnose --kinds lists the kinds of finding and reads no run: "
                                    f"drop {args.run!r}, or drop --kinds to diagnose it")
        return print_kinds(args.json)
    if not args.run:
        raise InvalidInputError("diagnose needs a run directory or .zip (debugkit diagnose RUN), "
                                "or --kinds to list the kinds of finding")
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
