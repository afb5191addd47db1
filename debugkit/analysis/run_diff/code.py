"""The model factory's code of two runs: hashes, and a unified diff when both files are
there and unchanged since the run.
"""

from __future__ import annotations

import difflib

from .rows import _MISSING, EQUAL, UNKNOWN, _row


def diff_code(code_run: dict | None, code_base: dict | None,
              text_run: str | None = None, text_base: str | None = None) -> dict:
    """The model factory's file hash and, when both texts are given, a unified diff.

    ``code_*`` are the manifests' ``code.model_factory`` records (``spec, file,
    sha256``); ``text_*`` the files' current contents, given only when they still hash
    to the recorded ``sha256`` (see :func:`debugkit.io.compare_facts.read_code_text`).

    Returns ``{"status", "rows", "diff", "diff_note"}``: rows for ``spec``, ``file`` and
    ``sha256``; ``diff`` the unified diff (base -> run) or None, ``diff_note`` why not.
    """
    ca = code_run if isinstance(code_run, dict) else None
    cb = code_base if isinstance(code_base, dict) else None
    rows = []
    for key in ("spec", "file", "sha256"):
        a = ca.get(key) if ca and ca.get(key) is not None else _MISSING
        b = cb.get(key) if cb and cb.get(key) is not None else _MISSING
        rows.append(_row(key, a, b))
    sha = rows[2]["status"]
    diff, note = None, None
    if sha == EQUAL:
        note = "the model factory files are identical (same SHA-256)"
    elif text_run is None or text_base is None:
        note = ("unknown: a run recorded no model factory file" if sha == UNKNOWN else
                "no diff: a file is no longer at its recorded path or has changed since "
                "the run (its SHA-256 no longer matches)")
    else:
        diff = "".join(difflib.unified_diff(
            text_base.splitlines(keepends=True), text_run.splitlines(keepends=True),
            fromfile=f"base: {cb.get('file')}", tofile=f"run: {ca.get('file')}"))
    return {"status": sha, "rows": rows, "diff": diff, "diff_note": note}
