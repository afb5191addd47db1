"""Attach the Recorder to a training loop without editing the loop: :func:`watch`.

::

    w = debugkit.watch(model, optimizer, run_dir="runs/x")
    for x, y in loader:                       # the loop is not touched
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(); loss.backward(); optimizer.step()

How each part is recorded, through hooks only:

- **steps**: a step opens at the first training-mode forward of ``model`` (with autograd
  on) after the previous ``optimizer.step()``, and closes in the optimizer's step
  post-hook; gradient-accumulation micro-batches fall into the step they feed.
- **gradient norms**: the Recorder's optimizer step pre-hook (after backward).
- **the batch**: the latest inputs of ``model``'s forward (a forward pre-hook): the
  positional argument alone, the positional arguments as a tuple, or the keyword
  arguments as a dict when ``model(**batch)`` is called.
- **failures**: an exception raised inside ``model``'s forward is captured right there,
  with that batch (a forward hook with ``always_call=True``). Any other exception that
  leaves the loop (backward, loss, optimizer) is captured from ``sys.excepthook`` when it
  ends the script, or from ``__exit__`` when ``watch`` is used as a context manager
  (``with debugkit.watch(...):``, which also works in notebooks, where IPython bypasses
  ``sys.excepthook``). A NaN/Inf gradient is captured as the Recorder does (``nonfinite``).
- **close**: at ``w.close()``, at the end of the ``with`` block or at interpreter exit.

What it cannot see, compared with ``with rec.step(batch):``:

- the **loss** and other scalars (they never pass through the model or the optimizer):
  call ``w.log(loss=loss)`` to add them; a NaN loss whose gradients stay finite is
  then caught too;
- the **targets** when they are not model inputs (``F.cross_entropy(model(x), y)``): the
  capture holds ``x`` only, so replay runs the forward pass (and backward of its sum),
  not the loss; pass ``step_fn=`` and feed the model the whole batch to replay the loss;
- **dataset indices**, unless the loader is wrapped with ``w.track(loader)``;
- a step's **data-loading time** is counted as wait time between steps, as with
  ``rec.step``, but a step ends at ``optimizer.step()``, so work done after it (logging,
  ``lr_scheduler.step()``) counts as wait too;
- exceptions raised outside the model's forward that the loop itself catches.
"""

from __future__ import annotations

import sys

from ..errors import InvalidInputError

MSG_WATCH_MODEL = "debugkit.watch(): expected a torch.nn.Module as model, got {type}"
MSG_WATCH_OPTIMIZER = ("debugkit.watch(): expected a torch.optim.Optimizer (or a wrapper "
                       "holding one in .optimizer), got {type}")


def _as_batch(args: tuple, kwargs: dict):
    """What a capture stores from a forward call's arguments."""
    if kwargs and not args:
        return dict(kwargs)
    if not kwargs:
        return args[0] if len(args) == 1 else tuple(args)
    return {"args": list(args), **kwargs}


