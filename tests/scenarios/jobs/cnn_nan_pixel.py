"""A small CNN on sklearn's bundled 8x8 digits. One scan in the data is corrupt: a NaN
pixel (a failed read written as NaN). Shuffled with a fixed seed, it lands in step 10's
batch; the loss goes NaN and the Recorder (``halt_on_nonfinite=True``) stops there.

    python tests/scenarios/jobs/cnn_nan_pixel.py --out RUN
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

BAD_ROW = 300      # dataset index of the corrupt scan
BAD_PIXEL = (3, 5)  # its NaN pixel (row, column)


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 2 * 2, 10))


def make_data():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x[BAD_ROW, 0, BAD_PIXEL[0], BAD_PIXEL[1]] = float("nan")
    return TensorDataset(x, torch.tensor(d.target, dtype=torch.long))


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-cnn-nan-pixel", halt_on_nonfinite=True,
                   num_classes=10, model_factory="tests.scenarios.jobs.cnn_nan_pixel:build_model",
                   flush_every_s=0.5)
    loader = rec.track(DataLoader(make_data(), batch_size=32, shuffle=True,
                                  generator=torch.Generator().manual_seed(5)))
    with rec:
        for step, (x, y) in enumerate(loader):
            if step >= 40:
                break
            with rec.step((x, y)):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
