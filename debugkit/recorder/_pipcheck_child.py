"""``python -I .../_pipcheck_child.py RUN_DIR [CACHE_FILE]``: record ``pip check`` in a run.

Started by the Recorder (rank 0, see :mod:`.pipcheck`) as a detached process once the
first steps have run, so the check neither slows the start of training nor dies with a
short script that exits before pip finishes (a daemon thread would). It first drops to
the lowest CPU priority (nice 19) and the idle I/O class, which ``pip`` inherits, then
writes ``env.json`` (``{"pip_check": ...}``) atomically and, when given, the cache file
that lets the next run in an identical environment skip the check. Any failure is
silent (environment facts are best effort).

Standard library only, and run by its path with ``-I``: importing the ``debugkit``
package would cost the child ~0.4 s of CPU before it could lower its priority.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

# ioprio_set(2) has no wrapper in Python's standard library: its syscall number per machine.
_IOPRIO_SET = {"x86_64": 251, "amd64": 251, "aarch64": 30, "arm64": 30, "i386": 289,
               "i686": 289, "ppc64le": 273, "ppc64": 273, "s390x": 282, "riscv64": 30}
_IOPRIO_CLASS_IDLE = 3
_IOPRIO_CLASS_SHIFT = 13
_IOPRIO_WHO_PROCESS = 1


def lower_priority() -> dict[str, int | str | None]:
    """Drop this process (and what it starts) to nice 19 and the idle I/O class.

    Returns ``{"nice": int or None, "io_class": "idle" or None}``: what was applied.
    """
    out: dict[str, int | str | None] = {"nice": None, "io_class": None}
    try:
        cur = os.nice(0)
        out["nice"] = os.nice(19 - cur) if cur < 19 else cur
    except (AttributeError, OSError):
        pass
    nr = _IOPRIO_SET.get(platform.machine().lower())
    if nr is not None and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.syscall(nr, _IOPRIO_WHO_PROCESS, 0,
                            _IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT) == 0:
                out["io_class"] = "idle"
        except (OSError, AttributeError):
            pass
    return out


def pip_check(timeout_s: float = 300.0) -> dict:
    """Run ``pip check``: ``{"ok", "conflicts", "checked_at"}`` (``ok`` None: pip could not run).

    ``conflicts`` holds pip's lines, one per broken requirement.
    """
    started = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
            capture_output=True, text=True, timeout=timeout_s,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"ok": None, "conflicts": [], "error": str(exc), "checked_at": started}
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    ok = proc.returncode == 0
    conflicts = [] if ok else [ln for ln in lines if "No broken requirements" not in ln]
    return {"ok": ok, "conflicts": conflicts, "checked_at": started}


def _atomic_json(path: str, obj) -> None:
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def record(run_dir: str, result: dict) -> None:
    """Merge ``{"pip_check": result}`` into the run's ``env.json`` (atomically)."""
    path = os.path.join(run_dir, "env.json")  # debugkit.format.ENV_FILE
    try:
        with open(path, encoding="utf-8") as f:
            env = json.load(f)
    except (OSError, ValueError):
        env = {}
    env = env if isinstance(env, dict) else {}
    env["pip_check"] = result
    if os.path.isdir(run_dir):
        _atomic_json(path, env)


def main(argv: list[str]) -> int:
    run_dir = argv[0]
    cache_file = argv[1] if len(argv) > 1 and argv[1] else None
    priority = lower_priority()
    result = pip_check()
    result["priority"] = priority
    result["cached"] = False
    record(run_dir, result)
    if cache_file and result["ok"] is not None:  # a failed run of pip is not worth keeping
        try:
            os.makedirs(os.path.dirname(cache_file), exist_ok=True)
            _atomic_json(cache_file, result)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:  # never a traceback in the user's terminal from a background check
        sys.exit(1)
