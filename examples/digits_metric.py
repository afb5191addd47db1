"""Metric learning on sklearn's digits with a triplet loss; a zero distance breaks backward.

Each sample of a batch is pulled towards a positive (another sample of its class in
the batch) and pushed from a negative (a sample of another class). When a class has a
single sample in the batch, the sampler falls back to the sample itself as its
positive, the anchor-positive distance is ``torch.sqrt`` of exactly 0, and although the
loss is finite, the backward of ``sqrt`` at 0 is infinite: the gradients become NaN.
The Recorder (``halt_on_nonfinite``) captures the step and stops the run::

    python -m examples.digits_metric --out sample_runs/digits-metric-zero-distance
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class PairDistance(nn.Module):
    """Euclidean distance between matching rows of two embedding batches."""

    def forward(self, a, b):
        return torch.sqrt(((a - b) ** 2).sum(dim=1))


class EmbeddingNet(nn.Module):
    """Maps an 8x8 digit (64 floats) to a ``dim``-dimensional embedding."""

    def __init__(self, dim: int = 16, hidden: int = 64):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.distance = PairDistance()

    def forward(self, x):
        return self.embed(x)


def build_model(dim: int = 16, hidden: int = 64) -> nn.Module:
    return EmbeddingNet(dim, hidden)


def partners(y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positive, negative) partner index of each sample of the batch.

    The positive is the next sample of the same class; a class with one sample in the
    batch falls back to the sample itself (the bug this example records).
    """
    n = len(y)
    same = y[:, None] == y[None, :]
    order = torch.arange(n)
    pos = torch.empty(n, dtype=torch.long)
    neg = torch.empty(n, dtype=torch.long)
    for i in range(n):
        mates = order[same[i] & (order != i)]
        pos[i] = mates[0] if len(mates) else i
        others = order[~same[i]]
        neg[i] = others[(i * 7) % len(others)]
    return pos, neg


def triplet_step(model, batch, margin: float = 1.0):
    """One step's loss: the triplet margin loss of every sample against its partners."""
    x, y = batch
    z = model(x)
    pos, neg = partners(y)
    d_pos = model.distance(z, z[pos])
    d_neg = model.distance(z, z[neg])
    return F.relu(d_pos - d_neg + margin).mean()


def train(out: str, *, epochs: int = 3, lr: float = 0.01, batch_size: int = 80, seed: int = 0) -> None:
    from sklearn.datasets import load_digits

    from debugkit import Recorder

    torch.manual_seed(seed)
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rec = Recorder(out, model, optimizer=opt, name="digits-metric",
                   config={"lr": lr, "batch_size": batch_size, "epochs": epochs, "seed": seed,
                           "margin": 1.0},
                   model_factory="examples.digits_metric:build_model",
                   factory_kwargs={"dim": 16, "hidden": 64},
                   step_fn="examples.digits_metric:triplet_step",
                   halt_on_nonfinite=True, flush_every_s=0.5)
    g = torch.Generator().manual_seed(seed)
    with rec:
        for epoch in range(epochs):
            loader = rec.track(DataLoader(TensorDataset(x, y), batch_size=batch_size,
                                          shuffle=True, generator=g))
            for batch in loader:
                with rec.step(batch):
                    loss = triplet_step(model, batch)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss, epoch=epoch)
                    opt.step()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args(argv)
    train(a.out, epochs=a.epochs)


if __name__ == "__main__":
    main()
