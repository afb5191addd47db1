"""Signed, expiring, read-only links to one stored audit.

A link is ``<base>/audit?run=<run id>&audit=<audit id>&token=<token>``. The token is
``v1.<expiry>.<signature>``: ``expiry`` in seconds since the epoch (UTC) and
``signature`` the URL-safe base64 of HMAC-SHA256(secret, ``"debugkit-share-v1\\n<run>\\n
<audit>\\n<expiry>"``). Changing the run, the audit or the expiry invalidates the
signature; nothing in the token can be forged without the server's secret.

The secret is, in order: ``$DEBUGKIT_SECRET``; ``DEBUGKIT_SECRET`` (or ``secret`` in a
``[debugkit]`` table) in ``.streamlit/secrets.toml`` of the working directory or the
home directory (Streamlit's own locations); otherwise 32 random bytes generated into
``<store>/.debugkit-secret`` (mode 0600) on first use, which the CLI and the dashboard
of the same store share. Set ``DEBUGKIT_SECRET`` when several servers must accept the
same links. Rotating the secret revokes every link.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets as _secrets
import time
import urllib.parse
from pathlib import Path

from ..errors import InvalidInputError, ShareTokenError
from ..io.served_runs import default_store, validate_run_id
from .audit_store import config_value
from .stored_audits import validate_audit_id

TOKEN_VERSION = "v1"
SECRET_FILE = ".debugkit-secret"
MIN_SECRET_LEN = 16
MAX_EXPIRY_S = 366 * 86400
_TOKEN = re.compile(r"^v1\.(\d{1,12})\.([A-Za-z0-9_-]{43})$")
_DURATION = re.compile(r"^\s*(\d{1,6})\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

MSG_MALFORMED = "this share link's token is malformed (it was cut short or edited)"
MSG_SIGNATURE = ("this share link's token does not match: it was altered, or it is for "
                 "another run or audit")
MSG_EXPIRED = "this share link expired on {when} UTC"
MSG_WEAK_SECRET = ("DEBUGKIT_SECRET is {n} characters long; use at least {min} random "
                   "characters (e.g. python -c 'import secrets; print(secrets.token_hex(32))')")
MSG_DURATION = ("expires={value!r}: expected a number and a unit (s, m, h, d, w), e.g. 14d, "
                "at most 366 days")
MSG_NO_SECRET_FILE = ("{path}: cannot read or create the share secret ({detail}); set "
                      "DEBUGKIT_SECRET to at least 16 random characters")
MSG_BASE_URL = "base URL {value!r}: expected http:// or https:// and a host"


def server_secret(store: str | os.PathLike | None = None) -> bytes:
    """The secret share tokens are signed with (see the module docstring)."""
    env = os.environ.get("DEBUGKIT_SECRET")
    if env:
        if len(env) < MIN_SECRET_LEN:
            raise InvalidInputError(MSG_WEAK_SECRET.format(n=len(env), min=MIN_SECRET_LEN))
        return env.encode()
    value, where = config_value("DEBUGKIT_SECRET", "secret")  # .streamlit/secrets.toml
    if value:
        if len(value) < MIN_SECRET_LEN:
            raise InvalidInputError(MSG_WEAK_SECRET.format(n=len(value), min=MIN_SECRET_LEN)
                                    .replace("DEBUGKIT_SECRET", where, 1))
        return value.encode()
    store = Path(store) if store is not None else default_store()
    path = store / SECRET_FILE
    try:
        return _read_secret_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise InvalidInputError(MSG_NO_SECRET_FILE.format(path=path, detail=exc)) from exc
    value = _secrets.token_hex(32)
    try:
        store.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return _read_secret_file(path)
    except OSError as exc:
        raise InvalidInputError(MSG_NO_SECRET_FILE.format(path=path, detail=exc)) from exc
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
        f.flush()
        os.fsync(f.fileno())
    return value.encode()


def _read_secret_file(path: Path) -> bytes:
    for _ in range(50):
        text = path.read_text().strip()
        if text:
            return text.encode()
        time.sleep(0.01)  # being written by the process that created it
    raise InvalidInputError(f"{path}: the share secret file is empty; delete it to generate a new one")


def _message(run_id: str, audit_id: str, expires_at: int) -> bytes:
    return f"debugkit-share-{TOKEN_VERSION}\n{run_id}\n{audit_id}\n{expires_at}".encode()


def _sign(secret: bytes, run_id: str, audit_id: str, expires_at: int) -> str:
    mac = hmac.new(secret, _message(run_id, audit_id, expires_at), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def make_token(run_id: str, audit_id: str, expires_at: int, secret: bytes) -> str:
    """A token granting read access to one audit of one run until ``expires_at``."""
    validate_run_id(run_id)
    validate_audit_id(audit_id)
    expires_at = int(expires_at)
    return f"{TOKEN_VERSION}.{expires_at}.{_sign(secret, run_id, audit_id, expires_at)}"


def verify_token(token, run_id, audit_id, secret: bytes, now: float | None = None) -> int:
    """Check a token for a run and audit; returns its expiry time.

    Raises
    ------
    ShareTokenError
        Malformed, altered, for another run or audit, or expired (messages
        :data:`MSG_MALFORMED`, :data:`MSG_SIGNATURE`, :data:`MSG_EXPIRED`).
    """
    if not isinstance(token, str) or len(token) > 200:
        raise ShareTokenError(MSG_MALFORMED)
    m = _TOKEN.match(token)
    if not m:
        raise ShareTokenError(MSG_MALFORMED)
    try:
        validate_run_id(run_id)
        validate_audit_id(audit_id)
    except InvalidInputError:
        raise ShareTokenError(MSG_SIGNATURE) from None
    expires_at = int(m.group(1))
    if not hmac.compare_digest(m.group(2), _sign(secret, run_id, audit_id, expires_at)):
        raise ShareTokenError(MSG_SIGNATURE)
    now = time.time() if now is None else now
    if now >= expires_at:
        import datetime as dt

        when = dt.datetime.fromtimestamp(expires_at, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
        raise ShareTokenError(MSG_EXPIRED.format(when=when))
    return expires_at


def parse_duration(value: str) -> int:
    """``"14d"`` -> seconds (units s, m, h, d, w; at most 366 days)."""
    m = _DURATION.match(str(value))
    if not m:
        raise InvalidInputError(MSG_DURATION.format(value=value))
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    if not 0 < seconds <= MAX_EXPIRY_S:
        raise InvalidInputError(MSG_DURATION.format(value=value))
    return seconds


def check_base_url(base_url: str) -> str:
    parts = urllib.parse.urlsplit(str(base_url).strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise InvalidInputError(MSG_BASE_URL.format(value=base_url))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def share_link(base_url: str, run_id: str, audit_id: str, *, expires_in_s: int, secret: bytes,
               now: float | None = None) -> tuple[str, int]:
    """``(link, expires_at)`` for the Audit page of one audit."""
    base = check_base_url(base_url)
    if not 0 < int(expires_in_s) <= MAX_EXPIRY_S:
        raise InvalidInputError(MSG_DURATION.format(value=f"{expires_in_s}s"))
    expires_at = int((time.time() if now is None else now) + int(expires_in_s))
    token = make_token(run_id, audit_id, expires_at, secret)
    query = urllib.parse.urlencode({"run": run_id, "audit": audit_id, "token": token})
    return f"{base}/audit?{query}", expires_at


#: What a shared view leaves out of an audit: who computed it, on which machine, with
#: which command line, and where the run lies on that machine. None of it is needed to
#: read or check the audit; all of it tells a stranger about the recording machine.
SHARED_OMITS = ("provenance.created_by", "provenance.command", "provenance.run.path")


def shared_view(audit):
    """The audit as a share link shows it: :data:`SHARED_OMITS` removed.

    Returns an :class:`~debugkit.audit.stored_audits.Audit` over the redacted document, whose
    JSON (what the shared "Download audit JSON" serves, and whose SHA-256 the shared
    HTML report prints) says what was left out and carries the SHA-256 of the full
    stored ``audit.json`` (``shared_view.full_audit_sha256``), so the owner can show that
    the two correspond.
    """
    import copy
    import json

    from .stored_audits import Audit

    doc = copy.deepcopy(audit.doc)
    for dotted in SHARED_OMITS:
        *parents, leaf = dotted.split(".")
        d = doc
        for p in parents:
            d = d.get(p) if isinstance(d, dict) else None
        if isinstance(d, dict):
            d.pop(leaf, None)
    doc["shared_view"] = {"omitted": list(SHARED_OMITS), "full_audit_sha256": audit.json_sha256}
    raw = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False).encode("utf-8")
    out = Audit(audit.path, doc, raw)
    out._rows = audit._rows
    return out
