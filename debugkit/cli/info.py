"""``debugkit info RUN [--json]``: manifest, status, row counts and failures of a run; for an
inference run (``debugkit.serve``) also its requests by outcome and latency percentiles."""

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
                 **({k: f.get(k) for k in ("request", "outcome", "signature", "route")}
                    if f.get("kind") == "request" else {}),
                 "batch_shows": check_captured_batch(f, r.manifest.get("num_classes"))
                 if n < MAX_BATCH_CHECKS and f.get("kind") != "request" else None}
                for n, f in enumerate(r.failures())]
    requests = None
    if r.kind == "inference":
        from ..analysis.serving import summarize_requests

        requests = summarize_requests(r.requests())
    return {
        "path": str(r.path),
        "name": r.name,
        "run_id": r.run_id,
        "kind": r.kind,
        "requests": requests,
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
    print(f"kind:    {info['kind']}")
    req = info.get("requests")
    if req is not None:
        outcomes = ", ".join(f"{k} {v:,}" for k, v in req["by_outcome"].items())
        print(f"requests: {req['requests']:,}" + (f" ({outcomes})" if outcomes else "")
              + f"; {req['signatures']} input signature(s); {req['captured']} captured")
        if req["latency_ms"]:
            lat = req["latency_ms"]
            print(f"latency: p50 {lat['p50']:.3g} ms, p95 {lat['p95']:.3g} ms, p99 {lat['p99']:.3g} ms")
    ranks = info["ranks"]
    print(f"ranks:   {len(ranks)}" + (f" ({', '.join(map(str, ranks))})" if len(ranks) > 1 else "")
          if ranks else "ranks:   -")
    print("rows:    " + ", ".join(f"{k}={v}" for k, v in info["row_counts"].items()))
    if info["failures"]:
        print(f"failures ({len(info['failures'])}):")
        if all(f["kind"] == "request" for f in info["failures"]):
            print_table(info["failures"], ["id", "request", "outcome", "error_type", "signature", "message"])
        else:
            print_table(info["failures"], ["id", "step", "rank", "error_type", "message"])
        for f in info["failures"]:
            if f.get("batch_shows"):
                print(f"  {f['id']}: the captured batch shows it: {f['batch_shows']['detail']}")
    else:
        print("failures: none")
    for w in info["warnings"]:
        print(f"warning: {w}")
    return 0
