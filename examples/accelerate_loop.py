"""The plain-loop Recorder under Hugging Face Accelerate: prepare, accumulate, bf16.

``accelerator.prepare`` wraps the optimizer in an ``AcceleratedOptimizer`` (the Recorder
hooks the optimizer inside it, so norms are taken once per real optimizer step, after
any grad-scaler unscaling); ``accelerator.accumulate`` makes ``optimizer.step()`` a no-op
on the micro-batches between steps; ``mixed_precision="bf16"`` runs the forward under
CPU autocast. Healthy run on sklearn's digits, 2 micro-batches per step::

    python -m examples.accelerate_loop --out sample_runs/accelerate-digits

The corrupted-label and NaN runs::

    python -m examples.accelerate_loop --out runs/acc-bad-label --corrupt-label 12
    python -m examples.accelerate_loop --out runs/acc-nan --data cancer
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from examples.lightning_train import load_data
from examples.watch_loop import build_model


def train(out: str, *, data: str = "digits", corrupt_label=None, epochs: int = 2,
          accumulation: int = 2, mixed_precision: str = "bf16", seed: int = 0) -> None:
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from debugkit import Recorder
    from debugkit.integrations.accelerate import accelerator_config

    set_seed(seed)
    accelerator = Accelerator(cpu=True, mixed_precision=mixed_precision,
                              gradient_accumulation_steps=accumulation)
    x, y, n_features, num_classes = load_data(data, corrupt_label)
    model = build_model(n_features, num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    rec = Recorder(out, model, optimizer, name=f"accelerate-{data}", num_classes=num_classes,
                   model_factory="examples.watch_loop:build_model",
                   factory_kwargs={"n_features": n_features, "num_classes": num_classes},
                   config=accelerator_config(accelerator),
                   halt_on_nonfinite=True, flush_every_s=0.5)
    with rec:
        for epoch in range(epochs):
            for batch in loader:
                with rec.step(batch), accelerator.accumulate(model):
                    xb, yb = batch
                    loss = F.cross_entropy(model(xb), yb)
                    rec.log(loss=loss)
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--data", choices=["digits", "cancer"], default="digits")
    p.add_argument("--corrupt-label", type=int, default=None)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--accumulation", type=int, default=2)
    p.add_argument("--mixed-precision", choices=["no", "bf16"], default="bf16")
    a = p.parse_args(argv)
    train(a.out, data=a.data, corrupt_label=a.corrupt_label, epochs=a.epochs,
          accumulation=a.accumulation, mixed_precision=a.mixed_precision)


if __name__ == "__main__":
    main()
