"""A two-layer LightningModule recorded with debugkit's Lightning callback.

Healthy run on sklearn's digits (640 images, 2 epochs of 20 steps)::

    python -m examples.lightning_train --out sample_runs/lightning-digits

The corrupted-label run: row 37 of the training images is annotated 12 for a 10-class
problem, and ``F.cross_entropy`` raises ``IndexError: Target 12 is out of bounds.`` in
the step whose batch holds it; the callback's ``on_exception`` captures that step::

    python -m examples.lightning_train --out runs/lightning-bad-label --corrupt-label 12

The NaN run: sklearn's breast-cancer data with the 0/0 "concavity per concave point"
feature of ``examples.cancer_ratio``; the first batch holding a tumour without concavity
gives a NaN loss and NaN gradients, captured in ``on_before_optimizer_step``::

    python -m examples.lightning_train --out runs/lightning-nan --data cancer

Two processes under Lightning's DDP strategy on the CPU (gloo), each rank recording its
own steps, memory and step times::

    python -m examples.lightning_train --out runs/lightning-ddp --devices 2
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

N_DIGITS = 640   # images used: 20 batches of 32 per epoch
CORRUPT_ROW = 37


class Classifier(pl.LightningModule):
    """Two linear layers with a ReLU between them, trained with SGD on cross-entropy."""

    def __init__(self, n_features: int = 64, num_classes: int = 10, hidden: int = 32,
                 lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(1) == y).float().mean()
        self.log("train_loss", loss)
        self.log("train_acc", acc, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def load_data(name: str, corrupt_label: int | None):
    """(features float32, labels int64, n_features, num_classes) of a real sklearn dataset."""
    if name == "cancer":
        from examples.cancer_ratio import load_features

        x, y, names = load_features()
        return x, y, len(names), 2
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data[:N_DIGITS], dtype=torch.float32) / 16.0
    y = torch.tensor(d.target[:N_DIGITS], dtype=torch.long)
    if corrupt_label is not None:
        y[CORRUPT_ROW] = corrupt_label  # one corrupted annotation
    return x, y, 64, 10


def train(out: str, *, data: str = "digits", corrupt_label: int | None = None,
          epochs: int = 2, devices: int = 1, batch_size: int = 32, seed: int = 0,
          precision: str = "32-true", halt_on_nonfinite: bool = True) -> None:
    from debugkit.integrations.lightning import DebugkitCallback

    pl.seed_everything(seed, workers=True, verbose=False)
    x, y, n_features, num_classes = load_data(data, corrupt_label)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = Classifier(n_features=n_features, num_classes=num_classes)
    debugkit = DebugkitCallback(out, name=f"lightning-{data}", flush_every_s=0.5,
                                halt_on_nonfinite=halt_on_nonfinite)
    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=devices,
        strategy="ddp" if devices > 1 else "auto", precision=precision,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, log_every_n_steps=1,
        callbacks=[debugkit])
    trainer.fit(model, debugkit.track(loader))  # track(): dataset indices from the first epoch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--data", choices=["digits", "cancer"], default="digits")
    p.add_argument("--corrupt-label", type=int, default=None,
                   help="label to write into training row 37 (12 makes the run crash)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--devices", type=int, default=1, help="processes (>1: DDP on the CPU)")
    p.add_argument("--precision", default="32-true", help="Lightning precision, e.g. bf16-mixed")
    a = p.parse_args(argv)
    train(a.out, data=a.data, corrupt_label=a.corrupt_label, epochs=a.epochs, devices=a.devices,
          precision=a.precision)


if __name__ == "__main__":
    main()
