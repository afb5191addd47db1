"""The library halves of ``debugkit import <kind>``: functions that turn other tools'
files into (parts of) debugkit runs. The command-line halves (argparse ``register`` /
``run``) live in :mod:`debugkit.cli.importers`.

TensorBoard and memory-snapshot imports live with their readers
(:func:`debugkit.io.tensorboard.convert_tensorboard`,
:func:`debugkit.io.run_memsnaps.import_snapshot`).
"""
