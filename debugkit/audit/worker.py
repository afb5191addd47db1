"""Compute an audit outside the server process, under a time and a memory limit.

``compute_audit(run_dir, target, settings, bins)`` runs ``python -m debugkit.audit.worker
REQUEST.json`` through the child-process harness (:func:`debugkit.replay.sandbox.run_child`:
its own process group, a wall-clock timeout, an address-space cap, JSON lines on a pipe
of its own). The worker loads the target (whose loader must be in the operator's
``$DEBUGKIT_AUDIT_LOADERS``, checked again here), audits the model and stores the audit
in the run; the parent gets the audit's id back. A loader that hangs, allocates without
bound or crashes is stopped and reported; the dashboard's process never runs it.

Limits: ``$DEBUGKIT_AUDIT_TIMEOUT_S`` (default 600 s) and ``$DEBUGKIT_AUDIT_MEMORY_MB``
(default: half the machine's memory).
"""

from __future__ import annotations

import os
import sys
from typing import Callable

from ..errors import AuditError, DebugkitError

DEFAULT_TIMEOUT_S = 600.0
MSG_TIMEOUT = ("audit target {name!r}: the audit did not finish within {timeout:g} s and was "
               "stopped (DEBUGKIT_AUDIT_TIMEOUT_S)")
MSG_CRASHED = "audit target {name!r}: the audit process stopped without a result: {detail}"
MSG_FAILED = "audit target {name!r}: the audit failed: {type}: {message}"
MSG_BAD_LIMIT = "{name}={value!r}: expected a number > 0"


def _limit(name: str, default: float | None) -> float | None:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    try:
        v = float(value)
    except ValueError:
        v = -1.0
    if not v > 0 or v != v or v == float("inf"):
        raise AuditError(MSG_BAD_LIMIT.format(name=name, value=value[:40]))
    return v


def compute_audit(run_dir, target: str, settings: dict, bins: dict | None = None, *,
                  timeout_s: float | None = None, memory_mb: float | None = None,
                  progress: Callable[[float, str], None] | None = None) -> dict:
    """Compute and store one audit of the run's ``target`` in a separate process.

    Returns ``{"id", "verdict"}`` of the stored audit. Raises :class:`AuditError` (or
    the worker's own :class:`DebugkitError` message) when it could not be computed.
    """
    from ..replay.sandbox import default_memory_cap, run_child

    timeout = timeout_s or _limit("DEBUGKIT_AUDIT_TIMEOUT_S", DEFAULT_TIMEOUT_S)
    mb = memory_mb or _limit("DEBUGKIT_AUDIT_MEMORY_MB", None)
    cap = int(mb * (1 << 20)) if mb else default_memory_cap()
    req = {"run_dir": str(run_dir), "target": target, "settings": settings, "bins": bins or {},
           "sys_path": [p for p in sys.path if p]}

    def on_progress(msg: str) -> None:
        if progress is not None:
            frac, _, text = msg.partition(" ")
            try:
                progress(float(frac), text)
            except ValueError:
                progress(0.0, msg)

    out = run_child(req, timeout_s=timeout, memory_cap_bytes=cap, on_progress=on_progress,
                    cwd=os.getcwd(), module="debugkit.audit.worker")
    if out.status == "ok":
        return out.raw
    if out.status == "refused":
        raise AuditError(out.message)
    if out.status == "timeout":
        raise AuditError(MSG_TIMEOUT.format(name=target, timeout=timeout))
    if out.status == "error":
        first = (out.message or "").splitlines()[0] if out.message else ""
        if out.error_type == "MemoryError":
            first = (f"out of memory under the cap of {cap >> 20} MiB (DEBUGKIT_AUDIT_MEMORY_MB)"
                     if cap else "out of memory")
        raise AuditError(MSG_FAILED.format(name=target, type=out.error_type, message=first))
    raise AuditError(MSG_CRASHED.format(name=target, detail=out.message))


def _compute(req: dict, chan) -> dict:
    from . import Auditor
    from .targets import load_target

    for p in reversed(req.get("sys_path") or []):
        if p not in sys.path:
            sys.path.append(p)
    run_dir = req["run_dir"]
    chan.send("progress", message="0 Loading the model and the data")
    args = load_target(run_dir, req["target"])
    args.pop("candidates", None)
    sens = args["sensitive"]
    names = [sens] if isinstance(sens, str) else list(sens)
    bins = {k: v for k, v in (req.get("bins") or {}).items() if k in names}
    group_bins = {**(args.pop("group_bins", None) or {}), **bins} or None
    auditor = Auditor(req.get("settings") or {},
                      progress=lambda f, msg: chan.send("progress", message=f"{f:.6f} {msg}"))
    audit = auditor.audit_model(args.pop("model"), args.pop("X"), args.pop("y"), run_dir=run_dir,
                                group_bins=group_bins, **args)
    return {"id": audit.id, "verdict": audit.verdict}


def main(argv: list[str] | None = None) -> int:
    from ..replay.sandbox import serve

    return serve(_compute, argv, refuse=(DebugkitError,))


if __name__ == "__main__":
    sys.exit(main())
