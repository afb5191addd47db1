"""PyTorch Lightning: record a ``Trainer.fit`` run with one callback.

::

    from debugkit.integrations.lightning import DebugkitCallback

    trainer = pl.Trainer(..., callbacks=[DebugkitCallback("runs/x", num_classes=10)])
    trainer.fit(model, datamodule)

What the callback does, hook by hook (each a call into :class:`debugkit.Recorder`):

- ``on_train_start``: builds one Recorder per rank (under DDP after the process group
  exists, so each rank writes ``ranks/<rank>/``), with the LightningModule's class as the
  model factory and its ``hparams`` as ``factory_kwargs`` (call
  ``self.save_hyperparameters()`` in ``__init__``), and wraps the train loader's batch
  sampler so captures name their dataset indices (also under ``DistributedSampler``).
  It also wraps the module's ``self.log`` to see every value the module logs.
- ``on_train_batch_start``: ``rec.begin_step(batch)`` (the batch already on the device;
  the RNG state is taken here).
- ``on_before_optimizer_step``: ``rec.record_grads()``. Lightning calls it after backward
  and after AMP unscaling, before gradient clipping. The Recorder's own optimizer hook
  is off (``grads_hook=False``): Lightning calls ``optimizer.step(closure)`` and the
  closure runs backward, so that hook would fire before the gradients exist.
- ``on_train_batch_end``: logs what the module passed to ``self.log`` during the step
  (and the step's ``loss``), then ``rec.end_step()`` (step time, memory, learning rate).
- ``on_exception``: ``rec.end_step(exception)`` captures the failing step's batch, model
  and optimizer state, RNG state and dataset indices, then closes the run as failed. An
  exception the train loader raised while fetching or collating a batch becomes a
  ``data_loading`` capture (its dataset indices, each sample re-read).
- ``on_train_end``: closes the run.

Replay (``debugkit replay RUN``) rebuilds the module with ``ModuleClass(**hparams)`` and
runs :func:`replay_training_step`, i.e. ``model.training_step(batch, 0)`` (``self.log`` is
a no-op outside a Trainer).
"""

from __future__ import annotations

import numbers

try:
    import lightning.pytorch as pl
except ImportError as exc:  # pragma: no cover - exercised only without lightning
    try:
        import pytorch_lightning as pl
    except ImportError:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("lightning", "debugkit.integrations.lightning",
                                     "debugkit[lightning]") from exc

from ._spec import MSG_NO_HPARAMS, class_spec, json_kwargs, missing_init_args

MSG_FIRST_EPOCH = ("debugkit: the train loader's dataset indices are tracked from the second "
                   "epoch on; wrap it before fit (trainer.fit(model, callback.track(loader))) "
                   "to have them in the first epoch too")
#: The replay step function a Lightning capture names.
STEP_FN = "debugkit.integrations.lightning:replay_training_step"


def replay_training_step(model, batch):
    """The step ``debugkit replay`` runs on a rebuilt LightningModule."""
    return model.training_step(batch, 0)


