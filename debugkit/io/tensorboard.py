"""Read TensorBoard event files and convert their scalars into debugkit runs.

Event files are TFRecord files: each record is ``uint64 length``, ``uint32 masked CRC32C
of the length``, ``length`` bytes (a serialized ``Event`` protobuf) and ``uint32 masked
CRC32C of the data``. This reader checks both CRCs (in C, through ``google-crc32c``) and
parses each record with the protobuf classes the ``tensorboard`` package ships. A torn
last record (a writer still writing, or killed) is skipped; a CRC mismatch before the end
is corruption and an error naming the file and offset.

Scalars come from ``simple_value`` summaries (``torch.utils.tensorboard``,
``tf.compat.v1``) and from 0-d float tensors of the ``scalars`` plugin (TF2
``tf.summary.scalar``). Restarts are handled as TensorBoard does: a ``SessionLog.START``
at step ``s`` discards what was read before at steps ``>= s`` (files of version 2), and
in older files a tag whose step goes back discards its own records at steps ``>= s``.

Conversion (:func:`convert_tensorboard`): tags matching a pattern (default
``grad_norm/<layer>`` and ``grad_norm/<layer>/...``) become gradient norms, in the order
the layers first appear (the model's order when they were logged in a loop over
``named_parameters()``); every other scalar tag becomes a scalar. Each directory holding
event files is one TensorBoard run and becomes one debugkit run, written in the same
format as the Recorder writes (see ``docs/run-format.md``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import format as fmt
from .._fsutil import atomic_write_json
from ..errors import InvalidInputError, MissingDependencyError, RunDirError

DEFAULT_GRAD_PATTERN = r"^grad_norm/(?P<layer>.+)$"
TOTAL_NAMES = ("total", "__total__", "global", "all")
EVENT_MARK = ".tfevents."
MAX_WALK_DEPTH = 6
MAX_WALK_DIRS = 2000

MSG_CORRUPT = "{path}: corrupt TensorBoard record at byte {offset} ({detail})"
MSG_NO_EVENTS = "{path}: no TensorBoard event files (*.tfevents.*) found"
MSG_BAD_PATTERN = "grad pattern {pattern!r}: {detail}"
MSG_TARGET_EXISTS = "{path}: already exists and is not empty; choose a new run directory"
MSG_MANY_RUNS = ("{path}: holds {n} TensorBoard runs ({names}); open one of them, or import them "
                 "all with `debugkit import tensorboard {path} RUN_DIR`")

_LEN = struct.Struct("<Q")
_U32 = struct.Struct("<I")


def _crc32c():
    try:
        import google_crc32c
    except ImportError as exc:
        raise MissingDependencyError("google_crc32c", "Reading TensorBoard event files",
                                     "google-crc32c") from exc
    return google_crc32c.value


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass
class RecordRead:
    """The complete records of one event file."""

    records: list
    truncated: bool = False


def read_records(path: str | os.PathLike) -> RecordRead:
    """Every complete, CRC-checked record of a TFRecord file, as bytes.

    Raises
    ------
    RunDirError
        A record's length or data fails its CRC (the file is corrupt).
    """
    crc = _crc32c()
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read TensorBoard event file ({exc})") from exc
    out, pos, n = [], 0, len(data)
    while pos < n:
        if pos + 12 > n:
            return RecordRead(out, True)
        (length,) = _LEN.unpack_from(data, pos)
        (len_crc,) = _U32.unpack_from(data, pos + 8)
        if _masked(crc(data[pos:pos + 8])) != len_crc:
            if pos + 12 + 4 > n:
                return RecordRead(out, True)
            raise RunDirError(MSG_CORRUPT.format(path=path, offset=pos, detail="length CRC mismatch"))
        end = pos + 12 + length
        if end + 4 > n:
            return RecordRead(out, True)
        (data_crc,) = _U32.unpack_from(data, end)
        body = data[pos + 12:end]
        if _masked(crc(body)) != data_crc:
            raise RunDirError(MSG_CORRUPT.format(path=path, offset=pos, detail="data CRC mismatch"))
        out.append(body)
        pos = end + 4
    return RecordRead(out, False)


@dataclass
class ScalarSeries:
    """Scalars of one TensorBoard run: parallel lists, in file order."""

    tags: list = field(default_factory=list)       # tag of each point
    steps: list = field(default_factory=list)
    wall_times: list = field(default_factory=list)
    values: list = field(default_factory=list)
    files: list = field(default_factory=list)
    truncated_files: list = field(default_factory=list)

    def __len__(self):
        return len(self.values)


def _tensor_scalar(tensor) -> float | None:
    from tensorboard.compat.proto import types_pb2

    if tuple(d.size for d in tensor.tensor_shape.dim) not in ((), (1,)):
        return None
    if tensor.dtype == types_pb2.DT_FLOAT:
        if tensor.float_val:
            return float(tensor.float_val[0])
        if len(tensor.tensor_content) >= 4:
            return struct.unpack_from("<f", tensor.tensor_content)[0]
    elif tensor.dtype == types_pb2.DT_DOUBLE:
        if tensor.double_val:
            return float(tensor.double_val[0])
        if len(tensor.tensor_content) >= 8:
            return struct.unpack_from("<d", tensor.tensor_content)[0]
    elif tensor.dtype == types_pb2.DT_HALF:
        if tensor.half_val:
            return float(struct.unpack("<e", struct.pack("<H", tensor.half_val[0]))[0])
    return None


def _purge(series: ScalarSeries, keep) -> None:
    idx = [i for i in range(len(series.values)) if keep(i)]
    for name in ("tags", "steps", "wall_times", "values"):
        col = getattr(series, name)
        setattr(series, name, [col[i] for i in idx])


def read_scalars(files: list[Path]) -> ScalarSeries:
    """Scalars of the event files of one run (read in file-name order, as TensorBoard does)."""
    from tensorboard.compat.proto import event_pb2

    start_code = event_pb2.SessionLog.START
    parse = event_pb2.Event.FromString
    out = ScalarSeries()
    scalar_tags: set[str] = set()
    file_version = None
    last_step: dict[str, int] = {}
    for f in sorted(files, key=lambda p: p.name):
        res = read_records(f)
        out.files.append(str(f))
        if res.truncated:
            out.truncated_files.append(str(f))
        for raw in res.records:
            try:
                ev = parse(raw)
            except Exception as exc:  # protobuf's DecodeError
                raise RunDirError(f"{f}: a TensorBoard record is not an Event ({exc})") from exc
            if ev.file_version:
                m = re.search(r"(\d+)", ev.file_version)
                file_version = int(m.group(1)) if m else None
                continue
            step = int(ev.step)
            if ev.HasField("session_log") and ev.session_log.status == start_code and \
                    file_version is not None and file_version >= 2:
                _purge(out, lambda i, s=step: out.steps[i] < s)
                last_step = {t: min(v, step - 1) for t, v in last_step.items()}
                continue
            if not ev.HasField("summary"):
                continue
            wall = float(ev.wall_time)
            for v in ev.summary.value:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    value = float(v.simple_value)
                elif kind == "tensor":
                    if v.HasField("metadata") and v.metadata.plugin_data.plugin_name == "scalars":
                        scalar_tags.add(v.tag)
                    if v.tag not in scalar_tags:
                        continue
                    value = _tensor_scalar(v.tensor)
                    if value is None:
                        continue
                else:
                    continue
                tag = v.tag
                if (file_version is None or file_version < 2) and tag in last_step and step < last_step[tag]:
                    _purge(out, lambda i, t=tag, s=step: not (out.tags[i] == t and out.steps[i] >= s))
                last_step[tag] = step
                out.tags.append(tag)
                out.steps.append(step)
                out.wall_times.append(wall)
                out.values.append(value)
    return out


# ------------------------------------------------------------------------------ finding runs
def _is_event_file(name: str) -> bool:
    return EVENT_MARK in name and not name.startswith(".")


def find_tensorboard_runs(tb_dir: str | os.PathLike) -> list[tuple[str, Path, list[Path]]]:
    """``(name, directory, event files)`` of every directory under ``tb_dir`` that holds
    event files: a TensorBoard run. ``name`` is the path relative to ``tb_dir`` (``"."``
    for ``tb_dir`` itself)."""
    root = Path(tb_dir)
    out = []
    for seen, (d, dirs, files) in enumerate(os.walk(root)):
        if seen >= MAX_WALK_DIRS:  # a home directory typed by mistake: do not crawl it all
            break
        depth = len(Path(d).relative_to(root).parts)
        dirs[:] = sorted(x for x in dirs if not x.startswith(".")) if depth < MAX_WALK_DEPTH else []
        ev = sorted(Path(d) / f for f in files if _is_event_file(f))
        if ev:
            rel = Path(d).relative_to(root).as_posix()
            out.append((rel, Path(d), ev))
    return out


def is_tensorboard_dir(path: str | os.PathLike) -> bool:
    """True for a directory without a debugkit manifest that holds event files."""
    p = Path(path)
    if not p.is_dir() or (p / fmt.MANIFEST).exists():
        return False
    return bool(find_tensorboard_runs(p))


# ------------------------------------------------------------------------------ conversion
def compile_grad_pattern(pattern: str | None):
    """Compile the gradient-norm tag pattern; it must have a ``layer`` group."""
    pattern = DEFAULT_GRAD_PATTERN if pattern is None else pattern
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise InvalidInputError(MSG_BAD_PATTERN.format(pattern=pattern, detail=f"not a valid regular expression ({exc})")) from None
    if "layer" not in rx.groupindex:
        raise InvalidInputError(MSG_BAD_PATTERN.format(pattern=pattern, detail="needs a named group (?P<layer>...)"))
    return rx


def layer_name(raw: str) -> str:
    """A gradient tag's layer part as a parameter name: ``/`` becomes ``.``."""
    return raw.strip("/").replace("/", ".")


