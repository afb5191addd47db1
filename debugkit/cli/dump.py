"""``debugkit dump --pid PID [RUN_DIR]``: every thread's stack of a (hung) process."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser(
        "dump", help="take a py-spy dump of every thread of a process (a hung run) into its run",
        description="Take `py-spy dump` of every thread of PID and of its Python subprocesses "
                    "(DataLoader workers), print it, and store it in RUN_DIR as a stack snapshot "
                    "the Profiler page shows. Without RUN_DIR, the run whose heartbeat names PID "
                    "(in the served folders) is used; if there is none, the dump is only printed.")
    p.add_argument("--pid", type=int, required=True, help="process id")
    p.add_argument("run", nargs="?", metavar="RUN_DIR", default=None, help="run directory to store it in")
    p.add_argument("--name", default=None, help="the dump's name in the run (default: dump-<time>)")
    p.add_argument("--native", action="store_true", help="include native (C/C++) frames")
    p.add_argument("--locals", dest="locals_", action="store_true",
                   help="include each frame's local variables (they may hold data: mind who sees the run)")
    p.add_argument("--no-subprocesses", dest="subprocesses", action="store_false",
                   help="only this process, not its children")
    p.add_argument("--json", action="store_true", help="print the dump as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    import tempfile
    import time
    from pathlib import Path

    from ..io.run_profiles import add_profile
    from ..io.served_runs import default_roots
    from ..io.stackdump import read_stack_dump, stack_dump_text
    from ._output import print_json
    from ._pyspy import dump_process, find_run_of_pid

    doc = dump_process(args.pid, subprocesses=args.subprocesses, native=args.native, locals_=args.locals_)
    run_dir = Path(args.run) if args.run else find_run_of_pid(args.pid, default_roots())
    entry = None
    with tempfile.TemporaryDirectory(prefix="debugkit-dump-") as tmp:
        f = Path(tmp) / "stacks.json"
        f.write_text(json.dumps(doc))
        dump = read_stack_dump(f)
        if run_dir is not None:
            entry = add_profile(run_dir, f, format="pyspy-dump",
                                name=args.name or f"dump-{args.pid}-{time.strftime('%Y%m%d-%H%M%S')}",
                                origin="py-spy dump", parsed=dump,
                                info={"pid": args.pid, "locals": bool(args.locals_), "native": bool(args.native),
                                      "command": doc["processes"][0]["cmdline"] or None})
    if args.json:
        print_json(doc)
    else:
        sys.stdout.write(stack_dump_text(dump))
    if entry is not None:
        print(f"debugkit: stored stack dump {entry['id']!r} in {run_dir} -> {entry['file']}", file=sys.stderr)
    else:
        print("debugkit: not stored: no run in the served folders records this process; "
              "pass RUN_DIR to keep it", file=sys.stderr)
    for pid, err in (doc.get("errors") or {}).items():
        print(f"debugkit: process {pid} not dumped: {err}", file=sys.stderr)
    return 0
