"""``debugkit ui [PATH ...]``: start the dashboard on those runs or run folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..errors import InvalidInputError
from ..io.store import check_allowed


def register(sub) -> None:
    p = sub.add_parser("ui", help="start the dashboard (default: sample_runs/ and the run store)")
    p.add_argument("paths", nargs="*", help="runs or folders of runs to serve")
    p.add_argument("--port", type=int, default=None, help="port (default: Streamlit's 8501)")
    p.add_argument("--host", default=None, help="address to listen on (default: Streamlit's)")
    p.add_argument("--headless", action="store_true", help="do not open a browser")
    p.set_defaults(func=run)


def app_path() -> Path:
    return Path(__file__).resolve().parents[2] / "app.py"


def run(args) -> int:
    app = app_path()
    if not app.is_file():
        raise InvalidInputError(f"{app}: the dashboard's app.py is missing from this install")
    env = dict(os.environ)
    if args.paths:
        roots = []
        for p in args.paths:
            path = Path(p).expanduser().resolve()
            if not path.exists():
                raise InvalidInputError(f"{p}: no such file or directory")
            check_allowed(path)  # a folder outside DEBUGKIT_ALLOWED_ROOTS is not served
            roots.append(str(path))
        env["DEBUGKIT_ROOTS"] = os.pathsep.join(roots)
    cmd = [sys.executable, "-m", "streamlit", "run", str(app)]
    if args.port:
        cmd += ["--server.port", str(args.port)]
    if args.host:
        cmd += ["--server.address", args.host]
    if args.headless:
        cmd += ["--server.headless", "true"]
    return subprocess.call(cmd, env=env, cwd=str(app.parent))
