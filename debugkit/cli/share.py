"""``debugkit share RUN --audit ID [--expires 14d] [--base-url URL]``: a signed read-only link."""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from pathlib import Path

from ..errors import InvalidInputError
from ..location import is_local

DEFAULT_BASE_URL = "http://localhost:8501"
MSG_BASE_FROM_CONFIG = ("debugkit: the link's address {base} is the one Streamlit's settings give "
                        "({source}); if the dashboard is reached at another address (`debugkit ui "
                        "--port N`, a reverse proxy, a public host name), pass --base-url URL or set "
                        "DEBUGKIT_BASE_URL")
#: Addresses a server listens on that a browser cannot open.
_WILDCARD = ("", "0.0.0.0", "::", "[::]")


def register(sub) -> None:
    p = sub.add_parser("share", help="print a signed, expiring read-only link to one audit")
    p.add_argument("run", help="run directory (or the id the dashboard lists it under)")
    p.add_argument("--audit", metavar="ID", required=True, help="the audit to share")
    p.add_argument("--expires", default="14d", help="lifetime: a number and s, m, h, d or w (default 14d)")
    p.add_argument("--base-url", default=None,
                   help="the dashboard's address as reviewers open it (default $DEBUGKIT_BASE_URL, else "
                        "the address Streamlit's settings give: .streamlit/config.toml, STREAMLIT_* "
                        f"variables; {DEFAULT_BASE_URL} when none is set)")
    p.set_defaults(func=run)


def server_run_id(path: Path) -> tuple[str, bool]:
    """The id the dashboard serves ``path`` under, and whether it serves it at all."""
    from ..io.served_runs import find_runs, served_roots

    def place(p) -> str:  # a run in a bucket is its URL; a local one its real path
        return os.path.realpath(p) if is_local(p) else str(p).rstrip("/")

    real = place(path)
    for e in find_runs(served_roots()):
        if place(e.path) == real:
            return e.id, True
    name = path.name
    return (name if re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$", name)
            else re.sub(r"[^A-Za-z0-9._-]", "-", name)[:200]), False


def configured_base_url(cwd: Path | None = None) -> tuple[str, str]:
    """``(base URL, where it came from)``: the address a browser opens the dashboard at,
    as ``streamlit run`` from ``cwd`` would configure it: ``~/.streamlit/config.toml``,
    then ``./.streamlit/config.toml``, then ``STREAMLIT_*`` environment variables
    (``browser.serverAddress``/``serverPort``, else ``server.address``/``port``,
    ``server.baseUrlPath``, ``server.sslCertFile`` for https); Streamlit's defaults
    otherwise (``http://localhost:8501``)."""
    import tomllib

    cwd = Path.cwd() if cwd is None else cwd
    opts: dict[str, object] = {}
    sources = []
    for f in (Path.home() / ".streamlit" / "config.toml", cwd / ".streamlit" / "config.toml"):
        try:
            doc = tomllib.loads(f.read_text())
        except (OSError, ValueError):
            continue
        found = {f"{s}.{k}": v for s in ("server", "browser") for k, v in (doc.get(s) or {}).items()
                 if k in ("address", "port", "baseUrlPath", "sslCertFile", "serverAddress", "serverPort")}
        if found:
            opts.update(found)
            sources.append(str(f))
    for key in ("server.address", "server.port", "server.baseUrlPath", "server.sslCertFile",
                "browser.serverAddress", "browser.serverPort"):
        section, name = key.split(".")
        var = "STREAMLIT_" + section.upper() + "_" + "".join(
            "_" + c if c.isupper() else c.upper() for c in name)
        if os.environ.get(var):
            opts[key] = os.environ[var]
            sources.append(var)
    listen = str(opts.get("server.address") or "")
    host = str(opts.get("browser.serverAddress") or (listen if listen not in _WILDCARD else "localhost"))
    port = opts.get("browser.serverPort") or opts.get("server.port") or 8501
    path = str(opts.get("server.baseUrlPath") or "").strip("/")
    scheme = "https" if opts.get("server.sslCertFile") else "http"
    host = f"[{host}]" if ":" in host and not host.startswith("[") else host
    base = f"{scheme}://{host}:{port}" + (f"/{path}" if path else "")
    return base, ", ".join(sources) or "Streamlit's defaults: none of its settings is set here"


def run(args) -> int:
    from ..audit.share import parse_duration, server_secret, share_link
    from ..audit.stored_audits import load_audit
    from ..io.run import open_run
    from ..io.served_runs import default_roots, resolve_run, served_roots
    from ..location import as_path

    target = as_path(args.run)  # a run in a bucket stays a URL
    if not target.exists() and re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$", args.run):
        target = resolve_run(args.run, served_roots()).path
    run_ = open_run(target)
    if run_.path != run_.source:
        raise InvalidInputError(f"{args.run}: share a run directory the dashboard serves, not a .zip")
    audit = load_audit(run_.path, args.audit)
    seconds = parse_duration(args.expires)
    run_id, served = server_run_id(run_.path)
    base = args.base_url or os.environ.get("DEBUGKIT_BASE_URL")
    note = None
    if not base:
        base, source = configured_base_url()
        note = MSG_BASE_FROM_CONFIG.format(base=base, source=source)
    link, expires_at = share_link(base, run_id, audit.id, expires_in_s=seconds, secret=server_secret())
    print(link)
    when = dt.datetime.fromtimestamp(expires_at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"debugkit: read-only link to audit {audit.id} ({audit.verdict}) of run {run_id!r}, "
          f"valid until {when}", file=sys.stderr)
    if note:
        print(note, file=sys.stderr)
    if not served:
        print(f"debugkit: note: {run_.path} is not under the folders the dashboard serves by default "
              f"({', '.join(str(r) for r in default_roots())}); serve it with `debugkit ui "
              f"{run_.path.parent}`", file=sys.stderr)
    return 0
