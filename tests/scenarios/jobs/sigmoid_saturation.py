"""A sigmoid MLP regressing a sensor reading. From dataset index 480 on (step 30 with
batches of 16, in order), the sensor feed switched from standardised values to raw
units (around 5000): the first layer's pre-activations reach the thousands, every
sigmoid unit is pinned at 0 or 1, its slope rounds to exactly 0, and the first layer's
gradients are exactly zero from step 30 to the end of the run. Nothing crashes.

    python tests/scenarios/jobs/sigmoid_saturation.py --out RUN
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

N, FEATURES, BATCH = 640, 8, 16
RAW_FROM = 480  # first dataset index in raw units: batch 30


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.Sigmoid(), nn.Linear(32, 16), nn.Sigmoid(),
                         nn.Linear(16, 1))


def make_data():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(N, FEATURES, generator=g)
    y = x[:, :3].sum(dim=1, keepdim=True)
    x[RAW_FROM:] = 20000.0 + 50.0 * x[RAW_FROM:]  # raw sensor units, not standardised
    return TensorDataset(x, y)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.manual_seed(1)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-sigmoid-saturation",
                   flush_every_s=0.5)
    loader = rec.track(DataLoader(make_data(), batch_size=BATCH, shuffle=False))
    with rec:
        for x, y in loader:
            with rec.step((x, y)):
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
