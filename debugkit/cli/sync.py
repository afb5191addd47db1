"""``debugkit sync RUN DEST [--every S]``: copy a locally written run to shared storage
or an object store (``s3://``, ``gs://``: any fsspec URL), incrementally."""

from __future__ import annotations

from ._output import print_json


def register(sub) -> None:
    p = sub.add_parser(
        "sync", help="copy a run to shared storage or an object store (incremental)",
        description="Copy the run at RUN to DEST (a path or an fsspec URL such as "
                    "s3://bucket/runs/job-42), uploading only files that changed since the "
                    "last pass; heartbeats go last, so a reader of DEST never sees a run "
                    "marked finished before its rows. With --every, repeat until the run "
                    "has ended, then make a last pass.")
    p.add_argument("run", help="run directory on this machine")
    p.add_argument("dest", help="destination path or fsspec URL")
    p.add_argument("--every", type=float, metavar="S",
                   help="repeat every S seconds until the run is no longer running")
    p.add_argument("--json", action="store_true", help="print the last pass as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..io.sync import sync_run, watch_run

    def report(res):
        if not args.json:
            print(f"synced {len(res.uploaded)} file(s), {res.bytes:,} bytes "
                  f"({res.unchanged} unchanged) -> {args.dest}", flush=True)

    if args.every is not None:
        if args.every <= 0:
            from ..errors import InvalidInputError
            raise InvalidInputError(f"--every {args.every}: expected a number of seconds > 0")
        res = watch_run(args.run, args.dest, args.every, on_pass=report)
    else:
        res = sync_run(args.run, args.dest)
        report(res)
    if args.json:
        print_json({"dest": args.dest, "uploaded": res.uploaded, "bytes": res.bytes,
                    "unchanged": res.unchanged})
    return 0
