"""``debugkit import <kind> ...``: the command-line halves of the importers.

Each importer is a module of this package with ``register(subparsers)``, adding one
``debugkit import <kind> ...`` sub-command, and ``run(args)``; list its name in
:data:`IMPORTERS`. What it does to files lives in the library: :mod:`debugkit.io.importers`
(py-spy, torch traces), :mod:`debugkit.io.tensorboard`, :mod:`debugkit.io.run_memsnaps`.
"""

IMPORTERS: list[str] = [
    "tensorboard",
    "memory_snapshot",
    "pyspy",
    "torch_trace",
]
