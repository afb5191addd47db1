"""``debugkit ui [PATH ...]``: start the dashboard on those runs or run folders.

The dashboard runs in the folder ``debugkit ui`` was started from, exactly as the CLI
does: the default store ``./runs``, ``.streamlit/secrets.toml`` and the share-link
secret (``<store>/.debugkit-secret``) are the same ones ``debugkit share`` uses there,
and nothing is written inside the installed package. The app's own
``.streamlit/config.toml`` (upload cap, XSRF, toolbar) is passed as command-line options,
except where the folder's own config sets them. The process *becomes* Streamlit
(``exec``), so SIGTERM or one Ctrl-C stops the server and frees its port.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..errors import InvalidInputError
from ..io.access import allowed_roots, check_allowed


def register(sub) -> None:
    p = sub.add_parser("ui", help="start the dashboard (default: sample_runs/ and the run store)")
    p.add_argument("paths", nargs="*", help="runs or folders of runs to serve")
    p.add_argument("--port", type=int, default=None, help="port (default: Streamlit's 8501)")
    p.add_argument("--host", default=None, help="address to listen on (default: Streamlit's)")
    p.add_argument("--headless", action="store_true", help="do not open a browser")
    p.add_argument("--share-only", action="store_true",
                   help="serve nothing but valid share links (signed, read-only audit links): "
                        "every other address, page, the run picker and uploads are refused. "
                        "Start it beside the dashboard, from the same folder and on another port, "
                        "and give reviewers its address (same as DEBUGKIT_SHARE_ONLY=1)")
    p.set_defaults(func=run)


def app_path() -> Path:
    return Path(__file__).resolve().parents[2] / "app.py"


def app_config_flags(app: Path, cwd: Path) -> list[str]:
    """``--section.key value`` for each option of the app's ``.streamlit/config.toml``
    that the working directory's own ``.streamlit/config.toml`` does not set."""
    import tomllib

    def load(path: Path) -> dict:
        try:
            return tomllib.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    mine = load(app.parent / ".streamlit" / "config.toml")
    if (cwd / ".streamlit").resolve() == (app.parent / ".streamlit").resolve():
        return []  # started from the checkout: Streamlit reads the file itself
    theirs = load(cwd / ".streamlit" / "config.toml")
    flags = []
    for section, opts in mine.items():
        if not isinstance(opts, dict):
            continue
        for key, value in opts.items():
            if key in (theirs.get(section) or {}):
                continue
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            flags += [f"--{section}.{key}", text]
    return flags


def run(args) -> int:
    from ..io.fs import as_path, is_local

    app = app_path()
    if not app.is_file():
        raise InvalidInputError(f"{app}: the dashboard's app.py is missing from this install")
    from ..audit.audit_store import check as check_audit_store
    from ..io.served_runs import default_store

    # the team's shared audit store (DEBUGKIT_AUDIT_STORE): a wrong URL, a missing bucket
    # or missing credentials are said now, not on the first visitor's Bias audit page
    check_audit_store()
    cwd = Path.cwd()
    env = dict(os.environ)
    # The store as the CLI resolves it here, made absolute for the server.
    env["DEBUGKIT_STORE"] = str((cwd / default_store()).resolve())
    if args.paths:
        roots = []
        for p in args.paths:
            # a URL (s3://bucket/runs) stays a URL: Path() would make it a local "s3:/" folder
            path = as_path(p)
            if is_local(path):
                path = path.resolve()
            elif allowed_roots() is not None:
                # the allow-list is checked as text, before a request goes out; without
                # one, a URL the operator names here is a served (so allowed) root
                check_allowed(path)
            try:
                exists = path.exists()
            except OSError as exc:  # an object store that refuses (credentials, endpoint)
                raise InvalidInputError(f"{p}: cannot be listed ({exc})") from None
            if not exists:
                raise InvalidInputError(f"{p}: no such file or directory")
            if is_local(path):
                check_allowed(path)  # a folder outside DEBUGKIT_ALLOWED_ROOTS is not served
            roots.append(str(path))
        env["DEBUGKIT_ROOTS"] = os.pathsep.join(roots)
    if args.share_only:
        env["DEBUGKIT_SHARE_ONLY"] = "1"  # read by pages/_share.py: share links alone
    # pages/_serve.py: `streamlit run` with the pages' imports done while the server starts.
    cmd = [sys.executable, str(app.parent / "pages" / "_serve.py"), "run", str(app)] + \
        app_config_flags(app, cwd)
    if args.port:
        cmd += ["--server.port", str(args.port)]
    if args.host:
        cmd += ["--server.address", args.host]
    if args.headless:
        cmd += ["--server.headless", "true"]
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execve(sys.executable, cmd, env)  # signals now reach Streamlit itself
    return _call_forwarding_signals(cmd, env)


def _call_forwarding_signals(cmd: list[str], env: dict) -> int:
    """Where there is no ``exec``: run Streamlit as a child and pass SIGTERM/SIGINT on."""
    import signal

    proc = subprocess.Popen(cmd, env=env)

    def forward(signum, _frame):
        proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    return proc.wait()
