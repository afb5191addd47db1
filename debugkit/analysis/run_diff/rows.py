"""Rows every section of a comparison builds: a name, both values and their ``status``
(:data:`STATUSES`); a fact one run did not record is ``unknown``, never ``equal``.
"""

from __future__ import annotations

EQUAL, DIFFERS, UNKNOWN = "equal", "differs", "unknown"
ONLY_RUN, ONLY_BASE = "only in run", "only in base"
STATUSES = (EQUAL, DIFFERS, UNKNOWN, ONLY_RUN, ONLY_BASE)


class _Missing:
    def __repr__(self):
        return "unknown"


_MISSING = _Missing()


def _status(a, b) -> str:
    if a is _MISSING or b is _MISSING:
        return UNKNOWN
    return EQUAL if a == b else DIFFERS


def _row(name: str, a, b, **extra) -> dict:
    return {"name": name, "run": None if a is _MISSING else a,
            "base": None if b is _MISSING else b, "status": _status(a, b), **extra}
