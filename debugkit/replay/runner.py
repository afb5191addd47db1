"""Run the replay's child process: timeout, memory cap, progress, crash and hang reports.

The child (:mod:`debugkit.replay.child`) talks over a pipe of its own (JSON lines), so
whatever the user's code prints cannot be mistaken for a result; its stdout and stderr
go to a log file whose tail is kept for the report. The child is its own process group
and is killed with it. A child that dies of a signal (a segfault), exits without a
result, or runs past the timeout is reported as such, with the Python stack that
``faulthandler`` wrote at the moment (at a segfault, or shortly before the timeout).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

#: Default wall-clock limit of one replay (seconds).
DEFAULT_TIMEOUT_S = 120.0
#: How long before the timeout the child dumps its Python stack (seconds).
DUMP_MARGIN_S = 1.5
LOG_TAIL = 4000

PKG_ROOT = Path(__file__).resolve().parents[2]


def default_memory_cap() -> int | None:
    """Half of this machine's physical memory, in bytes (None where unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return None


def cuda_possible() -> bool:
    """Whether an NVIDIA driver is present (then the address-space cap is not applied:
    the CUDA driver reserves far more virtual memory than it uses)."""
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidia0")


@dataclass
class ChildOutcome:
    """What became of one child process.

    ``status`` is ``ok`` (a result came back), ``refused`` (the child refused to run:
    code check, device), ``error`` (setup failed before the step), ``crashed`` (died of
    a signal or exited without a result) or ``timeout``.
    """

    status: str
    raw: dict | None = None
    partial: dict | None = None
    message: str = ""
    error_type: str | None = None
    traceback: str | None = None
    returncode: int | None = None
    signal_name: str | None = None
    seconds: float = 0.0
    stack: str = ""
    log_tail: str = ""
    events: list = field(default_factory=list)


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def run_child(request: dict, *, timeout_s: float = DEFAULT_TIMEOUT_S,
              memory_cap_bytes: int | None = None,
              on_progress: Callable[[str], None] | None = None,
              cwd: str | None = None, extra_env: dict | None = None,
              module: str = "debugkit.replay.child") -> ChildOutcome:
    """Run one replay child for ``request`` and wait at most ``timeout_s`` seconds.

    ``module`` is the child's ``python -m`` module; any module that speaks the same
    JSON-lines protocol (:class:`debugkit.replay.child.Channel`) can be run this way
    (the audit worker, :mod:`debugkit.audit.worker`, is one)."""
    tmp = Path(tempfile.mkdtemp(prefix="debugkit-replay-"))
    rfd, wfd = os.pipe()
    try:
        req = dict(request)
        req.update(fd=wfd, faulthandler_path=str(tmp / "faulthandler.txt"),
                   dump_after_s=max(0.5, timeout_s - DUMP_MARGIN_S) if timeout_s > 2 else None,
                   memory_cap_bytes=memory_cap_bytes)
        (tmp / "request.json").write_text(json.dumps(req, default=str))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        env["PYTHONPATH"] = os.pathsep.join([str(PKG_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.update(extra_env or {})
        log = open(tmp / "child.log", "wb")
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", module, str(tmp / "request.json")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(wfd,),
            env=env, cwd=cwd or str(tmp), start_new_session=True, close_fds=True)
        os.close(wfd)
        wfd = -1
        out = _pump(proc, rfd, t0, timeout_s, on_progress)
        log.close()
        out.seconds = time.monotonic() - t0
        out.log_tail = _tail(tmp / "child.log")
        out.stack = _read(tmp / "faulthandler.txt")
        return out
    finally:
        if wfd >= 0:
            os.close(wfd)
        os.close(rfd)
        shutil.rmtree(tmp, ignore_errors=True)


def _pump(proc, rfd: int, t0: float, timeout_s: float, on_progress) -> ChildOutcome:
    buf = b""
    events: list[dict] = []
    final: dict | None = None
    partial: dict | None = None
    eof = False
    while not eof:
        left = timeout_s - (time.monotonic() - t0)
        if left <= 0:
            _kill(proc)
            o = ChildOutcome(status="timeout", partial=partial, events=events,
                             message=f"the replay did not finish within {timeout_s:g} s and was stopped")
            return o
        ready, _, _ = select.select([rfd], [], [], min(left, 0.5))
        if not ready:
            continue
        chunk = os.read(rfd, 1 << 16)
        if not chunk:
            eof = True
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            events.append({k: v for k, v in ev.items() if k != "raw"})
            kind = ev.get("event")
            if kind == "progress" and on_progress is not None:
                try:
                    on_progress(str(ev.get("message", "")))
                except Exception:  # a broken progress display must not kill the replay
                    pass
            elif kind == "partial":
                partial = ev.get("raw")
            elif kind in ("result", "refused", "internal_error"):
                final = ev
    left = max(0.1, timeout_s - (time.monotonic() - t0))
    try:
        rc = proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return ChildOutcome(status="timeout", partial=partial, events=events,
                            message=f"the replay did not finish within {timeout_s:g} s and was stopped")
    if final is not None and final["event"] == "result":
        return ChildOutcome(status="ok", raw=final.get("raw"), partial=partial, returncode=rc, events=events)
    if final is not None and final["event"] == "refused":
        return ChildOutcome(status="refused", message=final.get("message", ""), partial=partial,
                            error_type=final.get("type"), returncode=rc, events=events)
    if final is not None:
        return ChildOutcome(status="error", message=final.get("message", ""), partial=partial,
                            error_type=final.get("type"), traceback=final.get("traceback"),
                            returncode=rc, events=events)
    if rc < 0:
        name = _signal_name(-rc)
        return ChildOutcome(status="crashed", partial=partial, returncode=rc, signal_name=name,
                            events=events,
                            message=f"the replay process died of {name}" + _SIGNAL_HINTS.get(name, ""))
    return ChildOutcome(status="crashed", partial=partial, returncode=rc, events=events,
                        message=f"the replay process exited with status {rc} without a result")


_SIGNAL_HINTS = {
    "SIGSEGV": " (a segmentation fault: native code read or wrote memory it does not own)",
    "SIGABRT": " (native code aborted, e.g. a failed assertion in a C++ extension)",
    "SIGKILL": " (killed, e.g. by the kernel's out-of-memory killer)",
    "SIGBUS": " (a bus error: bad memory access in native code)",
    "SIGFPE": " (an arithmetic fault in native code)",
    "SIGILL": " (an illegal instruction: a binary built for another CPU)",
}


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL:]
    except OSError:
        return ""


def _tail(path: Path) -> str:
    return _read(path)
