"""``debugkit import memory-snapshot FILE RUN_DIR``: add a PyTorch memory snapshot to a run.

FILE is what ``torch.cuda.memory._dump_snapshot`` wrote (or a pickled
``torch.cuda.memory._snapshot()`` / ``torch.cuda.memory_snapshot()``). It is read with
debugkit's restricted unpickler (plain data only: a file that asks for any class or
function is refused and nothing in it runs), checked to be a snapshot, and copied
unchanged into ``RUN_DIR/memory_snapshots/``. FILE itself is never modified.
"""

from __future__ import annotations


def register(kinds) -> None:
    p = kinds.add_parser("memory-snapshot", help="add a PyTorch CUDA memory snapshot to a run",
                         description=__doc__.split("\n\n")[0])
    p.add_argument("file", help="snapshot pickle (torch.cuda.memory._dump_snapshot)")
    p.add_argument("run_dir", help="the run to add it to")
    p.add_argument("--rank", type=int, default=0, help="rank that recorded it (default 0)")
    p.add_argument("--step", type=int, default=None, help="training step it was taken at")
    p.add_argument("--name", default=None,
                   help="id in the run (default: r<rank>-imported-<file name>)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ...analysis.memory import fmt_bytes
    from ...io.run_memsnaps import import_snapshot
    from .._output import print_json

    rec = import_snapshot(args.file, args.run_dir, rank=args.rank, step=args.step, name=args.name)
    if args.json:
        print_json(rec)
        return 0
    s = rec["summary"]
    print(f"imported {args.file} as {rec['id']} into {args.run_dir}")
    print(f"  format {s['format']}, devices {s['devices'] or '-'}, {s['segments']} segments, "
          f"{fmt_bytes(s['reserved_bytes'])} reserved, {fmt_bytes(s['allocated_bytes'])} allocated")
    print(f"  {s['trace_events']:,} trace events, {s['oom_events']} out-of-memory event(s), "
          f"{s['stacks']:,} distinct stacks")
    return 0
