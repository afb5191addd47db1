"""A small real training run that checkpoints, optionally with a frozen layer or NaN weights."""

from __future__ import annotations

import torch

from debugkit import Recorder
from tests._training import train_step


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))


def train_with_checkpoints(run_dir, *, freeze_first=False, nan_at=None, dtype=None):
    model = _model() if dtype is None else _model().to(dtype)
    params = list(model.parameters())
    opt = torch.optim.SGD(params[2:] if freeze_first else params, lr=0.1)
    with Recorder(run_dir, model, optimizer=opt, flush_every_s=0.05) as rec:
        for s in range(6):
            x, y = torch.randn(16, 8, dtype=dtype), torch.randint(0, 3, (16,))
            train_step(rec, model, opt, (x, y))
            if nan_at is not None and s == nan_at:
                with torch.no_grad():
                    params[2][0, 0] = float("nan")
            if s % 2 == 1:
                rec.checkpoint()
