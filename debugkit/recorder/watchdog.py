"""The hang watchdog behind ``Recorder(..., hang_timeout_s=S)``.

A daemon thread per rank watches the step in progress. When a step has run longer
than ``S`` seconds, the rank writes a stack dump of every thread into
``ranks/<rank>/hangs/`` and a ``hang`` event, then asks the other ranks to do the same
by dropping a request file into the run's ``hangs/`` folder (every rank's watchdog
polls it): a rank stuck outside a step, in a barrier or a data loader, dumps its
stacks too, so the dashboard can compare where each rank is. Nothing is killed; when
the slow step finishes after all, a ``hang_resolved`` event records how long it took.

Each dump is three files with the same stem ``<segment>-s<step, 7 digits>-<n>``:

- ``.json``: the structured record (see ``docs/run-format.md``), one entry per thread
  with its frames (file, line, function, source line, whether the file belongs to a
  library);
- ``.txt``: ``faulthandler.dump_traceback(all_threads=True)``, which works even when
  the interpreter is in a bad state;
- ``.pyspy.txt``: ``py-spy dump --native`` of the process, where py-spy is installed
  and may attach (root, or ``CAP_SYS_PTRACE``); native frames show where in gloo/NCCL
  the thread waits. Set ``DEBUGKIT_HANG_PYSPY=0`` to skip it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys
import sysconfig
import threading
import time
import traceback
from pathlib import Path

from .._fsutil import atomic_write_json
from ..format import HANG_DUMP, HANG_REQUEST, HANGS_DIR

REQUEST_MAX_AGE_S = 600.0     # older dump requests are ignored
PYSPY_TIMEOUT_S = 20.0
MAX_FRAMES = 200

_LIB_DIRS = tuple({os.path.realpath(p) for p in (
    sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib"),
    sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")) if p})
_HERE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # debugkit/


def is_library_file(filename: str) -> bool:
    """True for frames of the standard library, installed packages and debugkit itself."""
    if not filename or filename.startswith("<"):
        return True
    real = os.path.realpath(filename)
    return real.startswith(_LIB_DIRS) or real.startswith(_HERE) or "site-packages" in real


def thread_stacks(skip_idents=()) -> list[dict]:
    """Every thread's stack, innermost frame last.

    Returns
    -------
    list of ``{"ident", "name", "daemon", "frames": [{"file", "line", "function",
    "code", "library"}]}``.
    """
    names = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        if ident in skip_idents:
            continue
        t = names.get(ident)
        frames = []
        for fs in traceback.extract_stack(frame)[-MAX_FRAMES:]:
            frames.append({"file": fs.filename, "line": fs.lineno, "function": fs.name,
                           "code": (fs.line or "").strip(), "library": is_library_file(fs.filename)})
        out.append({"ident": ident, "name": t.name if t else f"thread-{ident}",
                    "daemon": bool(t.daemon) if t else None, "frames": frames})
    return out


def pyspy_dump(pid: int) -> tuple[str | None, str | None]:
    """``(output, error)`` of ``py-spy dump --native --pid PID``; error says why not."""
    if os.environ.get("DEBUGKIT_HANG_PYSPY", "1") == "0":
        return None, "disabled by DEBUGKIT_HANG_PYSPY=0"
    from .._fsutil import find_executable

    exe = find_executable("py-spy")
    if exe is None:
        return None, "py-spy is not installed (pip install py-spy)"
    try:
        proc = subprocess.run([exe, "dump", "--native", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=PYSPY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"py-spy dump failed: {exc}"
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        return None, ("py-spy dump was refused: " + (msg[-1] if msg else f"exit {proc.returncode}")
                      + " (needs root or CAP_SYS_PTRACE; see kernel.yama.ptrace_scope)")
    return proc.stdout, None


class HangWatchdog:
    """Watches one rank's steps and dumps stacks when a step outlives ``timeout_s``.

    Parameters
    ----------
    run_dir, rank_dir : Path
        The run and this rank's folder.
    rank, segment : int
        This rank and its writer segment (dump names start with the segment).
    timeout_s : float
        A step running longer than this is reported as a hang.
    event : callable
        ``event(kind, **fields)``: appends to the rank's events file.
    """

    def __init__(self, run_dir: Path, rank_dir: Path, *, rank: int, segment: int,
                 timeout_s: float, event):
        self.run_dir = Path(run_dir)
        self.dump_dir = Path(rank_dir) / HANGS_DIR
        self.request_dir = self.run_dir / HANGS_DIR
        self.rank = rank
        self.segment = segment
        self.timeout_s = float(timeout_s)
        self.poll_s = min(1.0, max(0.05, self.timeout_s / 4))
        self._event = event
        self._lock = threading.Lock()
        self._step: int | None = None
        self._t0: float | None = None
        self._wall0: float | None = None
        self._last_step: int | None = None
        self._train_ident: int | None = None
        self._dumped_step: int | None = None
        self._dump_t0: float | None = None
        self._n = 0
        self._stop = threading.Event()
        self._seen = set(self._requests())  # requests from before this writer started
        self._thread = threading.Thread(target=self._loop, name="debugkit-watchdog", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------- training thread
    def step_started(self, step: int) -> None:
        with self._lock:
            self._step, self._t0, self._wall0 = step, time.perf_counter(), time.time()
            self._train_ident = threading.get_ident()

    def step_ended(self, step: int, ok: bool = True) -> None:
        with self._lock:
            dumped = self._dumped_step == step and self._dump_t0 is not None
            elapsed = time.perf_counter() - self._t0 if self._t0 is not None else None
            self._step, self._t0, self._last_step = None, None, step
            self._dumped_step = None
        if dumped:
            self._event("hang_resolved", step=step, elapsed_s=elapsed, ok=ok,
                        timeout_s=self.timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=PYSPY_TIMEOUT_S + 5)

    # ------------------------------------------------------------- watchdog thread
    def _requests(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.request_dir) if n.endswith(".json")]
        except OSError:
            return []

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._check()
            except Exception as exc:  # the watchdog must never break training
                try:
                    self._event("capture_error", message=f"hang watchdog: {type(exc).__name__}: {exc}")
                except Exception:
                    pass

    def _check(self) -> None:
        with self._lock:
            step, t0 = self._step, self._t0
            due = (step is not None and t0 is not None and self._dumped_step != step
                   and time.perf_counter() - t0 > self.timeout_s)
        if due:
            self._request(step)  # first, so the other ranks dump while this one does
            self._dump(reason="timeout", trigger_rank=self.rank)
        for name in self._requests():
            if name in self._seen:
                continue
            self._seen.add(name)
            try:
                req = json.loads((self.request_dir / name).read_text())
            except (OSError, ValueError):
                continue
            if req.get("rank") == self.rank or time.time() - float(req.get("time") or 0) > REQUEST_MAX_AGE_S:
                continue
            self._dump(reason="peer", trigger_rank=req.get("rank"), trigger_step=req.get("step"))

    def _request(self, step: int) -> None:
        self.request_dir.mkdir(parents=True, exist_ok=True)
        name = HANG_REQUEST.format(rank=self.rank, segment=self.segment, step=step)
        self._seen.add(name)
        atomic_write_json(self.request_dir / name, {"rank": self.rank, "step": step, "time": time.time(),
                                                    "timeout_s": self.timeout_s})

    def _dump(self, *, reason: str, trigger_rank, trigger_step=None) -> None:
        with self._lock:
            step, t0, wall0 = self._step, self._t0, self._wall0
            in_step = step is not None
            elapsed = time.perf_counter() - t0 if t0 is not None else None
            if in_step and reason == "timeout":
                self._dumped_step, self._dump_t0 = step, t0
            train_ident, last_step = self._train_ident, self._last_step
            self._n += 1
            n = self._n
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        label = step if in_step else (last_step if last_step is not None else 0)
        stem = HANG_DUMP.format(segment=self.segment, step=label, n=n)
        now = time.time()
        threads = thread_stacks(skip_idents=(threading.get_ident(),))
        with open(self.dump_dir / f"{stem}.txt", "w", encoding="utf-8") as f:
            f.write(f"# debugkit hang dump: rank {self.rank}, "
                    + (f"step {step} running for {elapsed:.1f} s" if in_step
                       else f"between steps (last completed step {last_step})")
                    + f", reason {reason}\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
        files = {"record": f"{stem}.json", "faulthandler": f"{stem}.txt"}
        main = next((t for t in threads if t["ident"] == train_ident), None)
        if main is None:
            main = next((t for t in threads if t["name"] == "MainThread"), None)
        record = {
            "rank": self.rank, "segment": self.segment, "time": now, "reason": reason,
            "trigger_rank": trigger_rank, "trigger_step": trigger_step,
            "in_step": in_step, "step": step, "last_step": last_step,
            "step_started_at": wall0 if in_step else None, "elapsed_s": elapsed,
            "timeout_s": self.timeout_s, "pid": os.getpid(),
            "train_thread": main["ident"] if main else None,
            "threads": threads, "files": files, "pyspy_error": "still running",
        }
        atomic_write_json(self.dump_dir / f"{stem}.json", record)
        where = _stuck_at(main["frames"]) if main else None
        self._event("hang", step=step, last_step=last_step, in_step=in_step, elapsed_s=elapsed,
                    timeout_s=self.timeout_s, reason=reason, trigger_rank=trigger_rank,
                    dump=f"{HANGS_DIR}/{stem}.json", stuck_at=where)
        # py-spy pauses the process for a while (seconds on a busy machine): last.
        pyspy, record["pyspy_error"] = pyspy_dump(os.getpid())
        if pyspy is not None:
            (self.dump_dir / f"{stem}.pyspy.txt").write_text(pyspy, encoding="utf-8")
            files["pyspy"] = f"{stem}.pyspy.txt"
        atomic_write_json(self.dump_dir / f"{stem}.json", record)


def _stuck_at(frames: list[dict]) -> str | None:
    """``function (file:line)`` of the innermost frame of the user's own code."""
    for fr in reversed(frames):
        if not fr.get("library"):
            return f"{fr['function']} ({os.path.basename(fr['file'])}:{fr['line']})"
    if frames:
        fr = frames[-1]
        return f"{fr['function']} ({os.path.basename(fr['file'])}:{fr['line']})"
    return None
