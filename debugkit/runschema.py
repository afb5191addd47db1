"""A typed schema for every JSON file of the run format, and the one reader that applies it.

A run directory is a public format and, on a shared server, a stranger's upload: a
manifest whose ``env`` is ``"x"``, a checkpoint entry that is a number, an event whose
``time`` is a string each reached code that calls ``.get`` or compares numbers, and ended
in an ``AttributeError``/``TypeError`` traceback on every visitor's Home page. Each file
of ``docs/run-format.md`` has a schema here (msgspec ``Struct`` types: every documented
field with its type, all optional, unknown fields allowed, as a newer minor version of
the format may add some), and :func:`read_run_json` reads a file through
:func:`debugkit._fsutil.read_json` (64 MiB, nesting depth capped) and checks it against
its schema before any caller looks at it. The check is a type check only; the document
is returned as it was parsed (plain dicts and lists), so readers keep their code.

msgspec was chosen over pydantic and over hand-written checks by measurement
(``bench/run_schemas.py``): see docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from ._fsutil import MAX_JSON_BYTES, read_json
from .errors import MSG_RUN_FILE_FIELD, RunFileError

Num = Union[int, float]
Str = Union[str, None]
Obj = dict[str, Any]


class _Doc(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """Base: unknown fields are ignored (a newer minor version may add fields)."""


# ------------------------------------------------------------------------- manifest.json
class CodeSpec(_Doc):
    spec: Str = None
    module: Str = None
    qualname: Str = None
    file: Str = None
    sha256: Str = None


class Distributed(_Doc):
    backend: Str = None
    world_size: int | None = None
    local_world_size: int | None = None
    local_rank: int | None = None
    node_rank: int | None = None
    host: Str = None
    master_addr: Str = None
    master_port: int | str | None = None
    torchelastic_run_id: Str = None


class Gpu(_Doc):
    index: int | None = None
    name: Str = None
    total_memory_bytes: Num | None = None


class Env(_Doc):
    python: Str = None
    python_full: Str = None
    platform: Str = None
    host: Str = None
    torch: Str = None
    cuda_available: bool | None = None
    cuda_version: Str = None
    cudnn_version: int | str | None = None
    gpus: list[Gpu] | None = None
    packages: dict[str, str | None] | None = None
    argv: list[str] | None = None
    cwd: Str = None
    executable: Str = None
    pid: int | None = None
    distributions: dict[str, str | None] | None = None
    hardware: Obj | None = None
    os: Obj | None = None
    nccl_version: str | int | list[int] | None = None
    pip_check: Obj | None = None


class Guard(_Doc):
    action: Str = None
    spec: Obj | None = None


class ProfileEntry(_Doc):
    id: Str = None
    kind: Str = None
    format: Str = None
    file: Str = None
    bytes: int | None = None
    sha256: Str = None
    created_at: Num | None = None
    origin: Str = None
    original_name: Str = None
    summary: dict[str, Num | bool | str | None] | None = None
    label: Str = None
    rank: int | None = None
    world_size: int | None = None
    tool: Str = None
    command: list[str] | str | None = None
    pid: int | None = None
    exit_status: int | None = None
    started_at: Num | None = None
    ended_at: Num | None = None
    host: Str = None
    interrupted: bool | None = None
    launcher_pid: int | None = None
    pyspy: Obj | None = None


class Manifest(_Doc):
    schema_version: str | int | float | None = None
    run_id: Str = None
    name: Str = None
    created_at: Num | None = None
    resumed_at: list[Num] | None = None
    config: Obj | None = None
    model_factory: Str = None
    step_fn: Str = None
    factory_kwargs: Obj | None = None
    num_classes: int | None = None
    log_every: Num | None = None
    flush_every_s: Num | None = None
    world_size: int | None = None
    distributed: Distributed | None = None
    model_class: Str = None
    optimizer_class: Str = None
    code: dict[str, CodeSpec] | None = None
    guard: Guard | None = None
    env: Env | None = None
    imported_from: Obj | None = None
    # Each entry is checked on its own (``is_valid(entry, "profile entry")``) by
    # debugkit.io.profile_store, which skips a malformed one with a warning.
    profiles: list[Any] | None = None


# ------------------------------------------------------------------- other run-level files
class EnvFile(_Doc):
    pip_check: Obj | None = None


class Dataset(_Doc, rename={"class_": "class"}):
    class_: Str = None
    length: int | None = None
    sampled_indices: list[int] | None = None
    item_sha256: list[str | None] | None = None
    fingerprint: Str = None
    error: Str = None
    first_step: int | None = None


class DataFile(_Doc):
    datasets: list[Dataset] | None = None


class AuditTarget(_Doc):
    name: Str = None
    title: Str = None
    loader: Str = None
    kwargs: Obj | None = None


class AuditTargets(_Doc):
    targets: list[AuditTarget] | None = None


# --------------------------------------------------------------------------- ranks/<r>/
class RankMeta(_Doc):
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    host: Str = None
    pid: int | None = None
    device: Str = None
    backend: Str = None
    layers: list[str] | None = None
    started_at: Num | None = None
    segment: int | None = None
    host_memory_bytes: Num | None = None
    host_memory_limit_bytes: Num | None = None
    device_memory_bytes: Num | None = None


class Heartbeat(_Doc):
    state: Str = None
    pid: int | None = None
    host: Str = None
    process_start_ticks: int | None = None
    time: Num | None = None
    step: int | None = None
    flush_every_s: Num | None = None


class Violation(_Doc):
    tensor: str | int | None = None
    sample: int | None = None
    dataset_index: int | None = None
    rule: Str = None
    message: Str = None


class Event(_Doc):
    """One line of ``events-<seg>.jsonl`` (the fields of every kind)."""

    time: Num | None = None
    kind: Str = None
    step: int | None = None
    last_step: int | None = None
    in_step: bool | None = None
    elapsed_s: Num | None = None
    timeout_s: Num | None = None
    reason: Str = None
    trigger_rank: int | None = None
    dump: Str = None
    stuck_at: Str = None
    ok: bool | None = None
    skipped: int | None = None
    dataset_indices: list[int] | None = None
    n_violations: int | None = None
    violations: list[Violation] | None = None
    message: Str = None
    steps: int | None = None
    skipped_batches: int | None = None
    name: Str = None
    attempt: int | None = None
    attempts: int | None = None
    error_type: Str = None
    delay_s: Num | None = None
    failure: Str = None
    segment: int | None = None
    pid: int | None = None
    dir: Str = None
    bytes: int | None = None
    state: Str = None
    enabled: bool | None = None


class TensorSpec(_Doc):
    dtype: Str = None
    shape: list[int | list[str | int | None] | None] | None = None
    range: list[Num | None] | None = None
    finite: bool | None = None


class InferredFrom(_Doc):
    healthy_batches: int | None = None
    first_step: int | None = None
    last_step: int | None = None
    num_classes: int | None = None


class BatchSpecDoc(_Doc):
    debugkit_batch_spec: int | None = None
    structure: str | Obj | None = None
    tensors: dict[str, TensorSpec] | None = None
    inferred_from: InferredFrom | None = None


class ThreadFrame(_Doc):
    file: Str = None
    line: int | None = None
    function: Str = None
    code: Str = None
    library: bool | None = None


class Thread(_Doc):
    ident: int | None = None
    name: Str = None
    daemon: bool | None = None
    frames: list[ThreadFrame] | None = None


class HangDump(_Doc):
    rank: int | None = None
    segment: int | None = None
    time: Num | None = None
    reason: Str = None
    trigger_rank: int | None = None
    trigger_step: int | None = None
    in_step: bool | None = None
    step: int | None = None
    last_step: int | None = None
    step_started_at: Num | None = None
    elapsed_s: Num | None = None
    timeout_s: Num | None = None
    pid: int | None = None
    train_thread: int | None = None
    threads: list[Thread] | None = None
    files: dict[str, Str] | None = None
    pyspy_error: Str = None


class HangRequest(_Doc):
    rank: int | None = None
    step: int | None = None
    time: Num | None = None
    timeout_s: Num | None = None


# ---------------------------------------------------------------------------- failures/
class Nonfinite(_Doc):
    loss_keys: list[str] | None = None
    layers: list[str] | None = None
    loss_finite: bool | None = None
    detected: Str = None
    state_after_optimizer_step: bool | None = None


class Failure(_Doc):
    id: Str = None
    kind: Str = None
    step: int | None = None
    rank: int | None = None
    world_size: int | None = None
    device: Str = None
    time: Num | None = None
    error_type: Str = None
    error_module: Str = None
    message: Str = None
    traceback: Str = None
    dataset_indices: list[int] | None = None
    code: dict[str, CodeSpec] | None = None
    num_classes: int | None = None
    optimizer_stepped: bool | None = None
    files: dict[str, list[str]] | None = None
    sha256: dict[str, str] | None = None
    capture_errors: dict[str, Str] | None = None
    nonfinite: Nonfinite | None = None
    model_training: bool | None = None
    factory_kwargs: Obj | None = None


class RngDoc(_Doc):
    cuda_devices: int | None = None
    host_taken: Str = None
    torch_taken: Str = None
    numpy: Obj | None = None
    python: Obj | None = None


class BatchStructure(_Doc):
    version: int | None = None
    root: Obj | None = None


# ------------------------------------------------------------------ memory_snapshots/
class SnapshotMeta(_Doc):
    id: Str = None
    rank: int | None = None
    step: int | None = None
    reason: Str = None
    failure: Str = None
    device: str | int | None = None
    time: Num | None = None
    source: Str = None
    size_bytes: int | None = None
    sha256: Str = None
    oom_device: int | str | None = None
    oom_requested_bytes: Num | None = None
    oom_device_allocated_bytes: Num | None = None
    oom_device_free_bytes: Num | None = None


# ----------------------------------------------------------------------- checkpoints/
class CheckpointFile(_Doc):
    bytes: int | None = None
    sha256: Str = None


class CheckpointEntry(_Doc):
    step: int | None = None
    wall_time: Num | None = None
    dir: Str = None
    files: dict[str, CheckpointFile] | None = None


class CheckpointIndex(_Doc):
    format: Str = None
    checkpoints: list[CheckpointEntry] | None = None


# ---------------------------------------------------------------------------- audits/
class Audit(_Doc):
    id: Str = None
    name: Str = None
    format: Str = None
    verdict: Str = None
    reasons: list[str] | None = None
    model: Obj | None = None
    dataset: Obj | None = None
    sensitive: dict[str, Obj] | None = None
    shap: Obj | None = None
    associations: list[Obj] | None = None
    flags: list[Obj] | None = None
    provenance: Obj | None = None
    rows_sha256: Str = None
    substance_sha256: Str = None
    files: dict[str, str] | None = None


#: The schema of each JSON file of the run format, by the name callers pass.
SCHEMAS: dict[str, type] = {
    "manifest.json": Manifest,
    "env.json": EnvFile,
    "data.json": DataFile,
    "audit_targets.json": AuditTargets,
    "meta.json": RankMeta,
    "heartbeat.json": Heartbeat,
    "event": Event,
    "batch_spec.json": BatchSpecDoc,
    "hang dump": HangDump,
    "hang request": HangRequest,
    "failure.json": Failure,
    "rng.json": RngDoc,
    "batch.json": BatchStructure,
    "snapshot sidecar": SnapshotMeta,
    "profile entry": ProfileEntry,
    "checkpoints/index.json": CheckpointIndex,
    "audit.json": Audit,
}


def check(doc: Any, schema: str, where) -> dict:
    """``doc`` when it is a JSON object whose every field has its documented type;
    :class:`~debugkit.errors.RunFileError` (a ``RunDirError`` and a ``ValueError``)
    naming ``where`` and the first field that does not."""
    if not isinstance(doc, dict):
        raise RunFileError(MSG_RUN_FILE_FIELD.format(path=where, what=schema, field="(root)",
                                                     detail=f"must be a JSON object, got {_kind(doc)}"))
    try:
        msgspec.convert(doc, SCHEMAS[schema], strict=True)
    except msgspec.ValidationError as exc:
        # msgspec: "Expected `int | null`, got `str` - at `$.env.gpus[0].index`"
        detail, _, field = str(exc).partition(" - at `")
        field = field.rstrip("`").removeprefix("$.").removeprefix("$") or "(root)"
        detail = detail.replace("`", "")
        if detail.startswith("Expected "):
            detail = "must be " + detail[len("Expected "):].replace("object", "a JSON object")
        raise RunFileError(MSG_RUN_FILE_FIELD.format(path=where, what=schema, field=field,
                                                     detail=detail)) from None
    return doc


def is_valid(doc: Any, schema: str) -> bool:
    """Whether ``doc`` passes :func:`check` (for entries a reader skips when bad)."""
    try:
        check(doc, schema, "")
    except RunFileError:
        return False
    return True


def read_run_json(path, schema: str, *, max_bytes: int = MAX_JSON_BYTES) -> dict:
    """Read a run's JSON file and check it against ``SCHEMAS[schema]``.

    Raises what :func:`debugkit._fsutil.read_json` raises (``OSError``;
    ``FileLimitError`` for a file over ``max_bytes`` or nested too deep; ``ValueError``
    for invalid JSON) and :class:`~debugkit.errors.RunFileError` for a field of the wrong
    type. All but ``OSError`` are ``ValueError`` subclasses.
    """
    return check(read_json(path, max_bytes=max_bytes), schema, path)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
