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
    world_size: Union[int, None] = None
    local_world_size: Union[int, None] = None
    local_rank: Union[int, None] = None
    node_rank: Union[int, None] = None
    host: Str = None
    master_addr: Str = None
    master_port: Union[int, str, None] = None
    torchelastic_run_id: Str = None


class Gpu(_Doc):
    index: Union[int, None] = None
    name: Str = None
    total_memory_bytes: Union[Num, None] = None


class Env(_Doc):
    python: Str = None
    python_full: Str = None
    platform: Str = None
    host: Str = None
    torch: Str = None
    cuda_available: Union[bool, None] = None
    cuda_version: Str = None
    cudnn_version: Union[int, str, None] = None
    gpus: Union[list[Gpu], None] = None
    packages: Union[dict[str, Union[str, None]], None] = None
    argv: Union[list[str], None] = None
    cwd: Str = None
    executable: Str = None
    pid: Union[int, None] = None
    distributions: Union[dict[str, Union[str, None]], None] = None
    hardware: Union[Obj, None] = None
    os: Union[Obj, None] = None
    nccl_version: Union[str, int, list[int], None] = None
    pip_check: Union[Obj, None] = None


class Guard(_Doc):
    action: Str = None
    spec: Union[Obj, None] = None


class ProfileEntry(_Doc):
    id: Str = None
    kind: Str = None
    format: Str = None
    file: Str = None
    bytes: Union[int, None] = None
    sha256: Str = None
    created_at: Union[Num, None] = None
    origin: Str = None
    original_name: Str = None
    summary: Union[dict[str, Union[Num, bool, str, None]], None] = None
    label: Str = None
    rank: Union[int, None] = None
    world_size: Union[int, None] = None
    tool: Str = None
    command: Union[list[str], str, None] = None
    pid: Union[int, None] = None
    exit_status: Union[int, None] = None
    started_at: Union[Num, None] = None
    ended_at: Union[Num, None] = None
    host: Str = None
    interrupted: Union[bool, None] = None
    launcher_pid: Union[int, None] = None
    pyspy: Union[Obj, None] = None


class CaptureBudget(_Doc):
    per_kind: Union[int, None] = None
    per_minute: Union[int, None] = None


class Serve(_Doc):
    """An inference run's settings (format 1.2; ``debugkit.serve``)."""

    gpu_mem_threshold: Union[Num, None] = None
    host_mem_threshold: Union[Num, None] = None
    capture_budget: Union[CaptureBudget, None] = None
    memory_every_s: Union[Num, None] = None


class Manifest(_Doc):
    schema_version: Union[str, int, float, None] = None
    kind: Str = None
    serve: Union[Serve, None] = None
    weights_sha256: Str = None
    run_id: Str = None
    name: Str = None
    created_at: Union[Num, None] = None
    resumed_at: Union[list[Num], None] = None
    config: Union[Obj, None] = None
    model_factory: Str = None
    step_fn: Str = None
    factory_kwargs: Union[Obj, None] = None
    num_classes: Union[int, None] = None
    log_every: Union[Num, None] = None
    flush_every_s: Union[Num, None] = None
    world_size: Union[int, None] = None
    distributed: Union[Distributed, None] = None
    model_class: Str = None
    optimizer_class: Str = None
    code: Union[dict[str, Union[CodeSpec, None]], None] = None
    guard: Union[Guard, None] = None
    env: Union[Env, None] = None
    imported_from: Union[Obj, None] = None
    # Each entry is checked on its own (``is_valid(entry, "profile entry")``) by
    # debugkit.io.run_profiles, which skips a malformed one with a warning.
    profiles: Union[list[Any], None] = None


# ------------------------------------------------------------------- other run-level files
class EnvFile(_Doc):
    pip_check: Union[Obj, None] = None


class Dataset(_Doc, rename={"class_": "class"}):
    class_: Str = None
    length: Union[int, None] = None
    sampled_indices: Union[list[int], None] = None
    item_sha256: Union[list[Union[str, None]], None] = None
    fingerprint: Str = None
    error: Str = None
    first_step: Union[int, None] = None


