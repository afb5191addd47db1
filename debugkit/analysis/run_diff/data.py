"""The data of two runs: the batch spec the Recorder inferred, the datasets' fingerprints,
and the world size and ranks.
"""

from __future__ import annotations

from typing import Any

from .rows import _MISSING, DIFFERS, EQUAL, ONLY_BASE, ONLY_RUN, UNKNOWN, _row


def _spec_fields(spec: dict) -> dict[tuple[str, str], Any]:
    out = {}
    for name, t in (spec.get("tensors") or {}).items():
        if not isinstance(t, dict):
            continue
        for field in ("dtype", "shape", "range", "finite"):
            out[(str(name), field)] = _jsonish(t.get(field))
    return out


def _jsonish(v):
    if isinstance(v, (list, tuple)):
        return [_jsonish(x) for x in v]
    return v


def diff_batch_spec(spec_run: dict | None, spec_base: dict | None) -> dict:
    """The learned batch specs, tensor by tensor: dtype, shape, value range, finiteness.

    Returns ``{"status", "rows", "structure"}``; rows (``tensor, field, run, base,
    status``) for the fields that differ, or all ``unknown`` when a run has no spec.
    """
    if not isinstance(spec_run, dict) or not isinstance(spec_base, dict):
        return {"status": UNKNOWN, "rows": [], "structure": _row(
            "structure", (spec_run or {}).get("structure", _MISSING) if spec_run else _MISSING,
            (spec_base or {}).get("structure", _MISSING) if spec_base else _MISSING)}
    fa, fb = _spec_fields(spec_run), _spec_fields(spec_base)
    rows = []
    for key in sorted(set(fa) | set(fb)):
        a = fa.get(key, _MISSING)
        b = fb.get(key, _MISSING)
        if key not in fa or key not in fb:
            rows.append({"tensor": key[0], "field": key[1], "run": fa.get(key), "base": fb.get(key),
                         "status": ONLY_BASE if key not in fa else ONLY_RUN})
        elif a != b:
            rows.append({"tensor": key[0], "field": key[1], "run": a, "base": b, "status": DIFFERS})
    structure = _row("structure", spec_run.get("structure"), spec_base.get("structure"))
    differs = bool(rows) or structure["status"] == DIFFERS
    return {"status": DIFFERS if differs else EQUAL, "rows": rows, "structure": structure}


def diff_datasets(ds_run: list | None, ds_base: list | None) -> dict:
    """Dataset class, length and fingerprint of each tracked dataset, in order.

    Returns ``{"status", "rows"}``; rows ``dataset, name, run, base, status`` plus
    ``items_differing`` on fingerprint rows (how many of the sampled items differ, when
    both sampled the same indices).
    """
    if not isinstance(ds_run, list) or not isinstance(ds_base, list):
        return {"status": UNKNOWN, "rows": [
            {"dataset": 0, "name": n, "run": None, "base": None, "status": UNKNOWN}
            for n in ("length", "fingerprint")]}
    rows = []
    for i in range(max(len(ds_run), len(ds_base))):
        a = ds_run[i] if i < len(ds_run) else None
        b = ds_base[i] if i < len(ds_base) else None
        for name in ("class", "length", "fingerprint"):
            va = a.get(name, _MISSING) if a else _MISSING
            vb = b.get(name, _MISSING) if b else _MISSING
            va = _MISSING if va is None else va
            vb = _MISSING if vb is None else vb
            row = {"dataset": i, **_row(name, va, vb)}
            if a is None or b is None:
                row["status"] = ONLY_BASE if a is None else ONLY_RUN
            if name == "fingerprint" and a and b and a.get("sampled_indices") == b.get("sampled_indices") \
                    and a.get("item_sha256") and b.get("item_sha256"):
                row["items_differing"] = sum(x != y for x, y in zip(a["item_sha256"], b["item_sha256"]))
                row["items_sampled"] = len(a["item_sha256"])
            rows.append(row)
    return {"status": _worst(r["status"] for r in rows), "rows": rows}


def _worst(statuses) -> str:
    s = set(statuses)
    if s & {DIFFERS, ONLY_RUN, ONLY_BASE}:
        return DIFFERS
    return UNKNOWN if UNKNOWN in s or not s else EQUAL


def diff_topology(run: dict, base: dict) -> dict:
    """World size and ranks (``run``/``base``: ``{"world_size", "ranks", "backend"}``)."""
    def get(d, k):
        return _MISSING if k not in d or (d[k] is None and k != "backend") else d[k]

    rows = [_row(k, get(run, k), get(base, k)) for k in ("world_size", "ranks", "backend")]
    return {"status": _worst(r["status"] for r in rows), "rows": rows}
