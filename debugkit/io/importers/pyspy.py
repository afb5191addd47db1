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


def import_pyspy(file, run_dir, name=None, label=None) -> dict:
    from ...errors import ProfileError
    from ..profile_store import add_profile
    from ..profiles import sniff_format

    fmt = sniff_format(file)
    if fmt not in ("speedscope", "raw", "pyspy-dump"):
        raise ProfileError(f"{file}: a {fmt} file, not py-spy output; "
                           "use `debugkit import torch-trace` for chrome traces")
    info = {"label": label} if label else {}
    return add_profile(run_dir, file, format=fmt, name=name, origin="import", info=info)


def run(args) -> int:
    e = import_pyspy(args.file, args.run, args.name, args.label)
    print(f"debugkit: imported {args.file} as {e['id']!r} ({e['format']}) into {args.run}", file=sys.stderr)
    return 0
