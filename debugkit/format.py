"""Constants of the run directory format (see ``docs/run-format.md``).

This module is the single place where the on-disk layout is named: the recorder
writes what is described here and :mod:`debugkit.io` reads it. It imports nothing
heavy (pyarrow is imported by the functions that build schemas).
"""

from __future__ import annotations

SCHEMA_MAJOR = 1
SCHEMA_MINOR = 0
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
RANK_META = "meta.json"
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

# Per-rank tables: ranks/<rank>/<table>-<segment>.arrows (Arrow IPC streams).
TABLES = ("scalars", "grads", "memory", "steps")
TABLE_SUFFIX = ".arrows"
EVENTS_PREFIX = "events"
EVENTS_SUFFIX = ".jsonl"

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
    }
    return schemas[table]
