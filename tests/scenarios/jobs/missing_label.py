"""An MLP classifying tabular rows into 5 classes. The labels come from a spreadsheet
export that wrote a missing label as -1 (dataset index 150 only); DataLoader workers
serve the rows, and at step 9 (sample 6 of batches of 16, in order)
``F.cross_entropy`` raises ``IndexError: Target -1 is out of bounds``.

    python tests/scenarios/jobs/missing_label.py --out RUN
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

N, FEATURES, CLASSES, BATCH = 320, 10, 5, 16
MISSING_AT = 150  # the row whose label was exported as -1


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, CLASSES))


def make_data():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(N, FEATURES, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    y[MISSING_AT] = -1  # "missing" in the spreadsheet
    return TensorDataset(x, y)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-missing-label", num_classes=CLASSES,
                   model_factory="tests.scenarios.jobs.missing_label:build_model", flush_every_s=0.5)
    loader = rec.track(DataLoader(make_data(), batch_size=BATCH, shuffle=False, num_workers=2))
    with rec:
        for x, y in loader:
            with rec.step((x, y)):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
