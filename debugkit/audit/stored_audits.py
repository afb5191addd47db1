"""Stored audits: ``<run>/audits/<id>/``, immutable, with an id derived from the content.

``audit.json`` holds every number (see docs/run-format.md); ``rows.parquet`` the per-row
data the charts draw (SHAP values, feature values, groups, outcomes). The id is the
first 16 hex digits of the SHA-256 of ``audit.json``'s canonical form (sorted keys, no
whitespace, without the ``id`` field), and ``audit.json`` records the SHA-256 of every
other file, so changing any byte of an audit is detected when it is read. An audit is
written into ``audits/.tmp-*`` and renamed into place; its files are made read-only.

A server writes only inside its run store: an audit the dashboard computes of a run
outside the store (a bundled sample, a served folder, a typed path, an ``s3://`` run) is
stored in the team's shared audit store when one is configured
(``DEBUGKIT_AUDIT_STORE``, :mod:`debugkit.audit.audit_store`:
``<audit store>/<key>/<id>/``, seen by every server), else in the server's own store,
under ``<store>/.audits/<key>/<id>/`` (``key``: a digest of the run's location,
:func:`server_audits_dir`); both are read with the run's own audits (:func:`audit_dirs`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
import uuid
from pathlib import Path
from typing import Any

from .._fsutil import MAX_JSON_BYTES, in_run, is_in_run, loads_capped, read_bytes_capped, sha256_file
from ..errors import AuditError, InvalidInputError, OutsideRunError, RunDirError
from ..format import AUDITS_DIR
from ..location import as_path, is_local, open_binary
from ..runschema import check as check_schema
from ..runschema import read_run_json
from . import audit_store

AUDIT_JSON = "audit.json"
ROWS_FILE = "rows.parquet"
AUDIT_FORMAT = "1.0"
ID_LEN = 16
_ID = re.compile(r"^[0-9a-f]{16}$")

MSG_BAD_ID = "audit id {value!r}: expected 16 lowercase hex digits"
MSG_NO_AUDIT = "{run}: no audit with id {id!r} (stored: {known})"
MSG_NO_AUDITS = "{run}: no stored audits (compute one with debugkit.audit.audit_model or on the Audit page)"
MSG_TAMPERED = ("audit {id}: {what} was modified after the audit was stored "
                "(expected sha256 {expected}, found {found}); the audit cannot be trusted")
MSG_UNREADABLE = "audit {id}: {file} is unreadable ({detail})"


def validate_audit_id(value: Any) -> str:
    """Check an audit id's shape (ids arrive in URLs and on command lines)."""
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidInputError(MSG_BAD_ID.format(value=str(value)[:40]))
    return value


def clean_json(obj: Any) -> Any:
    """JSON-able copy: numpy scalars to Python, NaN/Inf to None, tuples to lists."""
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (TypeError, ValueError):
            return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    return str(obj)