def _write_stream(path: Path, table: str, arrays) -> None:
    import pyarrow as pa

    schema = fmt.table_schema(table)
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    with pa.OSFile(str(path), mode="w") as sink:
        with pa.ipc.new_stream(sink, schema) as w:
            if batch.num_rows:
                w.write_batch(batch)


def write_run(series: ScalarSeries, out: Path, *, name: str, source: Path, grad_pattern=None) -> dict:
    """Write one TensorBoard run's scalars as a debugkit run directory at ``out``.

    Returns
    -------
    dict
        ``{"path", "layers", "grad_rows", "scalar_rows", "steps"}``.
    """
    import numpy as np
    import pyarrow as pa

    rx = compile_grad_pattern(grad_pattern)
    tags = series.tags
    layer_of: dict[str, str | None] = {}
    layers: list[str] = []
    has_total = False
    for t in dict.fromkeys(tags):
        m = rx.search(t)
        if not m:
            layer_of[t] = None
            continue
        ln = layer_name(m.group("layer"))
        if ln in TOTAL_NAMES:
            layer_of[t] = fmt.TOTAL_LAYER
            has_total = True
        else:
            layer_of[t] = ln
            if ln not in layers:
                layers.append(ln)
    lid = {n: i for i, n in enumerate(layers)}
    lid[fmt.TOTAL_LAYER] = len(layers)
    steps = np.asarray(series.steps, dtype=np.int64)
    walls = np.asarray(series.wall_times, dtype=np.float64)
    values = np.asarray(series.values, dtype=np.float64)
    is_grad = np.array([layer_of[t] is not None for t in tags], dtype=bool)
    g_steps = steps[is_grad]
    g_ids = np.array([lid[layer_of[t]] for t, g in zip(tags, is_grad) if g], dtype=np.int32)
    g_vals = values[is_grad].astype(np.float32)
    if layers and not has_total and len(g_steps):
        # The total norm, at steps where every layer was logged (the last value of each).
        order = np.lexsort((np.arange(len(g_steps)), g_ids, g_steps))
        s_sorted, i_sorted, v_sorted = g_steps[order], g_ids[order], g_vals[order].astype(np.float64)
        uniq, start = np.unique(s_sorted, return_index=True)
        tot_steps, tot_vals = [], []
        bounds = list(start) + [len(s_sorted)]
        for k, st in enumerate(uniq):
            seg_i, seg_v = i_sorted[bounds[k]:bounds[k + 1]], v_sorted[bounds[k]:bounds[k + 1]]
            last = {}
            for i, v in zip(seg_i.tolist(), seg_v.tolist()):
                last[i] = v
            if len(last) == len(layers):
                tot_steps.append(int(st))
                with np.errstate(over="ignore", invalid="ignore"):
                    tot_vals.append(math.sqrt(sum(v * v for v in last.values())) if all(
                        math.isfinite(v) for v in last.values()) else float("nan"))
        g_steps = np.concatenate([g_steps, np.asarray(tot_steps, np.int64)])
        g_ids = np.concatenate([g_ids, np.full(len(tot_steps), len(layers), np.int32)])
        g_vals = np.concatenate([g_vals, np.asarray(tot_vals, np.float32)])
    o = np.argsort(g_steps, kind="stable")
    g_steps, g_ids, g_vals = g_steps[o], g_ids[o], g_vals[o]
    s_mask = ~is_grad
    s_order = np.argsort(steps[s_mask], kind="stable")
    s_tags = [t for t, g in zip(tags, is_grad) if not g]
    rank_dir = out / fmt.RANKS_DIR / "0"
    rank_dir.mkdir(parents=True)
    _write_stream(rank_dir / fmt.segment_name("scalars", 0), "scalars", [
        pa.array(steps[s_mask][s_order], pa.int64()),
        pa.array([s_tags[i] for i in s_order], pa.string()),
        pa.array(values[s_mask][s_order], pa.float64()),
        pa.array(walls[s_mask][s_order], pa.float64())])
    _write_stream(rank_dir / fmt.segment_name("grads", 0), "grads", [
        pa.array(g_steps, pa.int64()), pa.array(g_ids, pa.int32()), pa.array(g_vals, pa.float64())])
    all_steps = np.unique(steps)
    step_wall = np.full(len(all_steps), np.inf)  # the first wall time seen at each step
    if len(steps):
        np.minimum.at(step_wall, np.searchsorted(all_steps, steps), walls)
    n = len(all_steps)
    _write_stream(rank_dir / fmt.segment_name("steps", 0), "steps", [
        pa.array(all_steps, pa.int64()), pa.array(step_wall, pa.float64()),
        pa.nulls(n, pa.float64()), pa.nulls(n, pa.float64()), pa.nulls(n, pa.float64()),
        pa.array(np.ones(n, bool), pa.bool_())])
    now = time.time()
    created = float(walls.min()) if len(walls) else now
    atomic_write_json(rank_dir / fmt.RANK_META.format(segment=0), {
        "rank": 0, "world_size": 1, "local_rank": 0, "host": None, "pid": None, "device": None,
        "backend": None, "layers": layers, "started_at": created, "segment": 0})
    with open(rank_dir / fmt.segment_name(fmt.EVENTS_PREFIX, 0), "w", encoding="utf-8") as f:
        f.write(json.dumps({"time": now, "kind": "import", "source": "tensorboard",
                            "path": str(source), "files": series.files}) + "\n")
    atomic_write_json(rank_dir / fmt.HEARTBEAT, {
        "state": fmt.STATE_FINISHED, "pid": None, "host": None, "process_start_ticks": None,
        "time": float(walls.max()) if len(walls) else now,
        "step": int(all_steps[-1]) if n else None, "flush_every_s": None})
    run_id = hashlib.sha256(str(source.resolve()).encode()).hexdigest()[:12]
    manifest = {
        "schema_version": fmt.SCHEMA_VERSION, "run_id": run_id, "name": name,
        "created_at": created, "config": {}, "model_factory": None, "factory_kwargs": {},
        "step_fn": None, "num_classes": None, "log_every": None, "flush_every_s": None,
        "world_size": 1, "distributed": {"backend": None, "world_size": 1},
        "model_class": None, "optimizer_class": None, "code": {}, "env": {},
        "imported_from": {"kind": "tensorboard", "path": str(source), "files": series.files,
                          "truncated_files": series.truncated_files,
                          "grad_pattern": rx.pattern, "imported_at": now},
    }
    fmt.update_manifest(out, lambda old: manifest)  # a new folder: nothing to keep
    return {"path": str(out), "layers": layers, "grad_rows": int(len(g_steps)),
            "scalar_rows": int(s_mask.sum()), "steps": n}


