"""The run directory format (see ``docs/run-format.md``): its names and its one writer.

This module is the single place where the on-disk layout is named (every file and
folder name, the segment file names) and the one place that writes ``manifest.json``
(:func:`update_manifest`, under a lock) and checks it (:func:`read_manifest`). The
recorder, the importers and the profile store write through it; :mod:`debugkit.io`
reads what it describes. It imports nothing heavy (pyarrow is imported by the
functions that build schemas) and nothing above the base layer.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._fsutil import atomic_write_json, read_json
from .errors import (
    MSG_BAD_MANIFEST,
    MSG_BAD_VERSION,
    MSG_NEWER_MAJOR,
    MSG_NO_SUCH_PATH,
    MSG_NOT_A_RUN,
    FileLimitError,
    RunDirError,
    SchemaVersionError,
)
from .runschema import check

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 3
SCHEMA_VERSION = f"{SCHEMA_MAJOR}.{SCHEMA_MINOR}"

MANIFEST = "manifest.json"
ENV_FILE = "env.json"
# The datasets a run trained on: length and a fingerprint of sampled items (rank 0).
DATA_FILE = "data.json"
# A failure capture's batch_spec.json, and ranks/<rank>/batch_spec-<seg>.json: the spec a
# rank's writer session learned from its healthy batches, written at close.
BATCH_SPEC_FILE = "batch_spec.json"
RANK_BATCH_SPEC = "batch_spec-{segment:03d}.json"
RANKS_DIR = "ranks"
FAILURES_DIR = "failures"
# ranks/<rank>/meta-<seg>.json: who wrote a segment (rank, host, pid, device, layers).
RANK_META = "meta-{segment:03d}.json"
HEARTBEAT = "heartbeat.json"
FAILURE_JSON = "failure.json"
# PyTorch memory snapshots: memory_snapshots/<id>.pickle + <id>.json (see docs/run-format.md).
MEMORY_SNAPSHOTS_DIR = "memory_snapshots"
SNAPSHOT_SUFFIX = ".pickle"
SNAPSHOT_META_SUFFIX = ".json"
# Profiles, traces and stack dumps: profiles/<id><ext>, listed in manifest.json's
# "profiles" field (see docs/run-format.md).
PROFILES_DIR = "profiles"
PROFILES_FIELD = "profiles"
# ranks/<rank>/hangs/ (the watchdog's stack dumps) and <run>/hangs/ (dump requests).
HANGS_DIR = "hangs"
# ranks/<rank>/hangs/<seg>-s<step>-<n>.{json,txt,pyspy.txt}: one hang dump (a stem).
HANG_DUMP = "{segment:03d}-s{step:07d}-{n}"
HANG_DUMP_FILE = re.compile(r"^(?P<seg>\d+)-s(?P<step>\d+)-(?P<n>\d+)\.json$")
# <run>/hangs/r<rank>-<seg>-s<step>.json: a rank's request that its peers dump too.
HANG_REQUEST = "r{rank}-{segment:03d}-s{step:07d}.json"
# ranks/<rank>/fatal-<seg>.txt: the stacks faulthandler wrote when a signal killed a rank.
FATAL_FILE = "fatal-{segment:03d}.txt"
FATAL_FILE_RE = re.compile(r"^fatal-(?P<seg>\d+)\.txt$")
# checkpoints/index.json + checkpoints/<step:09d>/ (see debugkit.checkpoints).
CHECKPOINTS_DIR = "checkpoints"
# audits/<id>/audit.json (see debugkit.audit.stored_audits).
AUDITS_DIR = "audits"
# traces/: per-rank torch.profiler traces (see debugkit.io.rank_traces).
TRACES_DIR = "traces"

# Per-rank tables: ranks/<rank>/<table>-<segment>.arrows (Arrow IPC streams).
TABLES = ("scalars", "grads", "memory", "steps", "layers", "requests")

# The manifest's "kind" (format 1.2): a training run (the field absent, or "training"),
# or an inference run recorded by debugkit.serve (per-request rows in the "requests" table).
KIND_TRAINING = "training"
KIND_INFERENCE = "inference"
RUN_KINDS = (KIND_TRAINING, KIND_INFERENCE)
# A request's outcome in the "requests" table, and its memory counter.
REQUEST_OUTCOMES = ("ok", "error", "nonfinite", "fallback")
MEM_KINDS = ("cuda_allocated", "rss")
TABLE_SUFFIX = ".arrows"
EVENTS_PREFIX = "events"
EVENTS_SUFFIX = ".jsonl"
#: A rank's segment file: ``<table or "events">-<segment>.arrows|.jsonl``. Each writer
#: session (a process, or a resumed job) appends to its own segment.
SEGMENT_FILE = re.compile(r"^(?P<table>[a-z]+)-(?P<seg>\d+)(?P<suffix>\.arrows|\.jsonl)$")
#: A rank's ``meta-<segment>.json``.
META_FILE = re.compile(r"^meta-(?P<seg>\d+)\.json$")

TOTAL_LAYER = "__total__"

# Run states written by the recorder into heartbeat.json. The reader adds "crashed".
STATE_RUNNING = "running"
STATE_FINISHED = "finished"
STATE_FAILED = "failed"
STATE_CRASHED = "crashed"
STATUSES = (STATE_RUNNING, STATE_FINISHED, STATE_FAILED, STATE_CRASHED)

# A running writer whose heartbeat is older than this many flush intervals (and at
# least HEARTBEAT_MIN_STALE_S seconds) is taken as gone.
HEARTBEAT_STALE_FLUSHES = 5
HEARTBEAT_MIN_STALE_S = 15.0


def table_schema(table: str):
    """Return the pyarrow schema of one per-rank table.

    Parameters
    ----------
    table : str
        One of :data:`TABLES`.
    """
    import pyarrow as pa

    schemas = {
        "scalars": pa.schema(
            [
                ("step", pa.int64()),
                ("key", pa.string()),
                ("value", pa.float64()),
                ("wall_time", pa.float64()),
            ]
        ),
        "grads": pa.schema(
            [
                ("step", pa.int64()),
                ("layer_id", pa.int32()),
                ("grad_norm", pa.float64()),
            ]
        ),
        "memory": pa.schema(
            [
                ("step", pa.int64()),
                ("wall_time", pa.float64()),
                ("device", pa.string()),
                ("allocated_bytes", pa.int64()),
                ("reserved_bytes", pa.int64()),
                ("peak_bytes", pa.int64()),
                ("rss_bytes", pa.int64()),
            ]
        ),
        # Layer statistics of sampled steps (format 1.1; Recorder(layer_stats_every=N)).
        "layers": pa.schema(
            [
                ("step", pa.int64()),
                ("order", pa.int32()),
                ("module", pa.string()),
                ("module_type", pa.string()),
                ("stat", pa.string()),
                ("value", pa.float64()),
            ]
        ),
        "steps": pa.schema(
            [
                ("step", pa.int64()),
                ("wall_time", pa.float64()),
                ("step_time_s", pa.float64()),
                ("data_wait_s", pa.float64()),
                ("comm_s", pa.float64()),
                ("ok", pa.bool_()),
            ]
        ),
        # One row per request of an inference run (format 1.2; debugkit.serve).
        "requests": pa.schema(
            [
                ("request", pa.int64()),
                ("wall_time", pa.float64()),
                ("latency_ms", pa.float64()),
                ("outcome", pa.string()),
                ("fallback", pa.string()),
                ("error_type", pa.string()),
                ("signature", pa.string()),
                ("input_numel", pa.int64()),
                ("mem_before_bytes", pa.int64()),
                ("mem_after_bytes", pa.int64()),
                ("mem_kind", pa.string()),
                ("device", pa.string()),
                ("failure_id", pa.string()),
                ("route", pa.string()),
            ]
        ),
    }
    return schemas[table]


# ---------------------------------------------------------------------------- segments
def segment_name(table: str, segment: int) -> str:
    """The file name of one segment of a rank's table (``steps-000.arrows``) or of its
    event log (``events-000.jsonl`` for ``table=EVENTS_PREFIX``)."""
    suffix = EVENTS_SUFFIX if table == EVENTS_PREFIX else TABLE_SUFFIX
    return f"{table}-{segment:03d}{suffix}"


def next_segment(rank_dir: Path) -> int:
    """The first segment number not used by any table or event file in ``rank_dir``."""
    used = [-1]
    for p in rank_dir.iterdir() if rank_dir.exists() else ():
        m = SEGMENT_FILE.match(p.name)
        if m:
            used.append(int(m.group("seg")))
    return max(used) + 1


# ---------------------------------------------------------------------------- manifest
#: Refusals of :func:`update_manifest` when the existing manifest cannot be kept.
MSG_UPDATE_BAD_JSON = "{path}: manifest.json is not valid JSON ({detail}); not {action}"
MSG_UPDATE_NOT_OBJECT = "{path}: manifest.json is not a JSON object; not {action}"

# Upgrade steps for older minor versions of the current major: {(major, minor): fn}.
# Each takes a manifest dict and returns it at the next minor version. 1.0 is the first
# version, so there is nothing to upgrade yet; a 1.1 writer adds its step here.
UPGRADES: dict[tuple[int, int], Any] = {
    # 1.0 -> 1.1 added the optional per-rank ``layers`` table; a 1.0 run simply has none.
    (1, 0): lambda manifest: manifest,
    # 1.1 -> 1.2 added inference runs ("kind": "inference", the "serve" object and the
    # per-rank ``requests`` table); a 1.1 run is a training run with no requests.
    (1, 1): lambda manifest: manifest,
    # 1.2 -> 1.3 added the optional ``pack.zip`` (a finished run's small files in one object,
    # written by ``debugkit sync``; debugkit.runpack); a 1.2 run has none and is read file by file.
    (1, 2): lambda manifest: manifest,
}


def run_kind(manifest: dict) -> str:
    """A manifest's run kind: ``"inference"`` or ``"training"`` (absent or unknown)."""
    kind = manifest.get("kind") if isinstance(manifest, dict) else None
    return KIND_INFERENCE if kind == KIND_INFERENCE else KIND_TRAINING


