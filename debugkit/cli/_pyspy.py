"""Record py-spy profiles and stack dumps into a run directory.

``record_command`` runs a command under ``py-spy record`` (speedscope by default, with
``--subprocesses`` so DataLoader workers are sampled, and ``--idle`` so the time the
training thread spends waiting, for data above all, is sampled too); ``record_pid``
attaches to a running process; ``dump_process`` takes ``py-spy dump`` of a process and
its Python subprocesses. When py-spy is refused ptrace access, the error says what to
do instead of showing py-spy's output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from .. import format as fmt
from ..errors import InvalidInputError, MissingDependencyError, ProfilerFailedError

YAMA = "/proc/sys/kernel/yama/ptrace_scope"
MSG_PTRACE = (
    "py-spy was not allowed to read {target} (ptrace access refused: {detail!r}). "
    "py-spy needs ptrace rights over the process. Either run debugkit as root (sudo); "
    "or, in a container, start it with `--cap-add SYS_PTRACE` (docker run; `cap_add: "
    "[SYS_PTRACE]` in compose; `securityContext.capabilities.add: [SYS_PTRACE]` in "
    "Kubernetes); or let a user trace its own processes with `sudo sysctl -w "
    "kernel.yama.ptrace_scope=0` (now {scope})."
)
MSG_PYSPY_FAILED = "py-spy {what} failed (exit status {rc}): {detail}"
MSG_NO_PROCESS = "--pid {pid}: no such process"
MSG_NO_OUTPUT = ("py-spy wrote no profile (exit status {rc}){detail}; nothing was stored")
# What py-spy (and the kernel through it) says when ptrace is refused.
PTRACE_PATTERNS = re.compile(
    r"Permission Denied|Operation not permitted|EPERM|os error 1\)|os error 13\)|"
    r"SYS_PTRACE|ptrace", re.I)


def find_pyspy() -> str:
    """The py-spy executable: ``$DEBUGKIT_PY_SPY``, else the ``py-spy`` installed next to
    the interpreter (a virtual environment that is not activated), else on PATH."""
    from .._fsutil import find_executable

    exe = os.environ.get("DEBUGKIT_PY_SPY") or find_executable("py-spy")
    if not exe:
        raise MissingDependencyError("py-spy", "Profiling with py-spy")
    return exe


def pyspy_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "py-spy (version unknown)"


def ptrace_scope() -> str:
    try:
        value = Path(YAMA).read_text().strip()
    except OSError:
        return "not set on this kernel"
    meaning = {"0": "classic: any process of the same user", "1": "restricted: only descendants",
               "2": "admin-only", "3": "no attach"}.get(value, "?")
    return f"kernel.yama.ptrace_scope={value}, {meaning}"


def check_ptrace_refused(output: str, target: str) -> None:
    """Raise the remedy-naming :class:`ProfilerFailedError` when py-spy's output says ptrace
    was refused."""
    m = PTRACE_PATTERNS.search(output or "")
    if m:
        line = next((ln.strip() for ln in output.splitlines() if PTRACE_PATTERNS.search(ln)), m.group(0))
        raise ProfilerFailedError(MSG_PTRACE.format(target=target, detail=line[:200], scope=ptrace_scope()))


def _tail_text(lines) -> str:
    return "\n".join(lines).strip()


class _Tee(threading.Thread):
    """Copy a pipe to our stderr line by line, keeping the last lines."""

    def __init__(self, pipe, keep: int = 200, echo: bool = True):
        super().__init__(daemon=True)
        self.pipe = pipe
        self.lines: deque[str] = deque(maxlen=keep)
        self.echo = echo

    def run(self):
        for raw in iter(self.pipe.readline, b""):
            text = raw.decode("utf-8", errors="replace")
            self.lines.append(text.rstrip("\n"))
            if self.echo:
                try:
                    sys.stderr.write(text)
                    sys.stderr.flush()
                except (OSError, ValueError):
                    pass
        self.pipe.close()


def _pyspy_options(format_name: str, rate: int, subprocesses: bool, idle: bool, native: bool,
                   gil: bool, threads: bool) -> list[str]:
    if format_name not in ("speedscope", "raw"):
        raise InvalidInputError(f"--format {format_name!r}: expected 'speedscope' or 'raw'")
    if not (1 <= int(rate) <= 10_000):
        raise InvalidInputError(f"--rate {rate}: expected 1..10000 samples per second")
    opts = ["--format", format_name, "--rate", str(int(rate))]
    if subprocesses:
        opts.append("--subprocesses")
    if idle:
        opts.append("--idle")
    if native:
        opts.append("--native")
    if gil:
        opts.append("--gil")
    if threads and format_name == "raw":
        opts.append("--threads")
    return opts


def _run_pyspy(cmd: list[str], *, echo: bool, what: str, target: str) -> tuple[int, str, bool]:
    """Run py-spy, teeing its stderr; Ctrl-C lets py-spy finish writing (a second one
    aborts). Returns (exit status, output tail, interrupted)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    tee = _Tee(proc.stdout, echo=echo)
    tee.start()
    interrupted = False
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None

    def on_int(signum, frame):
        nonlocal interrupted
        if interrupted:
            proc.kill()
            raise KeyboardInterrupt
        interrupted = True
        try:
            proc.send_signal(signal.SIGINT)
        except OSError:
            pass

    if previous is not None:
        signal.signal(signal.SIGINT, on_int)
    try:
        rc = proc.wait()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    tee.join(timeout=10)
    return rc, _tail_text(tee.lines), interrupted