def _safe_name(rel: str, base: str) -> str:
    name = base if rel in (".", "") else rel.replace("/", "-")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "tensorboard"


def convert_tensorboard(tb_dir: str | os.PathLike, run_dir: str | os.PathLike, *,
                        grad_pattern: str | None = None, name: str | None = None) -> list[dict]:
    """Convert every TensorBoard run under ``tb_dir`` into debugkit runs.

    With one TensorBoard run, ``run_dir`` becomes that run. With several, ``run_dir``
    becomes a folder with one run per TensorBoard run (named by its sub-folder). The
    target appears by a single rename once complete; ``tb_dir`` is only read.

    Raises
    ------
    InvalidInputError
        ``run_dir`` exists and is not empty, or the grad pattern is invalid.
    RunDirError
        ``tb_dir`` holds no event file, or one is corrupt.
    """
    tb = Path(tb_dir).expanduser()
    target = Path(run_dir).expanduser()
    if not tb.is_dir():
        raise RunDirError(f"{tb}: not a directory (expected a TensorBoard log directory)")
    compile_grad_pattern(grad_pattern)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InvalidInputError(MSG_TARGET_EXISTS.format(path=target))
    runs = find_tensorboard_runs(tb)
    if not runs:
        raise RunDirError(MSG_NO_EVENTS.format(path=tb))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    results = []
    try:
        for rel, d, files in runs:
            series = read_scalars(files)
            label = name or _safe_name(rel, tb.resolve().name)
            if len(runs) == 1:
                out = staging / "run"
                results.append(write_run(series, out, name=label, source=d, grad_pattern=grad_pattern))
            else:
                sub = _safe_name(rel, tb.resolve().name)
                out = staging / "runs" / sub
                out.parent.mkdir(exist_ok=True)
                results.append(write_run(series, out, name=f"{name}/{sub}" if name else sub,
                                         source=d, grad_pattern=grad_pattern))
        src = staging / ("run" if len(runs) == 1 else "runs")
        if target.exists():
            target.rmdir()  # empty (checked above)
        os.rename(src, target)
        for r in results:
            r["path"] = r["path"].replace(str(src), str(target), 1)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return results