def parse_version(value: Any, where: str) -> tuple[int, int]:
    """Parse a ``'MAJOR.MINOR'`` schema version, raising :class:`SchemaVersionError`."""
    m = re.fullmatch(r"(\d+)\.(\d+)", str(value)) if isinstance(value, (str, int, float)) else None
    if not m:
        raise SchemaVersionError(MSG_BAD_VERSION.format(path=where, found=value))
    return int(m.group(1)), int(m.group(2))


def upgrade_manifest(manifest: dict, where: str) -> dict:
    """Check a manifest's schema version and bring an older minor up to date."""
    major, minor = parse_version(manifest.get("schema_version"), where)
    if major > SCHEMA_MAJOR:
        raise SchemaVersionError(MSG_NEWER_MAJOR.format(
            path=where, found=manifest.get("schema_version"), known=SCHEMA_MAJOR))
    if major < SCHEMA_MAJOR:
        raise SchemaVersionError(
            f"{where}: schema_version {manifest.get('schema_version')!r} is from an older major "
            f"version that this debugkit ({SCHEMA_MAJOR}.x) cannot read")
    while minor < SCHEMA_MINOR:
        step = UPGRADES.get((major, minor))
        if step is None:
            raise SchemaVersionError(f"{where}: no upgrade step from schema {major}.{minor}")
        manifest = step(manifest)
        minor += 1
    manifest["_read_as_version"] = f"{major}.{max(minor, SCHEMA_MINOR)}"
    return manifest


