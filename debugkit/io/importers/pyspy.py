"""Add an existing py-spy file to a run (``debugkit import pyspy FILE RUN_DIR``, whose
command-line half is :mod:`debugkit.cli.importers.pyspy`).

FILE is a speedscope JSON (``py-spy record --format speedscope``), raw/collapsed stacks
(``--format raw``) or a ``py-spy dump --json`` output, plain or gzip-compressed.
"""

from __future__ import annotations


def import_pyspy(file, run_dir, name=None, label=None) -> dict:
    from ...errors import ProfileFileError
    from ..profiles import sniff_format
    from ..run_profiles import add_profile

    format_name = sniff_format(file)
    if format_name not in ("speedscope", "raw", "pyspy-dump"):
        raise ProfileFileError(f"{file}: a {format_name} file, not py-spy output; "
                               "use `debugkit import torch-trace` for chrome traces")
    info = {"label": label} if label else {}
    return add_profile(run_dir, file, format=format_name, name=name, origin="import", info=info)

