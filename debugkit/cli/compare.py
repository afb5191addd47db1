"""``debugkit compare RUN BASE [--json]``: what differs between a run and the one that worked.

Sections, in order: what differs before step 0 (config, environment, code, data, world
size and ranks), where the runs diverge, findings in one and not the other. See
docs/compare.md.
"""

from __future__ import annotations

from ._output import print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("compare", help="what differs between a run and the run that worked")
    p.add_argument("run", help="the run under suspicion (directory or .zip)")
    p.add_argument("base", help="the run that worked (directory or .zip); bands are learned from it")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a divergence threshold, e.g. --set band_sigmas=8 "
                        "(VALUE is JSON; see docs/compare.md)")
    p.set_defaults(func=run)


def parse_settings(items: list[str]) -> dict:
    """``["band_sigmas=8"]`` -> ``{"band_sigmas": 8}`` (keys of the analysis' DEFAULTS)."""
    import json

    from ..analysis.run_diff import DEFAULTS
    from ..errors import InvalidInputError

    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in DEFAULTS:
            raise InvalidInputError(f"--set {item!r}: expected KEY=VALUE with KEY one of "
                                    f"{', '.join(DEFAULTS)}")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            raise InvalidInputError(f"--set {item!r}: VALUE must be JSON, e.g. 8 or 0.5") from None
    return out


def _fmt(v) -> str:
    if v is None:
        return "-"
    return str(v)


def _differing(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["status"] != "equal"]


def run(args) -> int:
    from ..run_comparison import compare_paths

    res = compare_paths(args.run, args.base, parse_settings(getattr(args, "set", []) or []))
    if args.json:
        print_json(res)
        return 0
    before = res["before_step_0"]
    print(f"run {res['run']} ({res['statuses']['run']}) vs base {res['base']} "
          f"({res['statuses']['base']})")
    print("\n1. What differs before step 0")
    sections = [
        ("config", before["config"]["rows"]),
        ("environment", _differing(before["environment"]["fields"]) + before["environment"]["packages"]),
        ("code", _differing(before["code"]["rows"])),
        ("data", [{**r, "status": r["status"] + (f" ({r['items_differing']} of {r['items_sampled']} "
                                                  "sampled items)" if "items_differing" in r else "")}
                  for r in _differing(before["data"]["datasets"]["rows"])]),
        ("batch spec", [{"name": f"{r['tensor']}.{r['field']}", **r}
                        for r in before["data"]["batch_spec"]["rows"]]),
        ("world size and ranks", _differing(before["topology"]["rows"])),
    ]
    status = {"config": before["config"]["status"], "environment": before["environment"]["status"],
              "code": before["code"]["status"], "data": before["data"]["datasets"]["status"],
              "batch spec": before["data"]["batch_spec"]["status"],
              "world size and ranks": before["topology"]["status"]}
    for title, rows in sections:
        print(f"  {title}: {status[title]}")
        if rows:
            print_table([{k: _fmt(r.get(k)) for k in ("name", "run", "base", "status")} for r in rows],
                        ["name", "run", "base", "status"])
    pc = before["environment"]["pip_check"]
    print(f"  pip check: run {pc['run']['status']}, base {pc['base']['status']}")
    if before["code"]["diff"]:
        print(before["code"]["diff"], end="")
    elif before["code"]["diff_note"]:
        print(f"  code diff: {before['code']['diff_note']}")
    div = res["divergence"]
    print("\n2. Where they diverge")
    if div["status"] == "diverged":
        print(f"  {div['finding']['message']}")
    else:
        print(f"  {div['status']}" + (f" (rank {div['rank']} compared)" if div["rank"] is not None else ""))
    print("\n3. Findings in one and not the other")
    for side in ("run", "base"):
        found = res["findings"][side]
        print(f"  only in {side}: {len(found)}")
        if found:
            print_table(found, ["step", "rank", "severity", "kind", "layer", "message"])
    return 0
