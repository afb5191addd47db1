"""``debugkit info RUN [--json]``: manifest, status, row counts and failures of a run."""

from __future__ import annotations

from ._output import print_json, print_table


def register(sub) -> None:
    p = sub.add_parser("info", help="show a run's manifest, status, row counts and failures")
    p.add_argument("run", help="run directory or .zip")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def collect(path) -> dict:
    from ..io.run import open_run

    r = open_run(path)
    manifest = {k: v for k, v in r.manifest.items() if not k.startswith("_")}
    from ..diagnose.failures import MAX_BATCH_CHECKS
    from ..replay.batchcheck import check_captured_batch

    failures = [{**{k: f.get(k) for k in ("id", "kind", "step", "rank", "error_type", "message",
                                          "dataset_indices", "device")},
                 "batch_shows": check_captured_batch(f, r.manifest.get("num_classes"))
                 if n < MAX_BATCH_CHECKS else None}
                for n, f in enumerate(r.failures())]
    return {
        "path": str(r.path),
        "name": r.name,
        "run_id": r.run_id,
        "status": r.status,
        "ranks": r.ranks,
        "manifest": manifest,
        "row_counts": r.row_counts(),
        "failures": failures,
        "warnings": r.warnings,
    }


def run(args) -> int:
    info = collect(args.run)
    if args.json:
        print_json(info)
        return 0
    print(f"run:     {info['name']}  ({info['path']})")
    print(f"status:  {info['status']}")
    ranks = info["ranks"]
    print(f"ranks:   {len(ranks)}" + (f" ({', '.join(map(str, ranks))})" if len(ranks) > 1 else "")
          if ranks else "ranks:   -")
    print("rows:    " + ", ".join(f"{k}={v}" for k, v in info["row_counts"].items()))
    if info["failures"]:
        print(f"failures ({len(info['failures'])}):")
        print_table(info["failures"], ["id", "step", "rank", "error_type", "message"])
        for f in info["failures"]:
            if f.get("batch_shows"):
                print(f"  {f['id']}: the captured batch shows it: {f['batch_shows']['detail']}")
    else:
        print("failures: none")
    for w in info["warnings"]:
        print(f"warning: {w}")
    return 0
