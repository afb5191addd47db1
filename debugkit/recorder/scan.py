"""Scan a whole dataset offline against a :class:`~debugkit.recorder.batchspec.BatchSpec`.

:func:`scan_dataset` walks a dataset in order with a DataLoader (default collate) and
checks every batch, so a bad sample (a label out of range, a NaN pixel, a sample of the
wrong shape, a sample whose loading raises) is found by its dataset index before a
training run meets it in epoch 2::

    spec = BatchSpec.load("batch_spec.json")
    report = scan_dataset(dataset, spec, batch_size=256)
    report["violating_indices"]        # [1474]

The spec's batch dimension (dim 0 of every tensor) is relaxed to any size: a spec
inferred from training batches bounds it by the training batch size, which says
nothing about a sample, and the scan's own batch size (or its last, shorter batch)
must not be reported. A rule broken by a batch as a whole (dtype, shape, structure,
or samples that cannot be collated together) is re-checked sample by sample, so only
the samples that break it are named.
"""

from __future__ import annotations

import dataclasses
import math
import time

from ..errors import InvalidInputError
from .batchspec import BatchSpec, Dim, TensorSpec, Violation

LOAD_RULE = "load"  # a sample whose loading (dataset[i]) raised

MSG_NOT_A_DATASET = ("{what}: expected a torch Dataset (map-style or iterable), a DataLoader "
                     "or an iterable of samples")
MSG_SCAN_ARG = "scan_dataset: {field}={value!r}: expected {expected}"


class _LoadFailure:
    """Stands in for a sample whose ``dataset[i]`` raised (picklable, for workers)."""

    def __init__(self, exc: BaseException):
        self.error_type = type(exc).__name__
        self.message = str(exc)[:2000]


