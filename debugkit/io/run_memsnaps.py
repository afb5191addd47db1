"""The memory snapshots of a run: ``memory_snapshots/<id>.pickle`` with a JSON sidecar
``<id>.json`` (see docs/run-format.md). :func:`list_snapshots` lists them;
:func:`import_snapshot` adds one (``debugkit import memory-snapshot``).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from .. import format as fmt
from .._fsutil import atomic_write_json, fsync_dir, is_in_run, sha256_file
from ..errors import InvalidInputError, RunDirError
from ..location import as_path
from ..runschema import read_run_json
from .memsnap import read_snapshot, summarize

MSG_EXISTS = "{path}: a memory snapshot named {name!r} is already in this run"
MSG_BAD_NAME = "snapshot name {name!r}: expected letters, digits, '.', '_' or '-' (at most 100)"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def list_snapshots(run_path: str | os.PathLike) -> list[dict]:
    """The memory snapshots of a run, by rank then step.

    Each record has ``id``, ``path`` (the pickle), ``rank``, ``step``, ``reason``
    (``oom``, ``failure``, ``close``, ``imported``), ``failure`` (a failure capture id or
    None), ``time``, ``size_bytes``, ``source`` plus whatever the sidecar adds. A pickle
    without a sidecar (copied in by hand) is listed with what its name tells.
    """
    d = as_path(run_path) / fmt.MEMORY_SNAPSHOTS_DIR
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.iterdir()):
        if p.name.startswith(".") or not p.name.endswith(fmt.SNAPSHOT_SUFFIX) or not p.is_file() \
                or not is_in_run(run_path, fmt.MEMORY_SNAPSHOTS_DIR, p.name):
            continue  # a snapshot that links out of the run is not listed
        sid = p.name[: -len(fmt.SNAPSHOT_SUFFIX)]
        rec: dict[str, Any] = {}
        meta = d / f"{sid}{fmt.SNAPSHOT_META_SUFFIX}"
        if meta.is_file() and is_in_run(run_path, fmt.MEMORY_SNAPSHOTS_DIR, meta.name):
            try:
                rec = read_run_json(meta, "snapshot sidecar")
            except (OSError, ValueError):
                rec = {}
        m = re.match(r"^r(\d+)-s(\d{7}|-{7})-([a-z]+)", sid)
        rec.setdefault("rank", int(m.group(1)) if m else None)
        rec.setdefault("step", int(m.group(2)) if m and m.group(2).isdigit() else None)
        rec.setdefault("reason", m.group(3) if m else "imported")
        rec.setdefault("failure", None)
        rec.setdefault("time", p.stat().st_mtime)
        rec["id"] = sid
        rec["path"] = str(p)
        rec["size_bytes"] = p.stat().st_size
        out.append(rec)
    out.sort(key=lambda r: (r["rank"] if isinstance(r.get("rank"), int) else 1 << 30,
                            r["step"] if isinstance(r.get("step"), int) else 1 << 62, r["id"]))
    return out


def _create_run_if_missing(run_dir: Path) -> None:
    """A new run for an imported snapshot, as the other importers make one: a missing or
    empty folder gets a minimal manifest (a folder holding other files is left to
    :func:`debugkit.format.read_manifest`, which refuses it)."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    fmt.update_manifest(run_dir, lambda old: old or fmt.minimal_manifest(run_dir))


def import_snapshot(src: str | os.PathLike, run_dir: str | os.PathLike, *, rank: int = 0,
                    step: int | None = None, name: str | None = None) -> dict:
    """Add a snapshot file to a run's ``memory_snapshots/`` (the source is only read).

    The file is checked first (restricted unpickler, snapshot structure); then its bytes
    are copied unchanged under a temporary name and renamed into place, and the JSON
    sidecar is written last.

    Returns
    -------
    dict
        The sidecar record plus ``summary`` (see :func:`summarize`).
    """
    src = Path(src)
    if Path(run_dir).expanduser().is_file():
        raise RunDirError(f"{run_dir}: a zipped run is read-only; unzip it to add a snapshot")
    if not isinstance(rank, int) or rank < 0:
        raise InvalidInputError(f"--rank {rank!r}: expected an integer >= 0")
    if step is not None and (not isinstance(step, int) or step < 0):
        raise InvalidInputError(f"--step {step!r}: expected an integer >= 0")
    snap = read_snapshot(src)  # checked before anything is written
    run_path = Path(run_dir).expanduser()
    _create_run_if_missing(run_path)
    fmt.read_manifest(run_path)  # the format's check: a run this debugkit can read
    if name is None:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", src.name[: -len(src.suffix)] if src.suffix else src.name)
        name = f"r{rank}-imported-{stem.strip('-.') or 'snapshot'}"[:100]
    if not _NAME.match(name):
        raise InvalidInputError(MSG_BAD_NAME.format(name=name))
    d = run_path / fmt.MEMORY_SNAPSHOTS_DIR
    d.mkdir(parents=True, exist_ok=True)
    final = d / f"{name}{fmt.SNAPSHOT_SUFFIX}"
    if final.exists():
        raise InvalidInputError(MSG_EXISTS.format(path=d, name=name))
    tmp = d / f".tmp-{name}-{os.getpid()}{fmt.SNAPSHOT_SUFFIX}"
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(d)
    summary = summarize(snap)
    rec = {"id": name, "rank": rank, "step": step, "reason": "imported", "failure": None,
           "time": time.time(), "source": str(src.resolve()), "size_bytes": final.stat().st_size,
           "sha256": sha256_file(final), "format": snap.format,
           "device": f"cuda:{summary['devices'][0]}" if summary["devices"] else None}
    atomic_write_json(d / f"{name}{fmt.SNAPSHOT_META_SUFFIX}", rec)
    return {**rec, "path": str(final), "summary": summary}