def read_manifest(run_dir) -> dict:
    """The checked manifest of a run folder: the format's validator.

    The reader (:func:`debugkit.io.run.open_run`) opens runs through it, and writers that
    accept a run from elsewhere (an upload, an import into an existing run) check it with
    it, so a broken or too-new run is refused with the same message everywhere.

    Raises
    ------
    RunDirError
        No such folder, no ``manifest.json``, or one that is not a JSON object with the
        documented field types.
    SchemaVersionError
        A newer major version, or a version that is not ``MAJOR.MINOR``.
    """
    p = run_dir
    if not p.exists():
        raise RunDirError(MSG_NO_SUCH_PATH.format(path=p))
    mpath = p / MANIFEST
    if not mpath.is_file():
        raise RunDirError(MSG_NOT_A_RUN.format(path=p))
    try:
        manifest = read_json(mpath)
    except FileLimitError as exc:  # a 2 GB manifest is refused before it is read
        raise RunDirError(str(exc)) from exc
    except (OSError, ValueError) as exc:
        raise RunDirError(MSG_BAD_MANIFEST.format(path=mpath, detail=exc)) from exc
    if not isinstance(manifest, dict):
        check(manifest, MANIFEST, mpath)  # refuses it: "field '(root)' must be a JSON object"
    # A newer major version may change any field: refuse it for that before the types.
    manifest = upgrade_manifest(manifest, str(mpath))
    # Every documented field has its type (debugkit.runschema), before anything reads one.
    return check(manifest, MANIFEST, mpath)


