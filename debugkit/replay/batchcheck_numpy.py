"""The captured-batch checks of :mod:`debugkit.replay.batchcheck`, in numpy.

``diagnose`` and the dashboard's run list read every failure capture's batch; loading
it as torch tensors imported torch (seconds of CPU per process) for a few comparisons.
Here the batch loads through ``safetensors.numpy`` and the same checks run on numpy
arrays: the label range, non-finite inputs and the healthy batches' spec (structure,
dtype, shape, range, finiteness), each giving what its torch counterpart gives
(``tests/replay/test_batchcheck_numpy.py`` compares both on every sample run).

A batch holding a dtype numpy has no exact counterpart for (bfloat16, float8, complex)
raises :class:`NeedsTorch` and the caller uses the torch checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..recorder.batchspec import ArrayOps, check_batch

#: safetensors dtypes (as the capture's batch.json names them) that load exactly as numpy.
NUMPY_DTYPES = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "uint16",
                          "uint32", "uint64", "float16", "float32", "float64"})


class NeedsTorch(Exception):
    """The batch cannot be checked exactly in numpy."""


class Tensor(np.ndarray):
    """A numpy view of a captured torch tensor (a plain ``ndarray`` was captured as numpy
    and is not a tensor to the checks, as in the torch path)."""


def _tensor_nodes(node: Any, depth: int = 0):
    if depth > 64 or not isinstance(node, dict):
        return
    if node.get("type") in ("tensor", "ndarray", "npscalar"):
        yield node
    for x in node.get("items", []) or []:
        yield from _tensor_nodes(x, depth + 1)
    for x in node.get("values", []) or []:
        yield from _tensor_nodes(x, depth + 1)


def load_batch_numpy(record: dict):
    """The captured batch with numpy arrays (captured tensors as :class:`Tensor`)."""
    from ..errors import InvalidInputError
    from ..location import as_path, load_safetensors
    from ..runschema import read_run_json
    from ..tensortree import unflatten_tree
    from .loading import capture_file

    sp, tp = capture_file(record, "batch.json"), capture_file(record, "batch.safetensors")
    try:
        structure = read_run_json(as_path(sp), "batch.json")
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{sp}: unreadable batch structure ({exc})") from exc
    root = structure.get("root") if isinstance(structure, dict) else None
    for node in _tensor_nodes(root):
        if str(node.get("dtype", "")).replace("torch.", "") not in NUMPY_DTYPES:
            raise NeedsTorch(node.get("dtype"))
    try:
        arrays = load_safetensors(tp, numpy=True)
    except Exception as exc:  # safetensors raises its own error types
        raise NeedsTorch(str(exc)) from exc
    if any(a.dtype.name not in NUMPY_DTYPES for a in arrays.values()):
        raise NeedsTorch("dtype")
    tensors = {k: _Loaded(v) for k, v in arrays.items()}
    return _unwrap(unflatten_tree(structure, tensors))


class _Loaded:
    """What :func:`debugkit.tensortree.unflatten_tree` expects of a loaded tensor."""

    def __init__(self, a: np.ndarray):
        self.a = a

    def numpy(self):
        return _Plain(self.a)


class _Plain:
    def __init__(self, a: np.ndarray):
        self.a = a

    def __getitem__(self, key):
        return self.a[key]


def _unwrap(obj: Any) -> Any:
    if isinstance(obj, _Loaded):
        return obj.a.view(Tensor)
    if isinstance(obj, _Plain):
        return obj.a
    if isinstance(obj, list):
        return [_unwrap(x) for x in obj]
    if isinstance(obj, tuple):
        items = [_unwrap(x) for x in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, dict):
        return {k: _unwrap(v) for k, v in obj.items()}
    return obj


def _is_float(t) -> bool:
    return t.dtype.kind == "f"


def _is_int(t) -> bool:
    return isinstance(t, Tensor) and t.dtype.kind in "iu"


def _item(x):
    return np.asarray(x).item()


def find_target(batch: Any) -> tuple[tuple, Any] | None:
    """As :func:`debugkit.replay.datachecks.find_target`, on numpy arrays."""
    from . import datachecks

    return datachecks.find_target(batch, _is_int)


def _pos(p: list) -> int | list | None:
    return p[0] if len(p) == 1 else (p if p else None)


def group_by_sample(mask, values, n_batch: int | None) -> tuple[list[dict], int]:
    """As :func:`debugkit.replay.datachecks.group_by_sample`."""
    from .datachecks import MAX_POSITIONS, MAX_SAMPLES

    mask, values = np.asarray(mask), np.asarray(values)
    if not bool(mask.any()):
        return [], 0
    batched = mask.ndim >= 1 and n_batch is not None and mask.shape[0] == n_batch
    if not batched:
        pos = np.argwhere(mask)[:MAX_POSITIONS].tolist()
        return [{"sample": None,
                 "positions": [q for q in (_pos(p) for p in pos) if q is not None],
                 "values": [_item(values[tuple(p)]) for p in pos]}], 1
    rows = np.flatnonzero(mask.reshape(mask.shape[0], -1).any(axis=1))
    out = []
    for r in rows[:MAX_SAMPLES].tolist():
        m, v = mask[r], values[r]
        if m.ndim == 0:
            out.append({"sample": r, "positions": [], "values": [_item(v)]})
            continue
        pos = np.argwhere(m)[:MAX_POSITIONS].tolist()
        out.append({"sample": r, "positions": [_pos(p) for p in pos],
                    "values": [_item(v[tuple(p)]) for p in pos]})
    return out, int(rows.size)


def find_bad_labels(target, num_classes: int, *, path: tuple, n_batch: int | None) -> dict:
    """As :func:`debugkit.replay.datachecks.find_bad_labels` (``source="num_classes"``)."""
    from .datachecks import IGNORE_INDEX

    t = np.asarray(target)
    n_batch = n_batch if n_batch is not None else (int(t.shape[0]) if t.ndim else None)
    bad = ((t < 0) | (t >= num_classes)) & (t != IGNORE_INDEX)
    samples, n = group_by_sample(bad, t, n_batch)
    return {"path": list(path), "num_classes": int(num_classes), "source": "num_classes",
            "count": int(bad.sum()), "total": int(t.size), "samples": samples, "n_samples": n}


def find_nonfinite(batch: Any, *, skip: tuple | None, n_batch: int | None) -> list[dict]:
    """As :func:`debugkit.replay.datachecks.find_nonfinite`."""
    from .loading import iter_leaves

    out = []
    for path, t in iter_leaves(batch):
        if skip is not None and tuple(path) == tuple(skip):
            continue
        if not isinstance(t, Tensor) or not _is_float(t):
            continue
        a = np.asarray(t)
        bad = ~np.isfinite(a)
        if not bool(bad.any()):
            continue
        samples, n = group_by_sample(bad, a, n_batch)
        out.append({"path": list(path), "shape": list(a.shape), "nan": int(np.isnan(a).sum()),
                    "posinf": int((a == np.inf).sum()), "neginf": int((a == -np.inf).sum()),
                    "samples": samples, "n_samples": n})
    return out


class NumpyOps(ArrayOps):
    """:class:`debugkit.recorder.batchspec.ArrayOps` for numpy (no torch import)."""

    def __init__(self):
        self.isfinite, self.isnan, self.isinf = np.isfinite, np.isnan, np.isinf

    def is_tensor(self, v) -> bool:
        return isinstance(v, Tensor)

    def dtype(self, v) -> str:
        return v.dtype.name

    def size(self, v) -> int:
        return int(v.size)

    def is_float(self, v) -> bool:
        return _is_float(v)

    def ranged(self, v) -> bool:
        return v.dtype.kind != "b"

    def minmax(self, v) -> tuple:
        return _item(v.min()), _item(v.max())

    def total(self, v):
        return _item(v.sum())

    def falses(self, v):
        return np.zeros(v.shape, dtype=bool)

    def bad_samples(self, bad) -> list[int | None]:
        if bad.ndim == 0:
            return [None]
        return [int(i) for i in np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))]


NUMPY_OPS = NumpyOps()


def check_spec(spec, batch, dataset_indices=None) -> list:
    """As :meth:`debugkit.recorder.batchspec.BatchSpec.check`, on a numpy batch."""
    return check_batch(spec, batch, dataset_indices, NUMPY_OPS)
