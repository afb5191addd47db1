"""An LSTM classifier whose head's learning-rate schedule grows (``4 ** step``: a warm-up
lambda with its sign flipped) while the backbone is frozen by a 0 learning rate. The
head's weights grow with the LR, and so do the gradients reaching the LSTM through
them: about 1e24 after 48 steps, far past float32's ~1.8e19 where a sum of squares in
float32 overflows, while every element and the loss stay finite. The Recorder runs with
``halt_on_nonfinite=True``: it must not stop.

    python tests/scenarios/jobs/lstm_lr_growth.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from debugkit import Recorder  # noqa: E402


class LSTMClassifier(nn.Module):
    def __init__(self, n_in: int = 8, hidden: int = 16, n_classes: int = 4):
        super().__init__()
        self.lstm = nn.LSTM(n_in, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def build_model() -> nn.Module:
    return LSTMClassifier()


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=48)
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD([{"params": model.lstm.parameters()}, {"params": model.head.parameters()}], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [lambda s: 0.0, lambda s: 4.0 ** s])
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-lstm-lr-growth", halt_on_nonfinite=True,
                   model_factory="tests.scenarios.jobs.lstm_lr_growth:build_model", flush_every_s=0.5)
    gen = torch.Generator().manual_seed(1)
    with rec:
        for _ in range(a.steps):
            x = torch.randn(16, 12, 8, generator=gen)
            y = torch.randint(0, 4, (16,), generator=gen)
            with rec.step((x, y)):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()
            sched.step()


if __name__ == "__main__":
    main()
