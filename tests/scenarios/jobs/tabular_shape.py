"""An MLP on sklearn's bundled wine table (13 features). A second data source was merged
in with one column fewer (its ``proline`` column was dropped upstream); the DataLoader
serves those rows from step 6 on and the first Linear layer raises ``mat1 and mat2
shapes cannot be multiplied``.

    python tests/scenarios/jobs/tabular_shape.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from debugkit import Recorder  # noqa: E402

BATCH = 16
GOOD_BATCHES = 6  # batches 0-5 come from the first source


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(13, 32), nn.ReLU(), nn.Linear(32, 3))


def batches():
    from sklearn.datasets import load_wine

    d = load_wine()
    x = torch.tensor(d.data, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    y = torch.tensor(d.target, dtype=torch.long)
    g = torch.Generator().manual_seed(2)
    order = torch.randperm(len(y), generator=g)
    for b in range(len(y) // BATCH):
        idx = order[b * BATCH:(b + 1) * BATCH]
        xb = x[idx] if b < GOOD_BATCHES else x[idx][:, :12]  # the second source lacks a column
        yield xb, y[idx]


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-tabular-shape", num_classes=3,
                   model_factory="tests.scenarios.jobs.tabular_shape:build_model", flush_every_s=0.5)
    with rec:
        for xb, yb in batches():
            with rec.step((xb, yb)):
                loss = nn.functional.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()


if __name__ == "__main__":
    main()
