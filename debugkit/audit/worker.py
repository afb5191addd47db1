"""Compute an audit outside the server process, under a time and a memory limit.

``compute_audit(run_dir, target, settings, bins)`` runs ``python -m debugkit.audit.worker
REQUEST.json`` through the child-process harness (:func:`debugkit.child_harness.run_child`:
its own process group, a wall-clock timeout, an address-space cap, JSON lines on a pipe
of its own). The worker loads the target (whose loader must be in the operator's
``$DEBUGKIT_AUDIT_LOADERS``, checked again here), audits the model and stores the audit
in the run; the parent gets the audit's id back. A loader that hangs, allocates without
bound or crashes is stopped and reported; the dashboard's process never runs it.

Limits, all the operator's (an upload cannot change them): ``$DEBUGKIT_AUDIT_TIMEOUT_S``
(default 600 s), ``$DEBUGKIT_AUDIT_MEMORY_MB`` (the worker's address-space cap, default
4,096 MiB, whatever the machine's memory: the bundled MLP audit needs 3 GiB of address
space for torch, and dies under 2 GiB) and ``$DEBUGKIT_AUDIT_WORKERS`` (audits computed
at once on this machine, default 2): a further request is refused at once with
:data:`MSG_BUSY` (a lock file per slot in the cache folder, so every server process and
session shares the count).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator

from ..errors import AuditError, DebugkitError

DEFAULT_TIMEOUT_S = 600.0
#: The worker's address-space cap when ``$DEBUGKIT_AUDIT_MEMORY_MB`` is unset (MiB).
DEFAULT_MEMORY_MB = 4096
#: Audits computed at once when ``$DEBUGKIT_AUDIT_WORKERS`` is unset.
DEFAULT_WORKERS = 2
MSG_BUSY = ("the server is busy: {limit} audit(s) are being computed already, its limit "
            "(DEBUGKIT_AUDIT_WORKERS); try again in a minute")
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


#: The operator's settings the worker reads (passed in the request, whatever the
#: child's environment holds).
WORKER_SETTINGS = ("DEBUGKIT_AUDIT_LOADERS", "DEBUGKIT_AUDIT_BOUNDS")


def compute_audit(run_dir, target: str, settings: dict, bins: dict | None = None, *,
                  timeout_s: float | None = None, memory_mb: float | None = None,
                  progress: Callable[[float, str], None] | None = None,
                  store_in=None) -> dict:
    """Compute and store one audit of the run's ``target`` in a separate process.

    ``store_in``: the folder to store it in instead of the run's ``audits/`` (a server
    stores the audits of runs outside its store in the store, or in the team's shared
    audit store: :func:`debugkit.audit.stored_audits.server_audits_dir`).

    The worker never holds this process's cloud credentials (:func:`debugkit.child_harness.child_env`
    keeps them here): a run at a URL is given to it as a local copy, and an audit to be
    stored at a URL is written by the worker into a local folder and uploaded from here
    (:func:`debugkit.audit.stored_audits.store_audit_folder`: files first, ``audit.json``
    last). The audit's provenance names the run's own location, not the copy.

    Returns ``{"id", "verdict"}`` of the stored audit. Raises :class:`AuditError` (or
    the worker's own :class:`DebugkitError` message) when it could not be computed, and
    :class:`AuditBusyError` at once when :func:`max_workers` audits are running.
    """
    import tempfile
    from pathlib import Path

    from ..location import as_path, is_local, local_copy
    from .stored_audits import audits_dir, store_audit_folder

    timeout = timeout_s or _limit("DEBUGKIT_AUDIT_TIMEOUT_S", DEFAULT_TIMEOUT_S)
    mb = memory_mb or _limit("DEBUGKIT_AUDIT_MEMORY_MB", DEFAULT_MEMORY_MB)
    cap = int(mb * (1 << 20))
    run = as_path(run_dir)
    dest = as_path(store_in) if store_in is not None else audits_dir(run)
    with contextlib.ExitStack() as stack:
        staging = None
        if not is_local(dest):  # written locally by the worker, uploaded from here
            staging = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="debugkit-audit-")))
        child_run = run if is_local(run) else stack.enter_context(local_copy(run))
        req = {"run_dir": str(child_run), "run_location": str(run_dir), "target": target,
               "settings": settings, "bins": bins or {}, "sys_path": [p for p in sys.path if p],
               "store_in": str(staging if staging is not None else dest) if
               (staging is not None or store_in is not None) else None,
               "settings_env": {k: os.environ[k] for k in WORKER_SETTINGS if k in os.environ}}
        tick = progress
        if staging is not None and progress is not None:
            def tick(frac: float, msg: str) -> None:  # the worker's "Stored" is only staged
                progress(min(frac, 0.99), "Storing the audit" if msg.startswith("Stored audit") else msg)
        out = _run_worker(req, target, timeout, cap, tick)
        if staging is not None and (staging / out["id"]).is_dir():
            audit = store_audit_folder(run_dir, staging / out["id"], dest)
            out = {"id": audit.id, "verdict": audit.verdict}
    return out


def _run_worker(req: dict, target: str, timeout: float, cap: int,
                progress: Callable[[float, str], None] | None) -> dict:
    from ..child_harness import run_child

    def on_progress(msg: str) -> None:
        if progress is not None:
            frac, _, text = msg.partition(" ")
            try:
                progress(float(frac), text)
            except ValueError:
                progress(0.0, msg)

    with audit_slot():  # refused at once ("busy") when every slot is taken
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


class AuditBusyError(AuditError):
    """Every audit slot is taken (``$DEBUGKIT_AUDIT_WORKERS``); try again later."""


def max_workers() -> int:
    """``$DEBUGKIT_AUDIT_WORKERS`` (default :data:`DEFAULT_WORKERS`)."""
    return int(_limit("DEBUGKIT_AUDIT_WORKERS", DEFAULT_WORKERS))


_THREAD_SLOTS: dict[int, threading.BoundedSemaphore] = {}
_THREAD_SLOTS_LOCK = threading.Lock()


@contextlib.contextmanager
def audit_slot() -> Iterator[int]:
    """Hold one of the machine's :func:`max_workers` audit slots, or raise
    :class:`AuditBusyError` at once (it never waits: a visitor is told to try again).

    A slot is an exclusive ``flock`` on ``<cache>/locks/audit-<i>.lock``: shared by every
    session of a server and by every server using that cache folder, and released by the
    kernel if the process dies. Without ``fcntl`` (Windows) a semaphore per process."""
    from .._fsutil import cache_dir

    limit = max_workers()
    try:
        import fcntl
    except ImportError:  # no flock: count this process's audits only
        with _THREAD_SLOTS_LOCK:
            sem = _THREAD_SLOTS.setdefault(limit, threading.BoundedSemaphore(limit))
        if not sem.acquire(blocking=False):
            raise AuditBusyError(MSG_BUSY.format(limit=limit)) from None
        try:
            yield 0
        finally:
            sem.release()
        return
    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(limit):
        f = open(folder / f"audit-{i}.lock", "a")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        try:
            yield i
        finally:
            f.close()  # closing releases the lock
        return
    raise AuditBusyError(MSG_BUSY.format(limit=limit))


def _compute(req: dict, chan) -> dict:
    from . import Auditor
    from .targets import load_target

    for p in reversed(req.get("sys_path") or []):
        if p not in sys.path:
            sys.path.append(p)
    for k, v in (req.get("settings_env") or {}).items():
        if k in WORKER_SETTINGS:  # the operator's, as the server read them
            os.environ[k] = str(v)
    from . import audit_store

    audit_store.keep_out()  # no credentials here: the parent reads and writes the shared store
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
                                group_bins=group_bins, store_in=req.get("store_in"),
                                location=req.get("run_location"), **args)
    return {"id": audit.id, "verdict": audit.verdict}


def main(argv: list[str] | None = None) -> int:
    from ..child_harness import serve

    return serve(_compute, argv, refuse=(DebugkitError,))


if __name__ == "__main__":
    sys.exit(main())
