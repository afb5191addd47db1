"""Breast-cancer classifier with an engineered ratio feature that is 0/0 for some tumours.

sklearn's bundled breast-cancer data (569 tumours, 30 measurements) gets one more
feature, the concavity per concave point (``mean concavity / mean concave points``),
and is standardised with pandas, which skips missing values. Thirteen tumours have no
concavity at all: both measurements are exactly 0, the ratio is 0/0 = NaN, and the
first batch holding one of them gives a NaN loss. The Recorder (``halt_on_nonfinite``)
captures that step and stops the run::

    python -m examples.cancer_ratio --out sample_runs/cancer-nan-input
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

RATIO = "concavity per concave point"


def build_model(n_features: int = 31, hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))


def load_features():
    """(features float32 [569, 31], labels int64 [569], feature names)."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer(as_frame=True)
    frame = d.data.copy()
    frame[RATIO] = frame["mean concavity"] / frame["mean concave points"]  # 0/0 -> NaN
    frame = (frame - frame.mean()) / frame.std()  # pandas skips the NaNs
    return (torch.tensor(frame.to_numpy(dtype=np.float32)),
            torch.tensor(d.target.to_numpy(), dtype=torch.long), list(frame.columns))


def train(out: str, *, epochs: int = 3, lr: float = 0.01, batch_size: int = 16, seed: int = 0) -> None:
    from debugkit import Recorder

    torch.manual_seed(seed)
    x, y, names = load_features()
    model = build_model(x.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    rec = Recorder(out, model, optimizer=opt, name="cancer-ratio-feature",
                   config={"lr": lr, "batch_size": batch_size, "epochs": epochs, "seed": seed,
                           "features": len(names)},
                   model_factory="examples.cancer_ratio:build_model",
                   factory_kwargs={"n_features": int(x.shape[1]), "hidden": 32}, num_classes=2,
                   halt_on_nonfinite=True, flush_every_s=0.5)
    g = torch.Generator().manual_seed(seed)
    with rec:
        for epoch in range(epochs):
            loader = rec.track(DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True,
                                          generator=g))
            for batch in loader:
                with rec.step(batch):
                    xb, yb = batch
                    loss = F.cross_entropy(model(xb), yb)
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