class Watch:
    """A :class:`~debugkit.Recorder` driven by hooks on a model and its optimizer.

    Build it with :func:`debugkit.watch`. The recorder is :attr:`recorder`; :meth:`log`,
    :meth:`track`, :meth:`checkpoint` and :meth:`event` pass through to it.
    """

    def __init__(self, model, optimizer, run_dir, *, capture_uncaught: bool = True,
                 **recorder_kwargs):
        import torch

        from .recorder import Recorder, _inner_optimizer

        if not isinstance(model, torch.nn.Module):
            raise InvalidInputError(MSG_WATCH_MODEL.format(type=type(model).__name__))
        inner = _inner_optimizer(optimizer)
        if not isinstance(inner, torch.optim.Optimizer):
            raise InvalidInputError(MSG_WATCH_OPTIMIZER.format(type=type(optimizer).__name__))
        self.model = model
        self.optimizer = optimizer
        self.recorder = Recorder(run_dir, model, optimizer, **recorder_kwargs)
        self._closed = False
        self._index_sink = None  # track_in_place(): the index lists a loader hands out
        self._index_loader = None
        # Registered after the Recorder's own post-hook, so the step is marked as
        # optimizer-stepped before it is closed.
        self._handles = [
            model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
            model.register_forward_hook(self._after_forward, with_kwargs=True, always_call=True),
            inner.register_step_post_hook(self._after_optimizer_step),
        ]
        self._prev_excepthook = None
        if capture_uncaught:
            self._prev_excepthook = sys.excepthook
            sys.excepthook = self._excepthook

    def __deepcopy__(self, memo):
        # a copy of a watched model or optimizer (an EMA copy, torch.save of the whole
        # model) copies the hooks bound to this Watch: the copy's hooks do nothing
        # (see debugkit.recorder.recorder._CopiedHooks)
        return _CopiedWatch()

    def __reduce__(self):
        return (_CopiedWatch, ())

    # ------------------------------------------------------------------ hooks
    def _before_forward(self, module, args, kwargs):
        import torch

        if self._closed or not module.training or not torch.is_grad_enabled():
            return None
        rec = self.recorder
        st = rec.current_step
        sink = self._index_sink
        idx = sink.popleft() if sink else None  # this micro-batch's dataset indices
        if st is None:
            rec.begin_step(_as_batch(args, kwargs), indices=idx)
        else:
            st.batch = _as_batch(args, kwargs)  # gradient accumulation: the latest micro-batch
            st.indices = idx
        return None

    def _after_forward(self, module, args, kwargs, output):
        exc = sys.exc_info()[1]
        if output is not None or exc is None or self._closed:
            return None  # a forward that returned (hooks run on success too)
        self._fail(exc)
        return None

    def _after_optimizer_step(self, optimizer, args, kwargs):
        if not self._closed and self.recorder.current_step is not None:
            self.recorder.end_step()

    def _fail(self, exc: BaseException) -> None:
        """Capture ``exc`` as the open step's failure (once), or record it as an event."""
        if getattr(exc, "_debugkit_captured", False):
            return
        rec = self.recorder
        if self._index_loader is not None:
            from .dataload import raised_by_data_loader

            if raised_by_data_loader(exc):  # the tracked loader failed to build a batch
                from .tracking import failed_batch_indices

                rec.capture_data_failure(exc, failed_batch_indices(exc, self._index_sink),
                                         self._index_loader)
        if rec.current_step is not None:
            rec.end_step(exc)
        else:
            rec.event("error", error_type=type(exc).__name__, message=str(exc)[:2000],
                      step=None)
        try:
            exc._debugkit_captured = True
        except AttributeError:  # built-in exceptions without a __dict__ (rare)
            pass

    def _excepthook(self, exc_type, exc, tb):
        try:
            if not self._closed and exc is not None:
                self._fail(exc)
                self.close(failed=True)
        finally:
            prev = self._prev_excepthook or sys.__excepthook__
            prev(exc_type, exc, tb)

    # ------------------------------------------------------------------ public API
    def log(self, **scalars) -> None:
        """Record scalars for the open step (see :meth:`debugkit.Recorder.log`)."""
        self.recorder.log(**scalars)

    def track(self, loader, *, dataset_factory=None, dataset_kwargs=None):
        """Wrap a DataLoader so that captures name their dataset indices (and, with
        ``dataset_factory``, replay can rebuild the dataset: see
        :meth:`debugkit.Recorder.track`)."""
        return self.recorder.track(loader, dataset_factory=dataset_factory,
                                   dataset_kwargs=dataset_kwargs)

    def track_in_place(self, loader, *, dataset_factory=None, dataset_kwargs=None) -> bool:
        """Name dataset indices for a loader that a framework iterates itself (the HF
        Trainer's): each training-mode forward of the model takes the next index list
        the loader's batch sampler handed out. Returns whether it could be tracked.
        ``dataset_factory``: as for :meth:`track`."""
        from .tracking import track_in_place

        if dataset_factory is not None:
            self.recorder.set_dataset_factory(getattr(loader, "dataset", None), dataset_factory,
                                              dataset_kwargs)
        self._index_sink = track_in_place(loader)
        self._index_loader = loader if self._index_sink is not None else None
        return self._index_sink is not None

    def checkpoint(self, *args, **kwargs):
        """See :meth:`debugkit.Recorder.checkpoint`."""
        return self.recorder.checkpoint(*args, **kwargs)

    def event(self, kind: str, **fields) -> None:
        """See :meth:`debugkit.Recorder.event`."""
        self.recorder.event(kind, **fields)

    def close(self, *, failed: bool = False) -> None:
        """Remove the hooks and close the recorder. Idempotent.

        A step still open (a forward with no optimizer step after it) is closed as a
        completed step, unless ``failed``.
        """
        if self._closed:
            return
        self._closed = True
        for h in self._handles:
            h.remove()
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._prev_excepthook or sys.__excepthook__
        rec = self.recorder
        if rec.current_step is not None and not failed:
            rec.end_step()
        rec.close(failed=failed or rec._last_failed)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and not self._closed:
            self._fail(exc)
        self.close(failed=exc is not None)
        return False


def watch(model, optimizer, run_dir, *, capture_uncaught: bool = True, **recorder_kwargs) -> Watch:
    """Record a training loop without editing it (see :mod:`debugkit.recorder.watch`).

    Parameters
    ----------
    model : torch.nn.Module
        The model the loop calls (its forward inputs are the captured batch).
    optimizer : torch.optim.Optimizer
        The optimizer the loop steps (one ``optimizer.step()`` is one recorded step).
        Accelerate's prepared optimizer is accepted.
    run_dir : str or Path
        Where the run is written. A URL (``s3://bucket/runs/x``) is
        recorded through a local spool and uploaded after every flush (see ``Recorder``).
    capture_uncaught : bool
        Chain a ``sys.excepthook`` that captures an exception ending the script.
    **recorder_kwargs
        Passed to :class:`debugkit.Recorder` (``model_factory``, ``factory_kwargs``,
        ``step_fn``, ``num_classes``, ``config``, ``log_every``, ``halt_on_nonfinite``...).

    Returns
    -------
    Watch
        Also a context manager: ``with debugkit.watch(...) as w:`` closes it and captures
        an exception leaving the block.
    """
    return Watch(model, optimizer, run_dir, capture_uncaught=capture_uncaught, **recorder_kwargs)


class _CopiedWatch:
    """What a Watch's hooks are bound to in a copy of the watched model or optimizer: a
    closed Watch, so the copy's hooks return at once and record nothing (as
    ``debugkit.recorder.recorder._CopiedHooks`` for a Recorder's own hooks)."""

    __slots__ = ()
    _closed = True
    _index_sink = None

    def __setattr__(self, name, value):
        pass

    def __reduce__(self):
        return (_CopiedWatch, ())

    def _hook(self, *args, **kwargs):
        return None

    # an unpickled copy's hooks are looked up by name (a copy.deepcopy's keep the
    # Watch's functions, which return at once on a closed Watch)
    _before_forward = _after_forward = _after_optimizer_step = _hook