def canonical_bytes(doc: dict) -> bytes:
    """The bytes the id is the hash of: ``doc`` without ``id``, sorted keys, compact."""
    body = {k: v for k, v in doc.items() if k != "id"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def content_id(doc: dict) -> str:
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()[:ID_LEN]


def audits_dir(run_dir) -> Path:
    # a run read in place at an fsspec URL is a UPath already: keep it (Path() would fail)
    base = as_path(run_dir)
    return base / AUDITS_DIR


#: The store's folder of audits of runs outside the store.
OVERLAY_DIR = ".audits"


def _is_local(run_dir) -> bool:
    return type(run_dir).__module__.split(".")[0] != "upath" and "://" not in str(run_dir)


def _run_key(run_dir) -> str:
    return audit_store.run_key(run_dir)


def in_store(run_dir, store) -> bool:
    """Whether ``run_dir`` lies inside the run store ``store`` (links resolved)."""
    if not _is_local(run_dir):
        return False
    run, root = os.path.realpath(str(run_dir)), os.path.realpath(str(store))
    return run != root and run.startswith(root.rstrip(os.sep) + os.sep)


def server_audits_dir(run_dir, store):
    """Where a server stores an audit it computes of ``run_dir``: None (the run's own
    ``audits/``) for a run inside ``store``; else the shared audit store's folder of the
    run (``<audit store>/<key>``, when ``DEBUGKIT_AUDIT_STORE`` is configured), else
    ``<store>/.audits/<key>``."""
    if in_store(run_dir, store):
        return None
    shared = audit_store.shared_dir(run_dir)
    if shared is not None:
        return shared
    return Path(store) / OVERLAY_DIR / _run_key(run_dir)


def audit_dirs(run_dir, store=None) -> list:
    """The folders that hold ``run_dir``'s audits, in the order an id is looked up: its
    own ``audits/`` and, for a run outside the run store (``store``, default
    ``$DEBUGKIT_STORE``), the store's folder of audits computed of it there and the
    shared audit store's (``DEBUGKIT_AUDIT_STORE``: one listing of the whole store,
    remembered a while; the run's audits there are fetched in one batch).

    Raises :class:`AuditError` when the shared audit store cannot be listed."""
    if store is None:
        from ..io.served_runs import default_store

        store = default_store()
    out = [audits_dir(run_dir)]
    if in_store(run_dir, store):
        return out
    overlay = Path(store) / OVERLAY_DIR / _run_key(run_dir)
    if overlay.is_dir():
        out.append(overlay)
    root = audit_store.store_root()
    if root is not None:
        key = _run_key(run_dir)
        if key in audit_store.listed(root):
            shared = root / key
            if not is_local(shared):
                from ..objcache import prefetch

                prefetch(shared)  # no request: the store's listing covers it
            out.append(shared)
    return out


def audits_signature(run_dir) -> tuple:
    """What changes when an audit of ``run_dir`` is stored outside the run (a cache key
    for the audits :func:`list_audits` lists): ``(folder, complete audit ids)`` per
    folder other than the run's own."""
    out = []
    for d in audit_dirs(run_dir)[1:]:
        try:
            ids = sorted(p.name for p in d.iterdir() if _ID.match(p.name) and (p / AUDIT_JSON).is_file())
        except OSError:
            ids = []
        out.append((str(d), tuple(ids)))
    return tuple(out)


def write_audit(run_dir, doc: dict, rows, *, base=None) -> Audit:
    """Store an audit; returns it. An identical audit already stored is returned as is.

    ``doc`` gets ``format``, ``files`` (name -> sha256) and ``id``; ``rows`` (a DataFrame)
    is written as ``rows.parquet`` (zstd). ``base``: the folder to store it in (default
    the run's ``audits/``; a server passes :func:`server_audits_dir`'s). In an object
    store the audit is written locally first, then uploaded by :func:`store_audit_folder`
    (its files first, ``audit.json`` last).
    """
    run_dir = as_path(run_dir)
    base = as_path(base) if base is not None else audits_dir(run_dir)
    if not is_local(base):
        with tempfile.TemporaryDirectory(prefix="debugkit-audit-") as staging:
            staged = write_audit(run_dir, doc, rows, base=Path(staging))
            return store_audit_folder(run_dir, staged.path, base)
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".tmp-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        rows_path = tmp / ROWS_FILE
        rows.to_parquet(rows_path, index=False, compression="zstd")
        doc = clean_json(doc)
        doc["format"] = AUDIT_FORMAT
        doc["files"] = {ROWS_FILE: sha256_file(rows_path)}
        doc.pop("id", None)
        aid = content_id(doc)
        doc = {"id": aid, **doc}
        data = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"
        with open(tmp / AUDIT_JSON, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        for p in tmp.iterdir():
            os.chmod(p, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        final = base / aid
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / AUDIT_JSON).is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # the same content is already stored
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load_audit(run_dir, aid, base=base)


def store_audit_folder(run_dir, src, base) -> Audit:
    """Store the audit folder ``src`` (local, as :func:`write_audit` wrote it) in ``base``
    (an object-store folder: the shared audit store's, say) and return it from there. It is
    verified first; an identical audit already stored of the run (same
    ``substance_sha256``) is returned instead of a second copy; else its files are
    uploaded, ``audit.json`` last (:func:`debugkit.audit.audit_store.publish`)."""
    src = Path(src)
    staged = load_audit(run_dir, src.name, base=src.parent)
    same = find_identical(run_dir, str(staged.doc.get("substance_sha256")), base=base)
    if same is not None:
        return same
    base = as_path(base)
    own = str(base).rstrip("/") == str(audits_dir(run_dir)).rstrip("/")
    audit_store.publish(src, base, None if own else run_dir)  # elsewhere: never inside the run
    return load_audit(run_dir, staged.id, base=base)


def find_identical(run_dir, substance_sha256: str, *, base=None) -> Audit | None:
    """A stored audit whose ``substance_sha256`` (everything but who/when) matches
    (among the run's audits, and those in ``base`` when given)."""
    bases = audit_dirs(run_dir) + ([as_path(base)] if base is not None else [])
    for entry in list_audits(run_dir, extra=base):
        if entry.get("substance_sha256") == substance_sha256 and not entry.get("error"):
            for b in bases:
                try:
                    return load_audit(run_dir, entry["id"], base=b)
                except AuditError:
                    continue
    return None


class Audit:
    """A stored audit, verified when loaded.

    Attributes
    ----------
    id : str
    path : Path
        Its folder ``<run>/audits/<id>``.
    doc : dict
        The content of ``audit.json``.
    """

    def __init__(self, path: Path, doc: dict, raw: bytes):
        self.path = as_path(path)
        self.doc = doc
        self._raw = raw
        self._rows = None

    def __repr__(self) -> str:
        return f"Audit({self.id!r}, name={self.name!r}, verdict={self.verdict!r})"

    @property
    def id(self) -> str:
        return self.doc["id"]

    @property
    def name(self) -> str:
        return str(self.doc.get("name") or self.id)

    @property
    def verdict(self) -> str:
        return str(self.doc.get("verdict"))

    @property
    def reasons(self) -> list[str]:
        return list(self.doc.get("reasons") or [])

    def json_bytes(self) -> bytes:
        """``audit.json`` exactly as stored (what "Download JSON" serves)."""
        return self._raw

    @property
    def json_sha256(self) -> str:
        """SHA-256 of :meth:`json_bytes` (printed in the HTML report)."""
        return hashlib.sha256(self._raw).hexdigest()

    @property
    def rows(self):
        """Per-row data: ``row``, ``y_true``, ``y_pred``, ``output``, ``shap:<feature>``,
        ``value:<feature>``, ``group:<attribute>``, ``raw:<attribute>``."""
        if self._rows is None:
            import pandas as pd

            from ..io.decompress import DecompressionLimitError, check_parquet

            try:  # an uploaded audit's rows: refused from the footer if they would inflate past the limits
                check_parquet(self.path / ROWS_FILE)
            except DecompressionLimitError as exc:
                raise AuditError(MSG_UNREADABLE.format(id=self.id, file=ROWS_FILE, detail=exc)) from None
            try:
                with open_binary(in_run(self.path, ROWS_FILE, what="audit file")) as f:
                    self._rows = pd.read_parquet(f)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
                raise AuditError(MSG_UNREADABLE.format(id=self.id, file=ROWS_FILE, detail=exc)) from exc
        return self._rows

    def shap_values(self):
        """DataFrame of SHAP values, one column per feature (in ``doc['features']`` order)."""
        feats = self.doc["shap"]["features"]
        df = self.rows[[f"shap:{f}" for f in feats]]
        df.columns = feats
        return df


def load_audit(run_dir, audit_id: str, *, base=None) -> Audit:
    """Read and verify one stored audit (from ``base`` when given, else from the run's
    :func:`audit_dirs`).

    Raises
    ------
    InvalidInputError
        ``audit_id`` is not of the id form.
    AuditError
        No such audit, or its content no longer matches its id or recorded hashes.
    """
    validate_audit_id(audit_id)
    bases = [as_path(base)] if base is not None else audit_dirs(run_dir)
    try:
        if base is None:  # the run's own audits/ stays inside the run (not a link out)
            in_run(run_dir if hasattr(run_dir, "joinpath") else Path(run_dir), AUDITS_DIR,
                   what="audits folder")
        d = next((in_run(b, audit_id, what="audit") for b in bases
                  if (b / audit_id / AUDIT_JSON).is_file()), bases[0] / audit_id)
        p = in_run(d, AUDIT_JSON, what="audit file")
    except OutsideRunError as exc:
        raise AuditError(str(exc)) from None
    if not p.is_file():
        known = [e["id"] for e in list_audits(run_dir)]
        raise AuditError(MSG_NO_AUDIT.format(run=run_dir, id=audit_id, known=", ".join(known) or "none"))
    try:
        raw = read_bytes_capped(p, MAX_JSON_BYTES, "a JSON file")
        doc = check_schema(loads_capped(raw, p), AUDIT_JSON, p)  # depth capped, every field typed
    except (OSError, ValueError) as exc:
        raise AuditError(MSG_UNREADABLE.format(id=audit_id, file=AUDIT_JSON, detail=exc)) from exc
    if not isinstance(doc, dict) or doc.get("id") != audit_id:
        raise AuditError(MSG_TAMPERED.format(id=audit_id, what="audit.json's id field",
                                             expected=audit_id, found=str(doc.get("id") if isinstance(doc, dict) else None)))
    try:
        found = content_id(doc)
    except ValueError as exc:
        raise AuditError(MSG_UNREADABLE.format(id=audit_id, file=AUDIT_JSON, detail=exc)) from exc
    if found != audit_id:
        raise AuditError(MSG_TAMPERED.format(id=audit_id, what=AUDIT_JSON, expected=audit_id + "...",
                                             found=found + "..."))
    for name, digest in (doc.get("files") or {}).items():
        if "/" in name or name.startswith("."):
            raise AuditError(MSG_UNREADABLE.format(id=audit_id, file=name, detail="bad file name"))
        try:
            fp = in_run(d, name, what="audit file")
        except OutsideRunError as exc:
            raise AuditError(MSG_UNREADABLE.format(id=audit_id, file=name, detail=exc)) from None
        if not fp.is_file():
            raise AuditError(MSG_UNREADABLE.format(id=audit_id, file=name, detail="missing"))
        actual = sha256_file(fp)
        if actual != digest:
            raise AuditError(MSG_TAMPERED.format(id=audit_id, what=name, expected=digest, found=actual))
    return Audit(d, doc, raw)


def list_audits(run_dir, *, extra=None) -> list[dict]:
    """Stored audits of a run, newest first: ``{id, name, created_at, verdict, model,
    substance_sha256, error}`` (``error`` set for an unreadable one; not verified here)."""
    out = []
    entries = []
    own = audits_dir(run_dir)
    for base in audit_dirs(run_dir) + ([as_path(extra)] if extra is not None else []):
        if not base.is_dir() or (base == own and not is_in_run(own.parent, AUDITS_DIR)):
            continue  # the run's audits/ linking out of the run is not read
        try:
            entries += [(d, base != own) for d in base.iterdir()]
        except OSError as exc:
            raise RunDirError(f"{base}: unreadable ({exc})") from exc
    seen = set()
    for d, outside in entries:
        if not d.is_dir() or not _ID.match(d.name) or d.name in seen or not is_in_run(d.parent, d.name):
            continue  # an audit folder linking out of its folder is not listed
        if outside and not (d / AUDIT_JSON).is_file():
            continue  # being uploaded (audit.json comes last), or a torn upload
        seen.add(d.name)
        row = {"id": d.name, "name": d.name, "created_at": None, "verdict": None, "model": None,
               "substance_sha256": None, "error": None}
        try:
            doc = read_run_json(d / AUDIT_JSON, AUDIT_JSON)
            prov = doc.get("provenance") or {}
            row.update(name=doc.get("name") or d.name, created_at=prov.get("created_at"),
                       verdict=doc.get("verdict"), model=(doc.get("model") or {}).get("estimator"),
                       substance_sha256=doc.get("substance_sha256"))
        except (OSError, ValueError, AttributeError) as exc:
            row["error"] = f"unreadable audit.json ({exc})"
        out.append(row)
    out.sort(key=lambda r: (r["created_at"] or "", r["id"]), reverse=True)
    return out


def latest_audit_id(run_dir) -> str:
    entries = [e for e in list_audits(run_dir) if not e["error"]]
    if not entries:
        raise AuditError(MSG_NO_AUDITS.format(run=run_dir))
    return entries[0]["id"]
