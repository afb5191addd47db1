"""The training config of two runs, flattened to dotted keys and compared key by key.
"""

from __future__ import annotations

from typing import Any

from .rows import DIFFERS, EQUAL, ONLY_BASE, ONLY_RUN, UNKNOWN


def flatten_config(config: dict, prefix: str = "") -> dict[str, Any]:
    """``{"opt": {"lr": 0.1}}`` -> ``{"opt.lr": 0.1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for k, v in (config or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten_config(v, key + "."))
        else:
            out[key] = v
    return out


def diff_config(config_run: dict | None, config_base: dict | None) -> dict:
    """The flattened config keys that differ.

    Returns ``{"status", "rows"}``: ``rows`` of ``name, run, base, status`` (``differs``,
    ``only in run``, ``only in base``) for the differing keys only; ``status`` is
    ``unknown`` when either run recorded no config, else ``equal`` or ``differs``.
    """
    if not isinstance(config_run, dict) or not isinstance(config_base, dict):
        return {"status": UNKNOWN, "rows": []}
    a, b = flatten_config(config_run), flatten_config(config_base)
    rows = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            rows.append({"name": key, "run": a[key], "base": None, "status": ONLY_RUN})
        elif key not in a:
            rows.append({"name": key, "run": None, "base": b[key], "status": ONLY_BASE})
        elif a[key] != b[key]:
            rows.append({"name": key, "run": a[key], "base": b[key], "status": DIFFERS})
    return {"status": DIFFERS if rows else EQUAL, "rows": rows}
