"""Read what comparing two runs needs from one run (see :mod:`debugkit.analysis.run_diff`)."""

from __future__ import annotations

import os

from .._fsutil import sha256_file

MAX_CODE_BYTES = 1 << 20  # a model factory file larger than this is not diffed


def read_code_text(code: dict | None) -> str | None:
    """The text of a recorded model factory file, if it is still at its recorded path
    and still hashes to the recorded SHA-256 (else None: a diff of a file that changed
    since the run would be about another file)."""
    if not isinstance(code, dict):
        return None
    path, digest = code.get("file"), code.get("sha256")
    if not isinstance(path, str) or not isinstance(digest, str) or not os.path.isfile(path):
        return None
    try:
        if os.path.getsize(path) > MAX_CODE_BYTES or sha256_file(path) != digest:
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_compare_facts(run) -> dict:
    """Everything :func:`debugkit.analysis.run_diff.compare_runs` reads from one run.

    Returns
    -------
    dict with ``name``, ``path``, ``status``, ``config`` (None when the manifest has
    none), ``env`` (:meth:`Run.env`, None when empty), ``code`` (the manifest's
    ``code.model_factory`` record), ``code_text`` (:func:`read_code_text`),
    ``datasets`` (:meth:`Run.datasets`), ``batch_spec`` (:meth:`Run.batch_spec`),
    ``topology`` (``world_size``, ``ranks``, and ``backend`` when recorded), ``layers``, ``scalars``,
    ``grad_norms`` (DataFrames), ``failures`` (list of dict). The caller adds
    ``findings`` (``debugkit.diagnose.diagnose(run)``).
    """
    m = run.manifest
    code = (m.get("code") or {}).get("model_factory") if isinstance(m.get("code"), dict) else None
    dist = m.get("distributed") if isinstance(m.get("distributed"), dict) else {}
    env = run.env()
    topology = {"world_size": m.get("world_size"), "ranks": run.ranks}
    if isinstance(m.get("distributed"), dict):  # older manifests: backend unknown
        topology["backend"] = dist.get("backend")
    return {
        "name": run.name,
        "path": str(run.path),
        "status": run.status,
        "config": m.get("config") if isinstance(m.get("config"), dict) else None,
        "env": env or None,
        "code": code,
        "code_text": read_code_text(code),
        "datasets": run.datasets(),
        "batch_spec": run.batch_spec(),
        "topology": topology,
        "layers": run.layers(),
        "scalars": run.scalars(),
        "grad_norms": run.grad_norms(),
        "failures": run.failures(),
    }