class DataFile(_Doc):
    datasets: Union[list[Dataset], None] = None


class AuditTarget(_Doc):
    name: Str = None
    title: Str = None
    loader: Str = None
    kwargs: Union[Obj, None] = None


class AuditTargets(_Doc):
    targets: Union[list[AuditTarget], None] = None


# --------------------------------------------------------------------------- ranks/<r>/
class RankMeta(_Doc):
    rank: Union[int, None] = None
    world_size: Union[int, None] = None
    local_rank: Union[int, None] = None
    local_world_size: Union[int, None] = None
    node_rank: Union[int, None] = None
    host: Str = None
    pid: Union[int, None] = None
    device: Str = None
    backend: Str = None
    layers: Union[list[str], None] = None
    started_at: Union[Num, None] = None
    segment: Union[int, None] = None
    host_memory_bytes: Union[Num, None] = None
    host_memory_limit_bytes: Union[Num, None] = None
    device_memory_bytes: Union[Num, None] = None


class Heartbeat(_Doc):
    state: Str = None
    pid: Union[int, None] = None
    host: Str = None
    process_start_ticks: Union[int, None] = None
    time: Union[Num, None] = None
    step: Union[int, None] = None
    flush_every_s: Union[Num, None] = None


class Violation(_Doc):
    tensor: Union[str, int, None] = None
    sample: Union[int, None] = None
    dataset_index: Any = None  # whatever the loader's sampler yields (an int, usually)
    rule: Str = None
    message: Str = None


class Event(_Doc):
    """One line of ``events-<seg>.jsonl`` (the fields of every kind)."""

    time: Union[Num, None] = None
    kind: Str = None
    step: Union[int, None] = None
    last_step: Union[int, None] = None
    in_step: Union[bool, None] = None
    elapsed_s: Union[Num, None] = None
    timeout_s: Union[Num, None] = None
    reason: Str = None
    trigger_rank: Union[int, None] = None
    dump: Str = None
    stuck_at: Str = None
    ok: Union[bool, None] = None
    skipped: Union[int, None] = None
    dataset_indices: Union[list[Any], None] = None  # as the sampler yields them
    n_violations: Union[int, None] = None
    violations: Union[list[Violation], None] = None
    message: Str = None
    steps: Union[int, None] = None
    skipped_batches: Union[int, None] = None
    name: Str = None
    attempt: Union[int, None] = None
    attempts: Union[int, None] = None
    error_type: Str = None
    delay_s: Union[Num, None] = None
    failure: Str = None
    segment: Union[int, None] = None
    pid: Union[int, None] = None
    dir: Str = None
    bytes: Union[int, None] = None
    state: Str = None
    enabled: Union[bool, None] = None
    requests: Union[int, None] = None
    counts: Union[dict[str, int], None] = None
    dropped: Union[int, None] = None


class TensorSpec(_Doc):
    dtype: Str = None
    shape: Union[list[Union[int, list[Union[str, int, None]], None]], None] = None
    range: Union[list[Union[Num, None]], None] = None
    finite: Union[bool, None] = None


class InferredFrom(_Doc):
    healthy_batches: Union[int, None] = None
    first_step: Union[int, None] = None
    last_step: Union[int, None] = None
    num_classes: Union[int, None] = None


class BatchSpecDoc(_Doc):
    debugkit_batch_spec: Union[int, None] = None
    structure: Union[str, Obj, None] = None
    tensors: Union[dict[str, TensorSpec], None] = None
    inferred_from: Union[InferredFrom, None] = None


class ThreadFrame(_Doc):
    file: Str = None
    line: Union[int, None] = None
    function: Str = None
    code: Str = None
    library: Union[bool, None] = None


class Thread(_Doc):
    ident: Union[int, None] = None
    name: Str = None
    daemon: Union[bool, None] = None
    frames: Union[list[ThreadFrame], None] = None


