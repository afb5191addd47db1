"""``debugkit import torch-trace FILE RUN_DIR``: add torch.profiler chrome traces to a run.

FILE is a trace written by ``prof.export_chrome_trace(...)`` or by
``torch.profiler.tensorboard_trace_handler`` (``*.pt.trace.json`` / ``.json.gz``), or a
folder of them (a TensorBoard log dir: each trace file is imported).
"""

from __future__ import annotations

import sys


def register(kinds) -> None:
    p = kinds.add_parser("torch-trace", help="torch.profiler chrome traces (.json / .json.gz)",
                         description=__doc__.split("\n\n")[1])
    p.add_argument("file", metavar="FILE", help="a trace file, or a folder of them")
    p.add_argument("run", metavar="RUN_DIR", help="the run directory (created if missing)")
    p.add_argument("--name", default=None, help="the trace's name in the run (one file only)")
    p.add_argument("--label", default=None, help="a note shown next to it")
    p.set_defaults(func=run)


def run(args) -> int:
    from ...io.importers.torch_trace import import_traces

    entries = import_traces(args.file, args.run, args.name, args.label)
    for e in entries:
        s = e.get("summary") or {}
        print(f"debugkit: imported {e['original_name']} as {e['id']!r} "
              f"({s.get('events', 0):,} events) into {args.run}", file=sys.stderr)
    return 0
