"""Train a wine classifier on lab deliveries; one delivery lacks a measurement.

Each batch is one delivery of wine samples (sklearn's bundled wine data: 13 chemical
measurements, 3 cultivars), read as records, and the collate function builds the
feature matrix the way many tabular pipelines do: into a DataFrame, dropping the
columns that are empty (``dropna(axis=1, how="all")``) and filling sporadic gaps.
One delivery came from a lab whose magnesium analyser was down: every record in it
lacks ``magnesium``, the column is dropped, the batch has 12 features instead of 13,
and the model's first layer raises ``RuntimeError: mat1 and mat2 shapes cannot be
multiplied (16x12 and 13x32)``::

    python -m examples.wine_deliveries --out sample_runs/wine-missing-feature
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

NUM_CLASSES = 3
DELIVERY_SIZE = 16
# The delivery whose records lack the magnesium measurement.
BROKEN_DELIVERY = 1
BROKEN_FEATURE = "magnesium"


class WineNet(nn.Module):
    """An encoder (Linear + ReLU) and a classification head."""

    def __init__(self, n_features: int = 13, hidden: int = 32, n_classes: int = NUM_CLASSES):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.head(self.encoder(x))


def build_model(n_features: int = 13, hidden: int = 32) -> nn.Module:
    return WineNet(n_features, hidden)


class Deliveries(Dataset):
    """Wine records (dicts of measurements) with the delivery each came in."""

    def __init__(self, seed: int = 0):
        from sklearn.datasets import load_wine

        d = load_wine(as_frame=True)
        self.features = list(d.feature_names)
        frame = d.frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
        self.mean = frame[self.features].mean()
        self.std = frame[self.features].std()
        self.records = frame.to_dict("records")
        self.delivery = [i // DELIVERY_SIZE for i in range(len(self.records))]
        for i, rec in enumerate(self.records):
            if self.delivery[i] == BROKEN_DELIVERY:
                rec[BROKEN_FEATURE] = None  # the analyser was down for this delivery

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return self.records[i]

    def batches(self, rng: np.random.Generator) -> list[list[int]]:
        """One batch per delivery, deliveries in a random order."""
        ids = sorted(set(self.delivery))
        rng.shuffle(ids)
        return [[i for i, d in enumerate(self.delivery) if d == k] for k in ids]


def make_collate(ds: Deliveries):
    def collate(records):
        import pandas as pd

        frame = pd.DataFrame.from_records(records)
        label = torch.tensor(frame.pop("target").to_numpy(), dtype=torch.long)
        frame = frame.dropna(axis=1, how="all")          # drop empty columns
        frame = frame.fillna(ds.mean[frame.columns])     # fill sporadic gaps
        x = (frame - ds.mean[frame.columns]) / ds.std[frame.columns]
        return torch.tensor(x.to_numpy(dtype=np.float32)), label
    return collate


def train(out: str, *, epochs: int = 3, lr: float = 0.05, seed: int = 0) -> None:
    from debugkit import Recorder

    torch.manual_seed(seed)
    ds = Deliveries(seed)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rec = Recorder(out, model, optimizer=opt, name="wine-deliveries",
                   config={"lr": lr, "epochs": epochs, "delivery_size": DELIVERY_SIZE, "seed": seed},
                   model_factory="examples.wine_deliveries:build_model",
                   factory_kwargs={"n_features": 13, "hidden": 32}, num_classes=NUM_CLASSES,
                   flush_every_s=0.5)
    rng = np.random.default_rng(seed)
    with rec:
        for epoch in range(epochs):
            loader = rec.track(DataLoader(ds, batch_sampler=ds.batches(rng), collate_fn=make_collate(ds)))
            for batch in loader:
                with rec.step(batch):
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
    a = p.parse_args(argv)
    train(a.out, epochs=a.epochs)


if __name__ == "__main__":
    main()