def _samples_reported(output: str) -> tuple[int | None, int | None]:
    m = re.search(r"Samples: (\d+) Errors: (\d+)", output or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def record_command(run_dir, command: list[str], *, name: str | None = None, format_name: str = "speedscope",
                   rate: int = 100, subprocesses: bool = True, idle: bool = True, native: bool = False,
                   gil: bool = False, duration: float | None = None, label: str | None = None,
                   echo: bool = True) -> tuple[dict, int]:
    """Run ``command`` under py-spy and store the profile in ``run_dir``.

    The command runs under a small launcher (see :mod:`debugkit.cli._pyspy_child`)
    so its exit status is known; py-spy samples it and its subprocesses.

    Returns
    -------
    (entry, exit_status)
        The manifest entry of the stored profile, and the command's exit status (the
        profile is stored whatever that is: a crashed run's profile is the interesting one).
    """
    from ..io.run_profiles import add_profile

    if not command:
        raise InvalidInputError("debugkit profile: give a command after `--` or --pid PID")
    exe = find_pyspy()
    opts = _pyspy_options(format_name, rate, True, idle, native, gil, True)
    launcher = Path(__file__).with_name("_pyspy_child.py")
    with tempfile.TemporaryDirectory(prefix="debugkit-pyspy-") as tmp:
        out = Path(tmp) / ("profile.json" if format_name == "speedscope" else "profile.txt")
        status = Path(tmp) / "status.json"
        cmd = [exe, "record", *opts, "--output", str(out)]
        if duration:
            cmd += ["--duration", str(int(duration))]
        cmd += ["--", sys.executable, str(launcher), str(status), "--", *command]
        started = time.time()
        rc, tail, interrupted = _run_pyspy(cmd, echo=echo, what="record", target=f"`{command[0]}`")
        st = _read_status(status)
        exit_status = st.get("exit_status")
        if st.get("error"):
            raise ProfilerFailedError(f"debugkit profile: cannot run {command[0]!r}: {st['error']}")
        if not out.is_file() or out.stat().st_size == 0:
            check_ptrace_refused(tail, f"`{' '.join(command)[:80]}`")
            raise ProfilerFailedError(MSG_NO_OUTPUT.format(rc=rc, detail=f": {tail[-400:]}" if tail else ""))
        reported, errors = _samples_reported(tail)
        info = {"tool": pyspy_version(exe), "command": list(command), "pid": st.get("pid"),
                "launcher_pid": st.get("launcher_pid"),
                "exit_status": exit_status, "started_at": started, "ended_at": time.time(),
                "host": socket.gethostname(), "interrupted": interrupted,
                "pyspy": {"format": format_name, "rate_hz": int(rate), "subprocesses": subprocesses,
                          "idle": idle, "native": native, "gil": gil,
                          "samples_reported": reported, "errors_reported": errors}}
        if label:
            info["label"] = label
        entry = add_profile(run_dir, out, format=format_name, name=name, origin="py-spy record", info=info)
    if exit_status is None:
        exit_status = 130 if interrupted else (rc or 1)
    return entry, int(exit_status)


def _read_status(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _check_pid(pid: int) -> None:
    if pid <= 0:
        raise InvalidInputError(f"--pid {pid}: expected a positive process id")
    try:
        os.kill(pid, 0)
    except ProcessLookupError as exc:
        raise InvalidInputError(MSG_NO_PROCESS.format(pid=pid)) from exc
    except PermissionError:
        pass  # it exists; py-spy will say whether it may read it


def process_cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)
    except OSError:
        return ""


def record_pid(run_dir, pid: int, *, duration: float | None = 30, name: str | None = None,
               format_name: str = "speedscope", rate: int = 100, subprocesses: bool = True, idle: bool = True,
               native: bool = False, gil: bool = False, label: str | None = None,
               echo: bool = True) -> dict:
    """Attach py-spy to a running process for ``duration`` seconds (until it exits or
    Ctrl-C when None) and store the profile in ``run_dir``."""
    from ..io.run_profiles import add_profile

    _check_pid(int(pid))
    exe = find_pyspy()
    opts = _pyspy_options(format_name, rate, subprocesses, idle, native, gil, True)
    with tempfile.TemporaryDirectory(prefix="debugkit-pyspy-") as tmp:
        out = Path(tmp) / ("profile.json" if format_name == "speedscope" else "profile.txt")
        cmd = [exe, "record", *opts, "--output", str(out), "--pid", str(int(pid))]
        if duration:
            cmd += ["--duration", str(max(1, int(round(duration))))]
        started = time.time()
        rc, tail, interrupted = _run_pyspy(cmd, echo=echo, what="record", target=f"process {pid}")
        if not out.is_file() or out.stat().st_size == 0:
            check_ptrace_refused(tail, f"process {pid}")
            raise ProfilerFailedError(MSG_NO_OUTPUT.format(rc=rc, detail=f": {tail[-400:]}" if tail else ""))
        reported, errors = _samples_reported(tail)
        info = {"tool": pyspy_version(exe), "command": process_cmdline(int(pid)) or None, "pid": int(pid),
                "exit_status": None, "started_at": started, "ended_at": time.time(),
                "host": socket.gethostname(), "interrupted": interrupted, "duration_s": duration,
                "pyspy": {"format": format_name, "rate_hz": int(rate), "subprocesses": subprocesses, "idle": idle,
                          "native": native, "gil": gil, "samples_reported": reported,
                          "errors_reported": errors}}
        if label:
            info["label"] = label
        return add_profile(run_dir, out, format=format_name, name=name, origin="py-spy record --pid", info=info)


def child_pids(pid: int) -> list[int]:
    """Descendants of ``pid`` (Linux ``/proc``), parents before children."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_bytes()
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        for c in sorted(kids.get(p, [])):
            out.append(c)
            todo.append(c)
    return out


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def dump_process(pid: int, *, subprocesses: bool = True, native: bool = False, locals_: bool = False,
                 timeout: float = 60.0) -> dict:
    """``py-spy dump --json`` of ``pid`` and (with ``subprocesses``) its Python
    descendants, as a debugkit stack dump document
    (``{"format": "debugkit-stacks", "version": 1, "created_at", "host", "pid",
    "processes": [{"pid", "ppid", "cmdline", "threads"}], "errors": {pid: message}}``).
    """
    _check_pid(int(pid))
    exe = find_pyspy()
    pids = [int(pid)] + (child_pids(int(pid)) if subprocesses else [])
    procs, errors = [], {}
    for p in pids:
        cmd = [exe, "dump", "--json", "--pid", str(p)]
        if native:
            cmd.append("--native")
        if locals_:
            cmd.append("--locals")
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            errors[str(p)] = f"py-spy dump did not answer in {timeout:.0f} s"
            continue
        output = (res.stderr or "") + ("\n" + res.stdout if res.returncode else "")
        if res.returncode != 0:
            if p == pids[0]:
                check_ptrace_refused(output, f"process {p}")
                raise ProfilerFailedError(MSG_PYSPY_FAILED.format(what="dump", rc=res.returncode,
                                                            detail=output.strip()[-400:] or "no output"))
            errors[str(p)] = output.strip().splitlines()[0][:200] if output.strip() else f"exit {res.returncode}"
            continue
        try:
            threads = json.loads(res.stdout)
        except ValueError:
            errors[str(p)] = "py-spy printed no JSON"
            continue
        procs.append({"pid": p, "ppid": _ppid(p), "cmdline": process_cmdline(p), "threads": threads})
    if not procs:
        raise ProfilerFailedError(f"py-spy dump of process {pid} gave no stacks: {errors}")
    return {"format": "debugkit-stacks", "version": 1, "created_at": time.time(),
            "host": socket.gethostname(), "pid": int(pid), "processes": procs, "errors": errors}


def find_run_of_pid(pid: int, roots) -> Path | None:
    """The run (under ``roots``) a live process writes to: a rank's heartbeat names this
    host and ``pid`` (or an ancestor of it, for a DataLoader worker)."""
    from ..io.served_runs import find_runs

    host = socket.gethostname()
    chain = {int(pid)}
    p = _ppid(int(pid))
    while p and p > 1 and len(chain) < 64:
        chain.add(p)
        p = _ppid(p)
    for entry in find_runs([Path(r) for r in roots]):
        ranks = entry.path / fmt.RANKS_DIR
        if not ranks.is_dir():
            continue
        for hb in ranks.glob("*/heartbeat.json"):
            try:
                h = json.loads(hb.read_text())
            except (OSError, ValueError):
                continue
            if h.get("host") == host and h.get("pid") in chain:
                return entry.path
    return None