def _stats_key(tb: Path, runs) -> tuple[str, str]:
    path_key = hashlib.sha256(str(tb.resolve()).encode()).hexdigest()[:12]
    h = hashlib.sha256()
    for rel, _, files in runs:
        for f in files:
            st = f.stat()
            h.update(f"{rel}/{f.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return path_key, h.hexdigest()[:12]


def open_tensorboard_cached(tb_dir: str | os.PathLike, grad_pattern: str | None = None) -> Path:
    """Convert a TensorBoard log directory holding one run into the cache (once per
    version of its event files) and return the converted run's directory.

    Raises
    ------
    RunDirError
        No event files, or several TensorBoard runs (the message names them).
    """
    from .._fsutil import cache_dir, touch_cache_entry, trim_cache

    tb = Path(tb_dir)
    runs = find_tensorboard_runs(tb)
    if not runs:
        raise RunDirError(MSG_NO_EVENTS.format(path=tb))
    if len(runs) > 1:
        names = ", ".join(r for r, _, _ in runs[:6]) + (" ..." if len(runs) > 6 else "")
        raise RunDirError(MSG_MANY_RUNS.format(path=tb, n=len(runs), names=names))
    path_key, stats_key = _stats_key(tb, runs)
    base = cache_dir() / "tensorboard"
    version = base / f"{path_key}-{stats_key}"
    name = _safe_name(runs[0][0], tb.resolve().name)
    target = version / name
    if not (target / fmt.MANIFEST).is_file():
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".tmp-{path_key}-{uuid.uuid4().hex[:8]}"
        try:
            convert_tensorboard(tb, tmp / name, grad_pattern=grad_pattern)
            try:
                os.rename(tmp, version)
            except OSError:
                if not (target / fmt.MANIFEST).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in base.glob(f"{path_key}-*"):  # older versions of the same log directory
            if old != version:
                shutil.rmtree(old, ignore_errors=True)
        trim_cache(keep=version)  # the cache folder stays under DEBUGKIT_CACHE_MAX_MB
    else:
        touch_cache_entry(version)
    return target
