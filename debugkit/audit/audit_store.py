"""The team's shared audit store: where every server keeps the audits it computes of runs
outside its own run store, so every server of the team sees them.

A server writes only inside its run store (issue 28): an audit the dashboard computes of
a run it does not own (an ``s3://`` run, a served folder, a bundled sample) is not written
into that run. Without a shared store it goes to the server's own folder
(``<store>/.audits/<key>/``), which no other server reads. With
``DEBUGKIT_AUDIT_STORE=s3://bucket/audits`` (or ``DEBUGKIT_AUDIT_STORE`` / ``audit_store``
in a ``[debugkit]`` table of ``.streamlit/secrets.toml``, where ``DEBUGKIT_SECRET`` is read
from too), every server and the CLI of a team write and read
``<audit store>/<key>/<audit id>/``:

- ``key`` is a digest of the run's location (:func:`run_key`: the URL, or the resolved
  local path), so every server serving the run at the same URL agrees on it;
- an audit's id is content-derived, so two servers writing the same audit write the
  same bytes; the files go first and ``audit.json`` last (:func:`publish`), and a
  reader lists an audit only once its ``audit.json`` is there, so it never sees half an
  audit;
- listing the store is one flat listing of the whole store, remembered for
  ``DEBUGKIT_LISTING_TTL_S`` (:mod:`debugkit.objcache`), and a run's shared audits are
  fetched in one batch into the cache;
- nothing is written outside ``<audit store>/<key>/<audit id>/``; the audit's files
  are read and verified like any stored audit (a malformed or hostile object is an
  :class:`~debugkit.errors.AuditError` naming the audit).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

from ..errors import AuditError, DebugkitError, InvalidInputError
from ..location import as_path, check_path_text, is_local, is_url

ENV = "DEBUGKIT_AUDIT_STORE"
#: The audit folder's descriptor file, written last (``stored_audits.AUDIT_JSON``).
AUDIT_JSON = "audit.json"
MSG_BAD_SETTING = ("{where}={value!r}: expected an object-store URL (s3://bucket/audits) or an "
                   "absolute local folder shared by every server")
MSG_UNREACHABLE = ("{where}={value}: the shared audit store cannot be listed ({detail}); check the "
                   "bucket and its credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                   "AWS_ENDPOINT_URL)")
MSG_NOT_WRITABLE = "{where}={value}: the audit {id} could not be stored there ({detail})"
MSG_INSIDE_RUN = ("{where}={value}: the shared audit store lies inside the run {run}; an audit "
                  "is never written into a run a server does not own")


def config_value(env: str, table_key: str) -> tuple[str | None, str]:
    """A setting of the team's configuration and where it came from: ``$env``, else
    ``env`` (or ``table_key`` in a ``[debugkit]`` table) in ``.streamlit/secrets.toml`` of
    the working directory or the home directory (Streamlit's own locations)."""
    value = os.environ.get(env)
    if value:
        return value, env
    for p in (Path.cwd() / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"):
        if not p.is_file():
            continue
        found = _from_secrets_toml(p, env, table_key)
        if found:
            return found, f"{env} in {p}"
    return None, env


def _from_secrets_toml(path: Path, env: str, table_key: str) -> str | None:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            return None
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, ValueError):
        return None
    value = doc.get(env)
    if value is None and isinstance(doc.get("debugkit"), dict):
        value = doc["debugkit"].get(table_key)
    return str(value) if value else None


_KEPT_OUT = False


def keep_out() -> None:
    """This process never reads or writes the shared store (the audit worker: it holds no
    cloud credentials; its parent stores what it computed)."""
    global _KEPT_OUT
    _KEPT_OUT = True


def configured() -> tuple[str | None, str]:
    """``(the shared audit store's location, where it is configured)``; the location is
    None when none is. Raises :class:`InvalidInputError` for a value that is neither an
    object-store URL nor an absolute local path."""
    if _KEPT_OUT:
        return None, ENV
    value, where = config_value(ENV, "audit_store")
    if value is None:
        return None, where
    value = value.strip()
    try:
        check_path_text(value)
    except InvalidInputError:
        raise InvalidInputError(MSG_BAD_SETTING.format(where=where, value=value[:80])) from None
    if not is_url(value) and not os.path.isabs(os.path.expanduser(value)):
        raise InvalidInputError(MSG_BAD_SETTING.format(where=where, value=value[:80]))
    return value.rstrip("/") or value, where


def store_root():
    """The shared audit store as a path object (``UPath`` or ``Path``), or None."""
    value, _ = configured()
    return None if value is None else as_path(value)


_ALIASES = {"s3a": "s3", "gcs": "gs", "abfs": "az"}


def run_key(run_dir) -> str:
    """The folder name a run's audits have in a store of audits of many runs: a digest of
    the run's location (the URL, with the scheme's aliases and a trailing ``/`` made one;
    for a local run, its resolved path)."""
    text = str(run_dir)
    if type(run_dir).__module__.split(".")[0] != "upath" and "://" not in text:
        where = os.path.realpath(text)
    else:
        scheme, _, rest = text.partition("://")
        scheme = scheme.lower()
        where = f"{_ALIASES.get(scheme, scheme)}://{rest.rstrip('/')}"
    return hashlib.sha256(where.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def shared_dir(run_dir):
    """``<audit store>/<key>`` for ``run_dir``, or None without a shared store."""
    root = store_root()
    return None if root is None else root / run_key(run_dir)


# ---------------------------------------------------------------------------- listing
#: ``{store location: (made, {key: {audit ids with an audit.json}})}``
_LISTED: dict[str, tuple[float, dict[str, set[str]]]] = {}
_LOCK = threading.Lock()


def listed(root) -> dict[str, set[str]]:
    """``{key: {audit ids}}`` of the audits complete in the store (an ``audit.json``
    stored): one flat listing of the whole store, answered again for
    :func:`debugkit.objcache.listing_ttl_s` seconds. :class:`AuditError` when the store
    cannot be listed."""
    from ..objcache import listing_ttl_s

    name = str(root)
    with _LOCK:
        got = _LISTED.get(name)
    if got is not None and time.monotonic() - got[0] < listing_ttl_s():
        return got[1]
    made = time.monotonic()
    try:
        if is_local(root):
            names = [str(p.relative_to(root)) for p in root.glob(f"*/*/{AUDIT_JSON}")] if root.is_dir() else []
        else:
            prefix = root.fs._strip_protocol(root.path).rstrip("/")
            names = [n[len(prefix) + 1:] for n in root.fs.find(prefix) if n.startswith(prefix + "/")]
    except DebugkitError:
        raise
    except Exception as exc:  # noqa: BLE001 - botocore's NoCredentialsError is no OSError
        _, where = configured()
        raise AuditError(MSG_UNREACHABLE.format(where=where, value=name, detail=_short(exc))) from None
    out: dict[str, set[str]] = {}
    for n in names:
        parts = n.split("/")
        if len(parts) == 3 and parts[2] == AUDIT_JSON:
            out.setdefault(parts[0], set()).add(parts[1])
    with _LOCK:
        _LISTED[name] = (made, out)
    return out


def forget(root) -> None:
    """Drop the remembered listing of ``root`` (after this process wrote into it)."""
    with _LOCK:
        _LISTED.pop(str(root), None)


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "…"


def check() -> str | None:
    """Check the configured shared audit store at start-up (``debugkit ui``): its setting
    is well formed, its backend installed, and it can be listed with the credentials at
    hand. Returns its location (None when none is configured); raises a
    :class:`~debugkit.errors.DebugkitError` that says what to fix."""
    value, where = configured()
    if value is None:
        return None
    root = as_path(value)  # MissingDependencyError: pip install 'debugkit[s3]'
    if is_local(root):
        try:
            root.mkdir(parents=True, exist_ok=True)
            if not os.access(root, os.W_OK):
                raise PermissionError("not writable")
        except OSError as exc:
            raise AuditError(MSG_UNREACHABLE.format(where=where, value=value, detail=_short(exc))) from None
    forget(root)
    listed(root)
    return value


# ---------------------------------------------------------------------------- writing
def publish(src: Path, base, run_dir=None) -> None:
    """Copy the audit folder ``src`` (local, complete, verified by the caller) to
    ``base/<src.name>/`` in an object store: its files first, ``audit.json`` last, so
    a reader never lists half an audit. An audit already there (its ``audit.json``
    stored) is left as it is: its id says its content is the same. ``run_dir``: the
    audited run (the store must not lie inside it)."""
    base = as_path(base)
    dest = base / src.name
    if run_dir is not None and not is_local(as_path(run_dir)):
        run = str(run_dir).rstrip("/")
        if str(dest).startswith(run + "/"):
            _, where = configured()
            raise AuditError(MSG_INSIDE_RUN.format(where=where, value=base, run=run))
    fs = dest.fs
    target = fs._strip_protocol(dest.path).rstrip("/")
    try:
        if fs.exists(f"{target}/{AUDIT_JSON}"):
            return
        files = sorted(p.name for p in src.iterdir() if p.is_file() and p.name != AUDIT_JSON)
        for name in files + [AUDIT_JSON]:
            fs.put_file(str(src / name), f"{target}/{name}")
    except DebugkitError:
        raise
    except Exception as exc:  # noqa: BLE001 - the store's own errors (credentials, quota)
        _, where = configured()
        raise AuditError(MSG_NOT_WRITABLE.format(where=where, value=base, id=src.name,
                                                 detail=_short(exc))) from None
    finally:
        forget(base.parent)
        forget(base)
