"""Train an MLP on sklearn's bundled digits with the debugkit Recorder.

Healthy run::

    python -m examples.digits --out sample_runs/digits-mlp

The corrupted-label run: after the first epoch the training set grows by a second
stage of data (the held-out split, as in "train on everything" fine-tuning) whose
annotations hold one corrupted row, label 12 for a 10-class problem. The DataLoader
(two worker processes) serves it in epoch 2 and ``F.cross_entropy`` raises
``IndexError: Target 12 is out of bounds.`` (on a GPU: ``CUDA error: device-side
assert triggered``)::

    python -m examples.digits --out sample_runs/digits-bad-label --corrupt-label 12

The same run with a batch guard (``--guard skip``): every batch is checked against
:func:`batch_spec` before the step, and the batch holding label 12 is skipped (counted
and logged as a ``batch_skipped`` event) instead of killing the run::

    python -m examples.digits --out sample_runs/digits-guarded --corrupt-label 12 --guard skip
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import ConcatDataset, DataLoader, Dataset

NUM_CLASSES = 10
# Index (within the second-stage data) of the row whose label is corrupted.
CORRUPT_ROW = 37


def build_model(hidden: int = 64, depth: int = 2, activation: str = "relu") -> nn.Module:
    """The digits MLP: 64 inputs, ``depth`` hidden layers of ``hidden`` units, 10 outputs."""
    act = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[activation]
    layers, width = [], 64
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), act()]
        width = hidden
    layers.append(nn.Linear(width, NUM_CLASSES))
    return nn.Sequential(*layers)


class DigitsDataset(Dataset):
    """8x8 digit images as 64 floats in [0, 1] with integer labels."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x = torch.tensor(x, dtype=torch.float32) / 16.0
        self.y = torch.tensor(y, dtype=torch.long)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def load_splits(seed: int = 0):
    """(stage-1 train, stage-2 extra) splits of sklearn's digits, 80 % / 20 %."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(d.target))
    cut = int(0.8 * len(order))
    a, b = order[:cut], order[cut:]
    return (d.data[a], d.target[a]), (d.data[b], d.target[b])


def batch_spec(batch_size: int = 32):
    """What a digits batch must look like: 64 finite floats per sample, a label in [0, 10)."""
    from debugkit import BatchSpec

    return BatchSpec({
        0: {"dtype": "float32", "shape": [("batch", 1, batch_size), 64], "finite": True},
        1: {"dtype": "int64", "shape": [("batch", 1, batch_size)], "range": (0, NUM_CLASSES)},
    })


def train(out: str, *, epochs: int = 3, lr: float = 0.1, hidden: int = 64, batch_size: int = 32,
          corrupt_label: int | None = None, num_workers: int = 2, seed: int = 0,
          flush_every_s: float = 0.5, guard: str | None = None) -> None:
    from debugkit import Recorder

    torch.manual_seed(seed)
    (xa, ya), (xb, yb) = load_splits(seed)
    if corrupt_label is not None:
        yb = yb.copy()
        yb[CORRUPT_ROW] = corrupt_label  # one corrupted annotation in the stage-2 data
    stage1 = DigitsDataset(xa, ya)
    everything = ConcatDataset([stage1, DigitsDataset(xb, yb)])
    model = build_model(hidden)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    name = "digits-guarded" if guard else f"digits-mlp{'-bad-label' if corrupt_label is not None else ''}"
    extra = {"guard": batch_spec(batch_size), "guard_action": guard} if guard else {}
    rec = Recorder(out, model, optimizer=opt, name=name, **extra,
                   config={"lr": lr, "hidden": hidden, "batch_size": batch_size, "epochs": epochs,
                           "momentum": 0.9, "seed": seed, "num_workers": num_workers},
                   model_factory="examples.digits:build_model", factory_kwargs={"hidden": hidden},
                   num_classes=NUM_CLASSES, flush_every_s=flush_every_s)
    g = torch.Generator().manual_seed(seed)
    with rec:
        for epoch in range(epochs):
            data = stage1 if epoch == 0 else everything
            loader = rec.track(DataLoader(data, batch_size=batch_size, shuffle=True,
                                          num_workers=num_workers, generator=g))
            for batch in loader:
                with rec.step(batch) as s:
                    if s.skipped:  # the guard rejected this batch (guard_action="skip")
                        continue
                    x, y = batch
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss, epoch=epoch)
                    opt.step()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--corrupt-label", type=int, default=None,
                   help="label to write into one stage-2 row (12 makes the run crash)")
    p.add_argument("--guard", choices=["raise", "skip"], default=None,
                   help="check every batch against batch_spec(): raise, or skip a bad batch")
    a = p.parse_args(argv)
    train(a.out, epochs=a.epochs, lr=a.lr, hidden=a.hidden, batch_size=a.batch_size,
          corrupt_label=a.corrupt_label, num_workers=a.num_workers, guard=a.guard)


if __name__ == "__main__":
    main()