def _scalar(value):
    """A 0-d tensor or a finite-or-not Python number from a ``self.log`` value, else None."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach() if value.numel() == 1 else None
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Number):
        return float(value) if isinstance(value, numbers.Real) else None
    return None  # torchmetrics Metric objects and the like


class DebugkitCallback(pl.Callback):
    """Record a Lightning run into a debugkit run directory (see the module docstring).

    Parameters
    ----------
    run_dir : str or Path
        Where the run is written (all ranks write into it). A URL (``s3://bucket/runs/x``) is
        recorded through a local spool and uploaded after every flush (see ``Recorder``).
    num_classes : int, optional
        Classes of the classification target, for replay's label check (default:
        ``hparams["num_classes"]`` when the module has it).
    model_factory : str, optional
        ``"module:callable"`` that rebuilds the module (default: the module's class,
        called with ``factory_kwargs``).
    factory_kwargs : dict, optional
        Default: the module's ``hparams``.
    step_fn : str, optional
        Default: :data:`STEP_FN` (``model.training_step(batch, 0)``).
    track_indices : bool
        Wrap the train loader's batch sampler so captures name dataset indices.
    dataset_factory : str, optional
        ``"module:callable"`` that rebuilds the train loader's dataset as
        ``dataset_factory(**dataset_kwargs)``: replay of a failure raised while the loader
        fetched or collated a batch then re-fetches its indices from the rebuilt dataset
        (see :meth:`debugkit.Recorder.track`).
    dataset_kwargs : dict, optional
        Its keyword arguments (plain JSON data).
    **recorder_kwargs
        Passed to :class:`debugkit.Recorder` (``log_every``, ``halt_on_nonfinite``,
        ``guard``, ``hang_timeout_s``, ``name``, ``flush_every_s``...).
    """

    def __init__(self, run_dir, *, num_classes=None, model_factory=None, factory_kwargs=None,
                 step_fn=STEP_FN, track_indices=True, dataset_factory=None, dataset_kwargs=None,
                 **recorder_kwargs):
        super().__init__()
        self.dataset_factory = dataset_factory
        self.dataset_kwargs = dataset_kwargs
        self.run_dir = run_dir
        self.num_classes = num_classes
        self.model_factory = model_factory
        self.factory_kwargs = factory_kwargs
        self.step_fn = step_fn
        self.track_indices = track_indices
        self.recorder_kwargs = recorder_kwargs
        self.recorder = None
        self._sink = None
        self._logged: dict = {}  # names the module logged in this step
        self._in_step = False
        self._module = None

    # ------------------------------------------------------------------ set-up
    def on_train_start(self, trainer, pl_module):
        from ..recorder import Recorder

        hparams = dict(getattr(pl_module, "hparams", {}) or {})
        factory = self.model_factory or class_spec(type(pl_module))
        kwargs = self.factory_kwargs if self.factory_kwargs is not None else \
            json_kwargs(hparams, f"{type(pl_module).__name__}.hparams")
        if not self.model_factory and kwargs is not None:
            missing = missing_init_args(type(pl_module), kwargs)
            if missing:
                import warnings

                from ..errors import DebugkitWarning

                warnings.warn(MSG_NO_HPARAMS.format(cls=type(pl_module).__name__,
                                                    params=", ".join(missing)),
                              DebugkitWarning, stacklevel=2)
                factory = None
        num_classes = self.num_classes if self.num_classes is not None else hparams.get("num_classes")
        optimizers = list(trainer.optimizers)
        config = {"hparams": json_kwargs(hparams, "hparams") or {},
                  "trainer": {"max_epochs": trainer.max_epochs, "max_steps": trainer.max_steps,
                              "precision": str(trainer.precision),
                              "accumulate_grad_batches": trainer.accumulate_grad_batches,
                              "strategy": type(trainer.strategy).__name__,
                              "world_size": trainer.world_size,
                              "gradient_clip_val": trainer.gradient_clip_val}}
        self.recorder = Recorder(
            self.run_dir, pl_module, optimizers[0] if optimizers else None,
            config={**config, **self.recorder_kwargs.pop("config", {})},
            model_factory=factory if kwargs is not None or self.model_factory else None,
            factory_kwargs=kwargs or {}, step_fn=self.step_fn if factory else None,
            num_classes=num_classes, grads_hook=False, **self.recorder_kwargs)
        dataset = getattr(trainer.train_dataloader, "dataset", None)
        if self.dataset_factory is not None and dataset is not None:
            self.recorder.set_dataset_factory(dataset, self.dataset_factory, self.dataset_kwargs)
        if self.track_indices:
            self._track(trainer)
        self._wrap_log(pl_module)

    def track(self, loader):
        """Make ``loader`` tell captures each batch's dataset indices; returns ``loader``.

        ``trainer.fit(model, cb.track(loader))``: needed for the first epoch's indices,
        because Lightning starts the train loader's first iterator before any callback
        hook runs. Without it, the callback tracks the loader from the second epoch on.
        The loader stays a DataLoader (Lightning still adds its ``DistributedSampler``).
        """
        from ..recorder.tracking import track_in_place

        self._sink = track_in_place(loader)
        return loader

    def _track(self, trainer):
        import warnings

        from ..errors import DebugkitWarning
        from ..recorder.tracking import track_in_place

        loader = trainer.train_dataloader
        if loader is None:
            return
        tracked = hasattr(type(getattr(loader, "batch_sampler", None)), "_debugkit_sink")
        self._sink = track_in_place(loader)
        if not tracked and self._sink is not None:
            warnings.warn(MSG_FIRST_EPOCH, DebugkitWarning, stacklevel=2)

    def _wrap_log(self, pl_module):
        """See every ``self.log(name, value)`` of the module (``log_dict`` calls it too)."""
        original = pl_module.log
        logged = self._logged

        def log(name, value, *args, **kwargs):
            if self._in_step and isinstance(name, str):
                v = _scalar(value)
                if v is not None:  # now, so the gradient check sees this step's loss
                    self.recorder.log(**{name: v})
                    logged[name] = True
            return original(name, value, *args, **kwargs)

        log.__wrapped__ = original
        pl_module.log = log
        self._module = pl_module

    def _unwrap_log(self):
        if self._module is not None and "log" in vars(self._module):
            del self._module.log
        self._module = None

    # ------------------------------------------------------------------ steps
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.recorder is None:
            return
        indices = self._sink.popleft() if self._sink else None
        self._logged.clear()
        self._in_step = True
        self.recorder.begin_step(batch, indices=indices)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self.recorder is not None:
            self.recorder.record_grads()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        rec = self.recorder
        if rec is None or rec.current_step is None:
            return
        self._in_step = False
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        logged_loss = any("loss" in k.rsplit("/", 1)[-1].lower() for k in self._logged)
        if not logged_loss and _scalar(loss) is not None:  # the module logged no loss itself
            rec.log(loss=_scalar(loss))
        rec.end_step()

    # ------------------------------------------------------------------ the end
    def on_exception(self, trainer, pl_module, exception):
        rec = self.recorder
        self._in_step = False
        if rec is None:
            return
        from ..recorder.dataload import raised_by_data_loader

        loader = getattr(trainer, "train_dataloader", None)
        if raised_by_data_loader(exception) and loader is not None:
            # fetching or collating the next batch failed: its index list is the next one
            from ..recorder.tracking import failed_batch_indices

            rec.capture_data_failure(exception, failed_batch_indices(exception, self._sink), loader)
        if rec.current_step is not None:  # captured here, unless the Recorder raised it
            rec.end_step(exception)
        elif not getattr(exception, "_debugkit_captured", False):
            rec.event("error", error_type=type(exception).__name__,
                      message=str(exception)[:2000], step=None)
        self._unwrap_log()
        rec.close(failed=True)

    def on_train_end(self, trainer, pl_module):
        self._unwrap_log()
        if self.recorder is not None:
            self.recorder.close()

    def teardown(self, trainer, pl_module, stage):
        self._unwrap_log()


__all__ = ["DebugkitCallback", "replay_training_step", "STEP_FN"]
