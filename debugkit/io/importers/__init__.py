"""Importers that turn other tools' files into (parts of) debugkit runs.

Each importer is a module of this package with ``register(subparsers)``, adding one
``debugkit import <kind> ...`` sub-command; list its name in :data:`IMPORTERS`.
"""

IMPORTERS: list[str] = [
    "tensorboard",
    "memory_snapshot",
    "pyspy",
    "torch_trace",
]
