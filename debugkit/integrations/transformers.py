"""Hugging Face ``transformers.Trainer``: record a run with one ``TrainerCallback``.

::

    from debugkit.integrations.transformers import DebugkitCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[DebugkitCallback("runs/x")])
    trainer.train()

A ``TrainerCallback`` is handed the model and the optimizer but never the batch, the loss
or the trainer, and has no exception hook. So the callback drives a
:class:`debugkit.recorder.watch.Watch` (the hooks of :func:`debugkit.watch`) and adds
what the Trainer tells callbacks:

- ``on_train_begin``: attaches the hooks to the model and to the optimizer inside the
  Trainer's ``AcceleratedOptimizer``; the model factory is :func:`model_from_config`
  with the model's class name and ``config.to_dict()``, the replay step
  :func:`replay_training_step` (``model(**batch)``, whose output carries the loss).
- steps: one recorded step per optimizer step (the Trainer's ``global_step`` minus one);
  its batch is the latest micro-batch the model was called with (``model(**inputs)``:
  ``input_ids``, ``attention_mask``, ``labels``...); gradient norms are taken in the
  optimizer's step pre-hook, i.e. *after* the Trainer's gradient clipping
  (``max_grad_norm``); the Trainer's own pre-clipping total is kept as the ``grad_norm``
  scalar.
- dataset indices: the train loader the Trainer hands callbacks has its batch sampler
  tracked in place (its iterators start after ``on_train_begin``), and each training
  forward takes the next index list, so a capture names the samples' dataset indices.
- ``on_log``: every number the Trainer logs (``loss``, ``grad_norm``, ``learning_rate``,
  ``epoch``, evaluation metrics), at the step it was logged after.
- failures: an exception raised in the model's forward (an out-of-range label, a shape
  error) is captured with its batch where it is raised (a forward hook with
  ``always_call=True``: the Trainer offers no ``on_exception``); a NaN/Inf gradient as the
  Recorder does; any other exception that ends the script through ``sys.excepthook``.
  We chose this over a ``Trainer`` subclass so that ``callbacks=[...]`` is the only change.
- ``on_train_end``: closes the run.
"""

from __future__ import annotations

import json
import numbers

try:
    import transformers
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised only without transformers
    from ..errors import MissingDependencyError

    raise MissingDependencyError("transformers", "debugkit.integrations.transformers",
                                 "debugkit[transformers]") from exc

from ..errors import InvalidInputError

FACTORY = "debugkit.integrations.transformers:model_from_config"
STEP_FN = "debugkit.integrations.transformers:replay_training_step"
MSG_ARCHITECTURE = ("model_from_config(architecture={name!r}): expected the name of a "
                    "transformers PreTrainedModel class (e.g. 'BertForSequenceClassification')")


def model_from_config(architecture: str, config: dict):
    """Rebuild a transformers model from its class name and ``config.to_dict()`` (no download).

    Only classes exported by ``transformers`` that subclass ``PreTrainedModel`` are
    accepted: the name comes from a run directory, which may come from anyone.
    """
    cls = getattr(transformers, architecture, None) if isinstance(architecture, str) else None
    if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
        raise InvalidInputError(MSG_ARCHITECTURE.format(name=architecture))
    return cls(cls.config_class.from_dict(dict(config)))


def replay_training_step(model, batch):
    """The step ``debugkit replay`` runs: ``model(**batch)`` (its output holds the loss)."""
    return model(**batch)


def _number(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


class DebugkitCallback(TrainerCallback):
    """Record a ``Trainer`` run into a debugkit run directory (see the module docstring).

    Parameters
    ----------
    run_dir : str or Path
        Where the run is written. A URL (``s3://bucket/runs/x``) is
        recorded through a local spool and uploaded after every flush (see ``Recorder``).
    num_classes : int, optional
        Classes of the target, for replay's label check (default: ``config.num_labels``
        for single-label classification models).
    model_factory, factory_kwargs, step_fn : optional
        Override :func:`model_from_config` / :func:`replay_training_step` (for a model
        class that ``transformers`` does not export).
    dataset_factory, dataset_kwargs : optional
        ``"module:callable"`` that rebuilds the train dataset as
        ``dataset_factory(**dataset_kwargs)``, so that replay of a failure raised while
        the Trainer's loader fetched or collated a batch re-fetches its dataset indices
        (see :meth:`debugkit.Recorder.track`).
    **recorder_kwargs
        Passed to :class:`debugkit.Recorder` (``log_every``, ``halt_on_nonfinite``,
        ``name``, ``flush_every_s``...).
    """

    def __init__(self, run_dir, *, num_classes=None, model_factory=None, factory_kwargs=None,
                 step_fn=STEP_FN, dataset_factory=None, dataset_kwargs=None, **recorder_kwargs):
        self.run_dir = run_dir
        self.dataset_factory = dataset_factory
        self.dataset_kwargs = dataset_kwargs
        self.num_classes = num_classes
        self.model_factory = model_factory
        self.factory_kwargs = factory_kwargs
        self.step_fn = step_fn
        self.recorder_kwargs = recorder_kwargs
        self.watch = None

    @property
    def recorder(self):
        """The :class:`debugkit.Recorder` (None before training starts)."""
        return self.watch.recorder if self.watch is not None else None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        from ..recorder.watch import Watch
        from ._spec import json_kwargs

        if self.watch is not None or model is None or optimizer is None:
            return
        config = getattr(model, "config", None)
        factory, fkwargs = self.model_factory, self.factory_kwargs
        if factory is None and config is not None:
            factory = FACTORY
            # The config's own JSON form (id2label's int keys become strings; from_dict
            # turns them back).
            fkwargs = {"architecture": type(model).__name__,
                       "config": json.loads(config.to_json_string(use_diff=False))}
        num_classes = self.num_classes
        if num_classes is None and config is not None and type(model).__name__.endswith(
                "ForSequenceClassification") and getattr(config, "num_labels", 1) > 1 \
                and getattr(config, "problem_type", None) in (None, "single_label_classification"):
            num_classes = int(config.num_labels)
        run_config = {"training_args": json_kwargs(args.to_sanitized_dict(), "TrainingArguments") or {}}
        self.watch = Watch(model, optimizer, self.run_dir,
                           config={**run_config, **self.recorder_kwargs.pop("config", {})},
                           model_factory=factory, factory_kwargs=fkwargs or {},
                           step_fn=self.step_fn if factory else None, num_classes=num_classes,
                           **self.recorder_kwargs)
        loader = kwargs.get("train_dataloader")
        if loader is not None:  # the Trainer's sampler: captures name dataset indices
            self.watch.track_in_place(loader, dataset_factory=self.dataset_factory,
                                      dataset_kwargs=self.dataset_kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.watch is None or not logs:
            return
        numbers_ = {k: v for k, v in ((k, _number(v)) for k, v in logs.items()) if v is not None}
        if numbers_:
            self.watch.log(**numbers_)

    def on_train_end(self, args, state, control, **kwargs):
        if self.watch is not None:
            self.watch.close()


__all__ = ["DebugkitCallback", "model_from_config", "replay_training_step", "FACTORY", "STEP_FN"]