class _Indexed:
    """Map-style view of ``dataset`` at ``indices``: item ``j`` is ``(indices[j], sample)``."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, j):
        i = self.indices[j]
        try:
            return i, self.dataset[i]
        except Exception as exc:  # reported as a "load" violation of index i
            return i, _LoadFailure(exc)


def _collate(items):
    """``(indices, batch or None, load failures, raw samples when collating failed)``."""
    from torch.utils.data import default_collate

    good = [(i, s) for i, s in items if not isinstance(s, _LoadFailure)]
    failed = [(i, s) for i, s in items if isinstance(s, _LoadFailure)]
    idx = [i for i, _ in good]
    if not good:
        return idx, None, failed, None
    try:
        return idx, default_collate([s for _, s in good]), failed, None
    except Exception:  # samples of different shapes/types: checked one by one
        return idx, None, failed, [s for _, s in good]


def _collate_plain(samples):
    """Collate for an iterable dataset: indices are assigned in the main process."""
    from torch.utils.data import default_collate

    try:
        return default_collate(samples), None
    except Exception:
        return None, samples


def relax_batch_dim(spec: BatchSpec) -> BatchSpec:
    """A copy of ``spec`` whose batch dimension (dim 0 of each tensor) may have any size.

    A symbolic dim 0 keeps its name (and stays shared across tensors) with bounds
    ``[0, None]``; so does every other use of that name. A fixed dim 0 becomes the
    symbolic ``"batch"``.
    """
    names = {t.shape[0].name for t in spec.tensors.values()
             if t.shape and isinstance(t.shape[0], Dim)}
    tensors = {}
    for k, t in spec.tensors.items():
        shape = t.shape
        if shape:
            shape = tuple(Dim(d.name, 0, None) if isinstance(d, Dim) and d.name in names else d
                          for d in shape)
            if isinstance(shape[0], int):
                shape = (Dim("batch", 0, None),) + shape[1:]
        tensors[k] = TensorSpec(dtype=t.dtype, shape=shape, range=t.range, finite=t.finite)
    key = (lambda k: int(k)) if spec.structure == "sequence" else (lambda k: k)
    return BatchSpec({key(k): v for k, v in tensors.items()}, structure=spec.structure)


def _take(batch, j: int):
    """Sample ``j`` of a collated batch, as a batch of one."""
    import torch

    def one(v):
        if isinstance(v, torch.Tensor):
            return v[j:j + 1] if v.dim() else v
        if isinstance(v, (list, tuple)) and len(v) > j:
            return type(v)(v[j:j + 1]) if isinstance(v, list) else v[j:j + 1]
        return v

    if isinstance(batch, torch.Tensor):
        return one(batch)
    if isinstance(batch, dict):
        return {k: one(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(one(v) for v in batch) if isinstance(batch, list) else \
            tuple(one(v) for v in batch)
    return batch


def _blame(found: list[Violation], index, position: int) -> list[Violation]:
    """Violations of a batch of one sample, each naming that sample."""
    return [dataclasses.replace(v, sample=position, dataset_index=index) for v in found]


def _check_one(spec: BatchSpec, sample, index, position: int) -> list[Violation]:
    """Check one raw sample, collated alone (a batch of one)."""
    from torch.utils.data import default_collate

    try:
        batch = default_collate([sample])
    except Exception as exc:
        return [Violation("<sample>", position, index, "structure",
                          f"cannot be collated ({type(exc).__name__}: {exc})")]
    return _blame(spec.check(batch), index, position)


def _check_batch(spec: BatchSpec, idx, batch, raw, refetch=None) -> list[Violation]:
    """Violations of one scanned batch, each naming its dataset index where one exists.

    ``raw``: the samples, when they could not be collated together. ``refetch(i)``
    reads sample ``i`` again (map-style datasets), to re-check a batch that breaks a
    rule as a whole from its raw samples (collating may have promoted a dtype).
    """
    if raw is not None:
        return [v for j, (s, i) in enumerate(zip(raw, idx)) for v in _check_one(spec, s, i, j)]
    found = spec.check(batch, dataset_indices=idx)
    if all(v.dataset_index is not None for v in found):
        return found
    # A rule broken by the batch as a whole: find the samples that break it.
    per_sample = []
    for j, i in enumerate(idx):
        if refetch is not None:
            try:
                sample = refetch(i)
            except Exception as exc:  # it loaded a moment ago; report, do not stop
                per_sample.append(Violation("<sample>", j, i, LOAD_RULE,
                                            f"loading it raised {type(exc).__name__}: {exc}"))
                continue
            per_sample.extend(_check_one(spec, sample, i, j))
        else:
            per_sample.extend(_blame(spec.check(_take(batch, j)), i, j))
    if not per_sample:  # no single sample breaks it: report the batch-level finding
        return found
    return per_sample


def _row(v: Violation) -> dict:
    return {"index": v.dataset_index, "tensor": v.tensor, "rule": v.rule,
            "message": v.message, "sample": v.sample}


def _check_args(batch_size, num_workers, max_seconds, limit):
    def bad(field, value, expected):
        return InvalidInputError(MSG_SCAN_ARG.format(field=field, value=value, expected=expected))

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise bad("batch_size", batch_size, "an integer >= 1")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise bad("num_workers", num_workers, "an integer >= 0")
    if max_seconds is not None and (isinstance(max_seconds, bool)
                                    or not isinstance(max_seconds, (int, float))
                                    or not math.isfinite(max_seconds) or max_seconds <= 0):
        raise bad("max_seconds", max_seconds, "a number > 0 or None")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise bad("limit", limit, "an integer >= 1 or None")


def as_dataset(obj, what: str = "dataset"):
    """``(dataset, map_style)`` of a Dataset, a DataLoader (its dataset) or an iterable.

    Raises :class:`InvalidInputError` for anything else.
    """
    from torch.utils.data import DataLoader, IterableDataset

    if isinstance(obj, DataLoader):
        obj = obj.dataset
    if isinstance(obj, IterableDataset):
        return obj, False
    if hasattr(obj, "__getitem__") and hasattr(obj, "__len__") and not isinstance(obj, (str, bytes, dict)):
        return obj, True
    if hasattr(obj, "__iter__") and not isinstance(obj, (str, bytes, dict)):
        return obj, False
    raise InvalidInputError(MSG_NOT_A_DATASET.format(what=f"{what} is a {type(obj).__name__}"))


def scan_dataset(dataset, spec: BatchSpec, *, batch_size: int = 256, num_workers: int = 0,
                 max_seconds: float | None = 600.0, limit: int | None = None) -> dict:
    """Check every sample of ``dataset`` against ``spec``; return what breaks it.

    Parameters
    ----------
    dataset : torch Dataset, DataLoader or iterable of samples
        A map-style dataset is read in index order ``0..len-1`` (a DataLoader's own
        sampler and batch size are ignored: its dataset is re-read); an iterable one in
        its order, the index being the position in the stream (with workers, an
        IterableDataset must shard itself, as for training; a plain iterable is read
        without workers).
    spec : BatchSpec
        What a batch must look like; its batch dimension is relaxed (see
        :func:`relax_batch_dim`).
    batch_size, num_workers : int
        Of the scanning DataLoader (``shuffle=False``, default collate).
    max_seconds : float or None
        Stop after the batch during which this much time has passed.
    limit : int or None
        Scan at most this many samples (the first ones).

    Returns
    -------
    dict
        ``samples`` (scanned), ``violations`` (list of ``{"index", "tensor", "rule",
        "message", "sample"}``: ``index`` the dataset index, None for a batch-level
        finding no single sample breaks; ``sample`` the position in its scanned batch;
        ``rule`` one of guard's rules or ``"load"``), ``violating_indices`` (sorted,
        unique), ``complete`` (every sample scanned), ``stopped`` (None, ``"time"`` or
        ``"limit"``), ``seconds``.
    """
    from torch.utils.data import DataLoader, IterableDataset

    _check_args(batch_size, num_workers, max_seconds, limit)
    if not isinstance(spec, BatchSpec):
        raise InvalidInputError(f"scan_dataset: spec is a {type(spec).__name__}, "
                                "expected a debugkit.BatchSpec")
    data, map_style = as_dataset(dataset)
    check = relax_batch_dim(spec)
    t0 = time.monotonic()
    violations: list[Violation] = []
    scanned = 0
    stopped = None

    if map_style:
        n = len(data)
        indices = range(n if limit is None else min(n, limit))
        if limit is not None and n > limit:
            stopped = "limit"
        loader = DataLoader(_Indexed(data, indices), batch_size=batch_size, shuffle=False,
                            num_workers=num_workers, collate_fn=_collate)
        it = iter(loader)
        try:
            for idx, batch, failed, raw in it:
                for i, f in failed:
                    violations.append(Violation("<sample>", None, i, LOAD_RULE,
                                                f"loading it raised {f.error_type}: {f.message}"))
                if idx:
                    violations.extend(_check_batch(check, idx, batch, raw, data.__getitem__))
                scanned += len(idx) + len(failed)
                if max_seconds is not None and time.monotonic() - t0 >= max_seconds \
                        and scanned < len(indices):
                    stopped = "time"
                    break
        finally:
            del it
    else:
        if isinstance(data, IterableDataset):
            stream, workers = data, num_workers
        else:  # a plain iterable: every worker would replay all of it
            stream, workers = _stream(data), 0
        loader = DataLoader(stream, batch_size=batch_size, num_workers=workers,
                            collate_fn=_collate_plain)
        it = iter(loader)
        try:
            for batch, raw in it:
                size = len(raw) if raw is not None else _batch_len(batch)
                idx = list(range(scanned, scanned + size))
                if limit is not None and scanned + size > limit:
                    keep = limit - scanned
                    idx = idx[:keep]
                    raw = raw[:keep] if raw is not None else None
                    batch = None if raw is not None else _head(batch, keep)
                    stopped = "limit"
                violations.extend(_check_batch(check, idx, batch, raw))
                scanned += len(idx)
                if stopped:
                    break
                if limit is not None and scanned >= limit:
                    if next(it, None) is not None:  # more samples were there
                        stopped = "limit"
                    break
                if max_seconds is not None and time.monotonic() - t0 >= max_seconds:
                    if next(it, None) is not None:
                        stopped = "time"
                    break
        finally:
            del it

    rows = [_row(v) for v in violations]
    return {
        "samples": scanned,
        "violations": rows,
        "violating_indices": sorted({r["index"] for r in rows if r["index"] is not None}),
        "complete": stopped is None,
        "stopped": stopped,
        "seconds": round(time.monotonic() - t0, 3),
    }


def _batch_len(batch) -> int:
    import torch

    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    vals = list(batch.values()) if isinstance(batch, dict) else list(batch) \
        if isinstance(batch, (list, tuple)) else []
    for v in vals:
        if isinstance(v, torch.Tensor) and v.dim():
            return int(v.shape[0])
        if isinstance(v, (list, tuple)):
            return len(v)
    return 1


def _head(batch, n: int):
    """The first ``n`` samples of a collated batch."""
    import torch

    def one(v):
        if isinstance(v, torch.Tensor):
            return v[:n] if v.dim() else v
        return v[:n] if isinstance(v, (list, tuple)) else v

    if isinstance(batch, torch.Tensor):
        return one(batch)
    if isinstance(batch, dict):
        return {k: one(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(one(v) for v in batch)
    return batch


def _stream(iterable):
    """An IterableDataset over a plain iterable (a generator, a map of samples...)."""
    from torch.utils.data import IterableDataset

    class _Stream(IterableDataset):
        def __iter__(self):
            return iter(iterable)

    return _Stream()


__all__ = ["scan_dataset", "relax_batch_dim", "as_dataset", "LOAD_RULE"]
