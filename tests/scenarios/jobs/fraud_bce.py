"""A fraud classifier trained with a hand-written binary cross-entropy,
``-(y * log(sigmoid(z)) + (1 - y) * log(1 - sigmoid(z)))``. One legitimate transaction
(dataset index 203, label 0) has an amount 1500x the usual scale: its logit reaches the
20s, ``sigmoid`` rounds to exactly 1.0 in float32, ``log(1 - 1.0)`` is ``-inf`` and the
loss is ``inf`` at step 6 (sample 11 of batches of 32, in order), while every output of
the model is finite. The gradients are NaN at that step as a consequence.

    python tests/scenarios/jobs/fraud_bce.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from debugkit import Recorder  # noqa: E402

N, FEATURES, BATCH = 320, 6, 32
WHALE = 203  # the legitimate transaction with a huge amount


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 1))


def step(model, batch):
    """One step's loss (the replay calls it too)."""
    x, y = batch
    p = torch.sigmoid(model(x).squeeze(1))
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


def make_data():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(N, FEATURES, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 1.0).float()
    x[WHALE] = 1500.0 * torch.tensor([-1.0, 1.0, 0.5, -0.5, 0.8, 0.2])  # an amount 1500x the usual
    y[WHALE] = 0.0  # legitimate
    return TensorDataset(x, y)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-fraud-bce", halt_on_nonfinite=True,
                   model_factory="tests.scenarios.jobs.fraud_bce:build_model",
                   step_fn="tests.scenarios.jobs.fraud_bce:step", flush_every_s=0.5)
    loader = rec.track(DataLoader(make_data(), batch_size=BATCH, shuffle=False))
    with rec:
        for x, y in loader:
            with rec.step((x, y)):
                loss = step(model, (x, y))
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
