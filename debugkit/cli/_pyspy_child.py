"""Launcher that ``debugkit profile RUN -- cmd ...`` runs under py-spy.

    python .../_pyspy_child.py STATUS_FILE -- cmd ...

py-spy does not report the exit status of the program it starts, so py-spy starts this
script instead (with ``--subprocesses``): it runs the command, waits, and writes
``{"pid": ..., "exit_status": ...}`` to STATUS_FILE. Its own (idle) thread is dropped
from the profile by the reader. Standard library only, so it runs under any Python.
"""

import json
import os
import signal
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.stderr.write("usage: _pyspy_child.py STATUS_FILE -- cmd ...\n")
        return 2
    status_file, cmd = sys.argv[1], sys.argv[3:]
    # Ctrl-C reaches the whole foreground process group (the command included): let the
    # command handle it and report how it ended. SIGTERM sent to us is passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = subprocess.Popen(cmd, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except OSError as exc:
        sys.stderr.write(f"debugkit profile: cannot run {cmd[0]!r}: {exc}\n")
        _write(status_file, {"pid": None, "exit_status": 127, "error": str(exc)})
        return 127
    signal.signal(signal.SIGTERM, lambda s, f: proc.send_signal(s))
    while True:
        try:
            rc = proc.wait()
            break
        except InterruptedError:
            continue
    _write(status_file, {"pid": proc.pid, "exit_status": rc, "launcher_pid": os.getpid()})
    return rc if rc >= 0 else 128 - rc


def _write(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
