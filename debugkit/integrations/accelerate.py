"""Hugging Face Accelerate: the plain-loop Recorder works under it unchanged.

::

    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    rec = Recorder("runs/x", model, optimizer, config=accelerator_config(accelerator))
    with rec:
        for batch in loader:
            with rec.step(batch), accelerator.accumulate(model):
                loss = F.cross_entropy(model(batch[0]), batch[1])
                rec.log(loss=loss)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()

- ``accelerator.prepare`` returns an ``AcceleratedOptimizer``, which never runs hooks
  registered on itself; the Recorder registers them on the optimizer inside it. That
  inner ``step`` runs only at gradient-accumulation boundaries and, with fp16, after the
  grad scaler unscaled the gradients, so norms taken there are unscaled.
- Under ``accumulate``, each ``rec.step`` is one micro-batch; between optimizer steps
  the norms are those of the gradients accumulated so far (taken at the step's end).
- ``mixed_precision="bf16"`` (CPU autocast, or CUDA): parameters and gradients stay
  float32, so nothing changes for the Recorder. Under several processes
  (``accelerate launch``) each process is a rank of ``torch.distributed`` and writes
  ``ranks/<rank>/`` as with ``torchrun``.

See docs/integrations.md and ``examples/accelerate_loop.py``.
"""

from __future__ import annotations


def accelerator_config(accelerator) -> dict:
    """The facts of an ``accelerate.Accelerator`` worth keeping in the run's config.

    Returns
    -------
    dict
        ``mixed_precision``, ``gradient_accumulation_steps``, ``num_processes``,
        ``distributed_type`` and ``device`` (strings and ints, JSON-able).
    """
    return {
        "mixed_precision": str(accelerator.mixed_precision),
        "gradient_accumulation_steps": int(accelerator.gradient_accumulation_steps),
        "num_processes": int(accelerator.num_processes),
        "distributed_type": str(getattr(accelerator.distributed_type, "value",
                                        accelerator.distributed_type)),
        "device": str(accelerator.device),
    }


__all__ = ["accelerator_config"]
