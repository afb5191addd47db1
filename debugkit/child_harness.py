"""Run work in a child process under a timeout and a memory cap: both sides of the harness.

The replay's child (:mod:`debugkit.replay.child`) and the audit worker
(:mod:`debugkit.audit.worker`) run this way.

Parent side, :func:`run_child`: it writes the request to a file, starts ``python -m MODULE
REQUEST.json`` as its own process group and reads the child's JSON lines from a pipe of
their own, so whatever the user's code prints cannot be mistaken for a result; the
child's stdout and stderr go to a log file whose tail is kept for the report. A child
that dies of a signal (a segfault), exits without a result, or runs past the timeout is
reported as such, with the Python stack that ``faulthandler`` wrote at the moment (at a
segfault, or shortly before the timeout).

Child side, :func:`serve`: a module's ``main()`` is ``serve(work, argv, refuse=...)``; it
reads the request, applies the limits (address-space cap, no core file, faulthandler),
runs ``work(request, channel)`` and sends ``result`` (exit 0), ``refused`` for the
exceptions in ``refuse`` (exit 3) or ``internal_error`` with the traceback (exit 4).
Progress and partial results go through :class:`Channel`.
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
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: Default wall-clock limit of one replay (seconds).
DEFAULT_TIMEOUT_S = 120.0
#: How long before the timeout the child dumps its Python stack (seconds).
DUMP_MARGIN_S = 1.5
LOG_TAIL = 4000

PKG_ROOT = Path(__file__).resolve().parents[1]

#: The environment variables a child (a replay, an audit worker) inherits; everything
#: else the server's environment holds (cloud credentials, ``DEBUGKIT_SECRET``, tokens,
#: the auth section's secrets passed as variables) stays in the server. Names here, and
#: names starting with one of :data:`CHILD_ENV_PREFIXES` (locale, torch, CUDA, the
#: thread-count knobs of the BLAS libraries).
CHILD_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "LD_LIBRARY_PATH", "PYTHONHOME", "PYTHONNOUSERSITE", "VIRTUAL_ENV", "SYSTEMROOT",
    "OMP_NUM_THREADS", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "TRANSFORMERS_OFFLINE",
    "TRANSFORMERS_CACHE", "HF_DATASETS_OFFLINE",
})
#: ``DEBUGKIT_*`` are the operator's settings (folders, limits, policy), which the child
#: checks again; those whose name says secret, token, password or key never pass.
CHILD_ENV_PREFIXES = ("LC_", "CUDA_", "TORCH_", "PYTORCH_", "NVIDIA_", "CUBLAS_", "CUDNN_",
                      "NCCL_", "MKL_", "OPENBLAS_", "KMP_", "DEBUGKIT_")
_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")


def child_env(extra: dict | None = None, environ=None) -> dict:
    """The scrubbed environment of a child: the allow-listed variables of ``environ``
    (default ``os.environ``), debugkit's own folder first on ``PYTHONPATH`` (then the
    server's), and ``extra``."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items()
           if (k in CHILD_ENV or k.startswith(CHILD_ENV_PREFIXES))
           and not any(w in k.upper() for w in _SECRET_WORDS)}
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PKG_ROOT)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra or {})
    return env


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

    ``module`` is the child's ``python -m`` module; any module whose ``main()`` is
    :func:`serve` can be run this way (the audit worker, :mod:`debugkit.audit.worker`,
    is one)."""
    tmp = Path(tempfile.mkdtemp(prefix="debugkit-replay-"))
    rfd, wfd = os.pipe()
    try:
        req = dict(request)
        req.update(fd=wfd, faulthandler_path=str(tmp / "faulthandler.txt"),
                   dump_after_s=max(0.5, timeout_s - DUMP_MARGIN_S) if timeout_s > 2 else None,
                   memory_cap_bytes=memory_cap_bytes)
        (tmp / "request.json").write_text(json.dumps(req, default=str))
        env = child_env(extra_env)
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


# --------------------------------------------------------------------------- child side
class Channel:
    """JSON lines to the parent."""

    def __init__(self, fd: int | None):
        self.f = os.fdopen(fd, "w", buffering=1) if fd is not None else None

    def send(self, event: str, **payload) -> None:
        if self.f is None:
            return
        self.f.write(json.dumps({"event": event, **payload}, default=str) + "\n")
        self.f.flush()


def set_limits(req: dict) -> None:
    """No core file, and the request's address-space cap (``memory_cap_bytes``)."""
    import resource

    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a segfault leaves no core file
    except (ValueError, OSError):
        pass
    cap = req.get("memory_cap_bytes")
    if cap:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = int(cap) if hard == resource.RLIM_INFINITY else min(int(cap), hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def _enable_faulthandler(req: dict) -> None:
    fh_path = req.get("faulthandler_path")
    if fh_path:
        import faulthandler

        fh = open(fh_path, "w")
        faulthandler.enable(file=fh, all_threads=True)
        if req.get("dump_after_s"):
            faulthandler.dump_traceback_later(float(req["dump_after_s"]), exit=False, file=fh)


def serve(work: Callable[[dict, Channel], dict], argv: list[str] | None = None, *,
          refuse: Sequence[type[BaseException]] = (), faulthandler: bool = True) -> int:
    """The child's ``main()``: read the request ``argv[0]``, run ``work(request, channel)``
    and report its result to the parent; returns the exit status (0, 3 refused, 4 error).

    ``refuse``: exception types that mean "will not run this" (sent as ``refused`` with
    the message); anything else is an ``internal_error`` with its traceback.
    ``faulthandler``: honour the request's ``faulthandler_path`` and ``dump_after_s``.
    """
    argv = sys.argv[1:] if argv is None else argv
    req = json.loads(Path(argv[0]).read_text())
    set_limits(req)
    chan = Channel(req.get("fd"))
    if faulthandler:
        _enable_faulthandler(req)
    try:
        raw = work(req, chan)
    except tuple(refuse) as exc:
        chan.send("refused", type=type(exc).__name__, message=str(exc))
        return 3
    except BaseException as exc:  # report anything the work itself could not survive
        chan.send("internal_error", type=type(exc).__name__, message=str(exc),
                  traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20000:])
        return 4
    chan.send("result", raw=raw)
    return 0
