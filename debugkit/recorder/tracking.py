"""Know which dataset indices make up each batch a DataLoader yields."""

from __future__ import annotations

import collections
import warnings

from ..errors import DebugkitWarning


class IndexSink(collections.deque):
    """The index lists a tracked batch sampler handed out, oldest first (consumers pop
    them as batches arrive), plus ``recent``: the last :data:`RECENT` ``(position in the
    epoch, index list)`` pairs, to find the batch a failed fetch was building."""

    RECENT = 256

    def __init__(self):
        super().__init__()
        self.recent: collections.deque = collections.deque(maxlen=self.RECENT)

    def record(self, pos: int, idx: list) -> None:
        self.append(idx)
        self.recent.append((pos, idx))

    def at(self, pos: int) -> list | None:
        """The index list drawn at ``pos`` in the current epoch, if still remembered."""
        return next((idx for p, idx in self.recent if p == pos), None)

    def reset(self) -> None:
        self.clear()
        self.recent.clear()


def failed_batch_position(exc: BaseException) -> int | None:
    """The position in its epoch of the batch a DataLoader iterator failed to build: the
    number of batches that iterator had yielded (``_num_yielded`` of the iterator whose
    ``__next__`` is on the traceback), or None."""
    tb = getattr(exc, "__traceback__", None)
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("torch/utils/data/dataloader.py"):
            it = tb.tb_frame.f_locals.get("self")
            n = getattr(it, "_num_yielded", None)
            if isinstance(n, int):
                found = n
        tb = tb.tb_next
    return found


def failed_batch_indices(exc: BaseException, sink) -> list | None:
    """The dataset indices of the batch whose fetch raised ``exc``, from a tracked
    loader's sink (by its position in the epoch; else the oldest unconsumed list)."""
    if sink is None:
        return None
    pos = failed_batch_position(exc)
    if pos is not None and isinstance(sink, IndexSink):
        idx = sink.at(pos)
        if idx is not None:
            return idx
    return sink[0] if sink else None


class _TrackingBatchSampler:
    """Wraps a batch sampler and remembers every index list it hands out, in order."""

    def __init__(self, inner, sink: collections.deque):
        self.inner = inner
        self.sink = sink

    def __iter__(self):
        self.sink.reset()  # index lists drawn for an epoch that was cut short
        for pos, idx in enumerate(self.inner):
            self.sink.record(pos, [int(i) for i in idx])
            yield idx

    def __len__(self):
        return len(self.inner)


class TrackedLoader:
    """Iterates like the wrapped DataLoader and tells the Recorder each batch's indices.

    The DataLoader's main process draws index lists from the batch sampler (also with
    worker processes) and yields batches in that order (``in_order=True``, the default),
    so the n-th batch yielded belongs to the n-th index list drawn.
    """

    def __init__(self, loader, sink: collections.deque, on_batch, on_error=None):
        self.loader = loader
        self._sink = sink
        self._on_batch = on_batch
        self._on_error = on_error

    def __iter__(self):
        self._sink.reset()
        it = iter(self.loader)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except Exception as exc:
                # Fetching or collating the next batch raised (in this process or in a
                # worker, re-raised here in order): its index list is the next one drawn.
                if self._on_error is not None:
                    self._on_error(exc, self._sink.popleft() if self._sink else None, self.loader)
                raise
            self._on_batch(self._sink.popleft() if self._sink else None)
            yield batch

    def __len__(self):
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)


def track_loader(loader, on_batch, on_error=None):
    """Return a loader that reports each batch's dataset indices to ``on_batch``.

    Loaders without a batch sampler (iterable datasets, ``batch_size=None``) or with
    ``in_order=False`` are returned unchanged with a warning: their indices cannot be
    known from the main process.
    """
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader) or loader.batch_sampler is None \
            or not getattr(loader, "in_order", True):
        warnings.warn("debugkit: this loader's dataset indices cannot be tracked; "
                      "captures will not name dataset indices", DebugkitWarning, stacklevel=3)
        return loader
    sink = IndexSink()
    kwargs = dict(
        batch_sampler=_TrackingBatchSampler(loader.batch_sampler, sink),
        num_workers=loader.num_workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=loader.generator,
        persistent_workers=loader.persistent_workers,
        pin_memory_device=loader.pin_memory_device,
    )
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    return TrackedLoader(DataLoader(loader.dataset, **kwargs), sink, on_batch, on_error)


def _tracking_iter(self):
    sink = type(self)._debugkit_sink
    sink.reset()  # index lists drawn for an epoch that was cut short
    for pos, idx in enumerate(super(type(self), self).__iter__()):
        sink.record(pos, [int(i) for i in idx])
        yield idx


def track_in_place(loader) -> collections.deque | None:
    """Make an existing DataLoader report its index lists into the returned deque.

    For loaders a framework iterates itself (Lightning's): the n-th batch the loader
    yields belongs to the n-th index list popped from the deque. The loader's batch
    sampler becomes an instance of a subclass of its own class whose ``__iter__`` records
    what it yields, so a framework that rebuilds the sampler from its class (Lightning
    adding a ``DistributedSampler`` under DDP: ``type(batch_sampler)(sampler,
    batch_size=..., drop_last=...)``) keeps tracking, into the same deque. An iterator
    created before this call is not affected. Returns None (with a warning) for loaders
    whose indices cannot be known, as :func:`track_loader`.
    """
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader) or loader.batch_sampler is None \
            or not getattr(loader, "in_order", True):
        warnings.warn("debugkit: this loader's dataset indices cannot be tracked; "
                      "captures will not name dataset indices", DebugkitWarning, stacklevel=3)
        return None
    bs = loader.batch_sampler
    if hasattr(type(bs), "_debugkit_sink"):
        return type(bs)._debugkit_sink
    sink = IndexSink()
    cls = type(bs)
    bs.__class__ = type(f"Tracking{cls.__name__}", (cls,),
                        {"__iter__": _tracking_iter, "_debugkit_sink": sink,
                         "__module__": cls.__module__})
    return sink