class HangDump(_Doc):
    rank: Union[int, None] = None
    segment: Union[int, None] = None
    time: Union[Num, None] = None
    reason: Str = None
    trigger_rank: Union[int, None] = None
    trigger_step: Union[int, None] = None
    in_step: Union[bool, None] = None
    step: Union[int, None] = None
    last_step: Union[int, None] = None
    step_started_at: Union[Num, None] = None
    elapsed_s: Union[Num, None] = None
    timeout_s: Union[Num, None] = None
    pid: Union[int, None] = None
    train_thread: Union[int, None] = None
    threads: Union[list[Thread], None] = None
    files: Union[dict[str, Str], None] = None
    pyspy_error: Str = None


class HangRequest(_Doc):
    rank: Union[int, None] = None
    step: Union[int, None] = None
    time: Union[Num, None] = None
    timeout_s: Union[Num, None] = None


# ---------------------------------------------------------------------------- failures/
class Nonfinite(_Doc):
    loss_keys: Union[list[str], None] = None
    layers: Union[list[str], None] = None
    loss_finite: Union[bool, None] = None
    detected: Str = None
    state_after_optimizer_step: Union[bool, None] = None


class Failure(_Doc):
    id: Str = None
    kind: Str = None
    step: Union[int, None] = None
    rank: Union[int, None] = None
    world_size: Union[int, None] = None
    device: Str = None
    time: Union[Num, None] = None
    error_type: Str = None
    error_module: Str = None
    message: Str = None
    traceback: Str = None
    dataset_indices: Union[list[Any], None] = None  # as the sampler yields them
    code: Union[dict[str, Union[CodeSpec, None]], None] = None
    num_classes: Union[int, None] = None
    optimizer_stepped: Union[bool, None] = None
    files: Union[dict[str, list[str]], None] = None
    sha256: Union[dict[str, str], None] = None
    capture_errors: Union[dict[str, Str], None] = None
    nonfinite: Union[Nonfinite, None] = None
    model_training: Union[bool, None] = None
    factory_kwargs: Union[Obj, None] = None
    request: Union[int, None] = None
    outcome: Str = None
    signature: Str = None
    route: Str = None
    fallback: Str = None
    weights_sha256: Str = None


class RngDoc(_Doc):
    cuda_devices: Union[int, None] = None
    host_taken: Str = None
    torch_taken: Str = None
    numpy: Union[Obj, None] = None
    python: Union[Obj, None] = None


class BatchStructure(_Doc):
    version: Union[int, None] = None
    root: Union[Obj, None] = None


# ------------------------------------------------------------------ memory_snapshots/
class SnapshotMeta(_Doc):
    id: Str = None
    rank: Union[int, None] = None
    step: Union[int, None] = None
    reason: Str = None
    failure: Str = None
    device: Union[str, int, None] = None
    time: Union[Num, None] = None
    source: Str = None
    size_bytes: Union[int, None] = None
    sha256: Str = None
    oom_device: Union[int, str, None] = None
    oom_requested_bytes: Union[Num, None] = None
    oom_device_allocated_bytes: Union[Num, None] = None
    oom_device_free_bytes: Union[Num, None] = None


# ----------------------------------------------------------------------- checkpoints/
class CheckpointFile(_Doc):
    bytes: Union[int, None] = None
    sha256: Str = None


class CheckpointEntry(_Doc):
    step: Union[int, None] = None
    wall_time: Union[Num, None] = None
    dir: Str = None
    files: Union[dict[str, CheckpointFile], None] = None


class CheckpointIndex(_Doc):
    format: Str = None
    checkpoints: Union[list[CheckpointEntry], None] = None


# ---------------------------------------------------------------------------- audits/
class Audit(_Doc):
    id: Str = None
    name: Str = None
    format: Str = None
    verdict: Str = None
    reasons: Union[list[str], None] = None
    model: Union[Obj, None] = None
    dataset: Union[Obj, None] = None
    sensitive: Union[dict[str, Obj], None] = None
    shap: Union[Obj, None] = None
    associations: Union[list[Obj], None] = None
    flags: Union[list[Obj], None] = None
    provenance: Union[Obj, None] = None
    rows_sha256: Str = None
    substance_sha256: Str = None
    files: Union[dict[str, str], None] = None


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
