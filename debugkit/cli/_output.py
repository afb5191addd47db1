"""Output helpers shared by the sub-commands."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from ..analysis.findings import Check, Finding


def _clean(obj: Any) -> Any:
    if isinstance(obj, (Finding, Check)):  # the result vocabulary, in its documented JSON shape
        return _clean(obj.to_dict())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return _clean(obj.item())
        except (TypeError, ValueError):
            pass
    return obj


def print_json(obj: Any) -> None:
    """Print strict JSON (NaN/Inf become strings; a :class:`Finding` or :class:`Check` its
    ``to_dict()``) to stdout."""
    json.dump(_clean(obj), sys.stdout, indent=2, default=str, allow_nan=False)
    sys.stdout.write("\n")


def print_table(rows: list[dict], columns: list[str]) -> None:
    """Print rows as a plain aligned text table."""
    cells = [[str(r.get(c, "") if r.get(c) is not None else "") for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
