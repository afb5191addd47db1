"""``debugkit import pyspy FILE RUN_DIR``: add an existing py-spy file to a run.

FILE is a speedscope JSON (``py-spy record --format speedscope``), raw/collapsed stacks
(``--format raw``) or a ``py-spy dump --json`` output, plain or gzip-compressed.
"""

from __future__ import annotations

import sys


def register(kinds) -> None:
    p = kinds.add_parser("pyspy", help="a py-spy speedscope, raw or dump file",
                         description=__doc__.split("\n\n")[1])
    p.add_argument("file", metavar="FILE", help="the py-spy output file")
    p.add_argument("run", metavar="RUN_DIR", help="the run directory (created if missing)")
    p.add_argument("--name", default=None, help="the profile's name in the run")
    p.add_argument("--label", default=None, help="a note shown next to it (e.g. 'after the fix')")
    p.set_defaults(func=run)


def run(args) -> int:
    from ...io.importers.pyspy import import_pyspy

    e = import_pyspy(args.file, args.run, args.name, args.label)
    print(f"debugkit: imported {args.file} as {e['id']!r} ({e['format']}) into {args.run}", file=sys.stderr)
    return 0