def minimal_manifest(run_dir: Path) -> dict:
    """A minimal manifest for a run folder that only holds imported or profiled
    artifacts (the program did not record a debugkit run)."""
    return {"schema_version": SCHEMA_VERSION, "run_id": uuid.uuid4().hex[:12],
            "name": run_dir.name, "created_at": time.time(), "config": {},
            "env": {"host": socket.gethostname()}}


@contextlib.contextmanager
def locked_run(run_dir: Path):
    """An exclusive advisory lock on the run directory itself (no lock file left behind)
    while its manifest is read, changed and replaced (POSIX; elsewhere a no-op, which
    still serves a lone writer)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def update_manifest(run_dir: Path, change: Callable[[dict | None], dict], *,
                    unreadable: str = "raise", action: str = "changing it") -> dict:
    """Read, change and atomically replace ``<run_dir>/manifest.json`` under
    :func:`locked_run`: the one writer of the manifest.

    Parameters
    ----------
    run_dir : Path
        An existing run folder.
    change : callable
        ``change(old) -> new``: ``old`` is the current manifest (a dict), or None when
        there is none (or, with ``unreadable="replace"``, when it is unreadable). What it
        returns is written, as it is.
    unreadable : {"raise", "replace"}
        What to do with a manifest that is not a JSON object: refuse with a
        :class:`RunDirError` that says it is ``not {action}`` (an import adding to a run),
        or pass None and replace it (the recorder starting a run in that folder).

    Returns
    -------
    dict
        The manifest written.
    """
    run_dir = Path(run_dir)
    mpath = run_dir / MANIFEST
    with locked_run(run_dir):
        old = None
        if mpath.exists():
            try:
                old = read_json(mpath)
            except (OSError, ValueError) as exc:
                if unreadable == "raise":
                    raise RunDirError(MSG_UPDATE_BAD_JSON.format(
                        path=mpath, detail=exc, action=action)) from exc
            if old is not None and not isinstance(old, dict):
                if unreadable == "raise":
                    raise RunDirError(MSG_UPDATE_NOT_OBJECT.format(path=mpath, action=action))
                old = None
        new = change(old)
        atomic_write_json(mpath, new)
    return new


MAX_TAGS = 32
MAX_TAG_CHARS = 64
MSG_BAD_TAGS = "tags={value!r}: expected a list of at most {n} strings of 1-{chars} printable characters"


def check_tags(tags) -> list[str]:
    """A run's tags (``Recorder(..., tags=[...])``) as the manifest stores them: unique,
    in the order given. Raises :class:`~debugkit.errors.InvalidInputError` otherwise."""
    from .errors import InvalidInputError

    if isinstance(tags, str) or not isinstance(tags, (list, tuple)) or len(tags) > MAX_TAGS:
        raise InvalidInputError(MSG_BAD_TAGS.format(value=tags, n=MAX_TAGS, chars=MAX_TAG_CHARS))
    out: list[str] = []
    for t in tags:
        if not isinstance(t, str) or not 0 < len(t.strip()) <= MAX_TAG_CHARS or not t.isprintable():
            raise InvalidInputError(MSG_BAD_TAGS.format(value=tags, n=MAX_TAGS, chars=MAX_TAG_CHARS))
        if t.strip() not in out:
            out.append(t.strip())
    return out


def read_tags(manifest: dict) -> list[str]:
    """The tags of a manifest written by anyone: the valid ones (see :func:`check_tags`),
    at most :data:`MAX_TAGS`; anything else in the field is ignored, never an error."""
    raw = manifest.get("tags") if isinstance(manifest, dict) else None
    if not isinstance(raw, list):
        return []
    out: list[str] = []
    for t in raw[:MAX_TAGS]:
        if isinstance(t, str) and 0 < len(t.strip()) <= MAX_TAG_CHARS and t.isprintable() \
                and t.strip() not in out:
            out.append(t.strip())
    return out
