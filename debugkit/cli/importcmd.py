"""``debugkit import KIND ...``: bring other tools' files into debugkit runs."""

from __future__ import annotations

import importlib


def register(sub) -> None:
    from .importers import IMPORTERS

    p = sub.add_parser("import", help="import other tools' files (TensorBoard, py-spy, ...)")
    kinds = p.add_subparsers(dest="kind", metavar="KIND")
    for name in IMPORTERS:
        importlib.import_module(f"{__package__}.importers.{name}").register(kinds)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
