"""The replay report assembled: the checks' culprit, a crash's last frame, the partial
results of a child that died, and the one-line summary.
"""

from __future__ import annotations

import re
from typing import Any

from .checks import build_checks, pick_culprit, public_checks
from .outcome import EXITED_TYPE, TIMEOUT_TYPE, is_request, judge, original_of, replay_of


def crash_of(outcome) -> dict | None:
    """``{"type", "message", "seconds"}`` for a child that crashed or hung, else None."""
    if outcome.status not in ("crashed", "timeout"):
        return None
    where = last_frame(outcome.stack)
    if outcome.status == "timeout":
        typ = TIMEOUT_TYPE
    else:
        typ = outcome.signal_name or EXITED_TYPE
    msg = outcome.message + (f"; it was at {where}" if where else "")
    return {"type": typ, "message": msg, "seconds": round(outcome.seconds, 3)}


_FH_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def last_frame(stack: str) -> str | None:
    """The innermost project frame of a faulthandler dump (``file:line in func``).

    faulthandler prints each thread's frames innermost first, the current thread first;
    frames of the standard library, installed packages and debugkit's replay are
    skipped when a project frame exists.
    """
    if not stack:
        return None
    from ..code import classify_location

    blocks = [b for b in stack.split("\n\n") if _FH_FRAME.search(b)]
    current = next((b for b in blocks if "Current thread" in b), blocks[0] if blocks else "")
    frames = [m for m in _FH_FRAME.finditer(current)]
    if not frames:
        return None
    def text(m):
        return f"{m.group('file')}:{m.group('line')} in {m.group('func')}"
    for m in frames:
        path = m.group("file").replace("\\", "/")
        if "/debugkit/replay/" in path or path.startswith("<"):
            continue
        if classify_location(m.group("file")) == "project":
            return text(m)
    return text(frames[0])


def build_report(record: dict, raw: dict | None, *, device: str, crash: dict | None = None,
                 code: list[dict] | None = None, cross_check: dict | None = None,
                 notes: list[str] | None = None) -> dict:
    """The replay report (see the module docstring)."""
    original = original_of(record)
    replay = replay_of(raw, crash)
    if replay is not None and isinstance(replay.get("seconds"), float):
        replay["seconds"] = round(replay["seconds"], 4)
    reproduced, same = judge(record, original, replay, raw)
    checks = build_checks(raw, record)
    culprit = pick_culprit(checks, raw, record)
    positions = culprit.pop("_positions", [])
    if cross_check is not None and all(v is None for v in culprit.values()) \
            and any(v is not None for v in (cross_check.get("culprit") or {}).values()):
        culprit = dict(cross_check["culprit"])
        culprit["detail"] = (culprit.get("detail") or "") + " (found by the CPU cross-check)"
        positions = cross_check.get("culprit_positions") or []
    report = {
        "failure": record.get("id"),
        "device": (raw or {}).get("device") or device,
        "reproduced": reproduced,
        "same_error": same,
        "original": original,
        "replay": replay,
        "culprit": culprit,
        "checks": public_checks(checks),
        "culprit_positions": positions,
        "ran": (raw or {}).get("ran"),
        "cross_check": cross_check,
        "code": code or [],
        "notes": list(notes or []),
    }
    if is_request(record):
        from ..request import request_section

        report["request"] = request_section(record, raw, report, cross_check)
    return report


def merge_partial(raw: dict | None, partial: dict | None) -> dict | None:
    """The best observations available: the full result, else what came before a crash."""
    return raw if raw is not None else partial


def summarize(report: dict) -> Any:
    """One line for a terminal: what happened and the culprit."""
    r = report
    rep = r.get("replay")
    head = (f"{r['failure']} on {r['device']}: "
            + ("reproduced" if r["reproduced"] else "not reproduced")
            + (" (same error)" if r["same_error"] else ""))
    if rep:
        head += f"; replay: {rep['type']}: {(rep.get('message') or '').splitlines()[0] if rep.get('message') else ''}"
    return head
