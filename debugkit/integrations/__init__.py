"""Adapters that record runs from the training code people already write.

- :mod:`debugkit.integrations.lightning`: ``DebugkitCallback`` for PyTorch Lightning
  (``pip install debugkit[lightning]``).
- :mod:`debugkit.integrations.transformers`: ``DebugkitCallback`` for the Hugging Face
  ``Trainer`` (``pip install debugkit[transformers]``).
- :mod:`debugkit.integrations.accelerate`: notes and a helper for the plain-loop
  Recorder under ``accelerate.Accelerator``.
- :func:`debugkit.watch` (in :mod:`debugkit.recorder.watch`): attach to a loop without
  editing it.

Each is a thin adapter over :class:`debugkit.Recorder` (``begin_step``/``end_step``/
``record_grads``); nothing here is imported by ``import debugkit``. See
docs/integrations.md.
"""
