"""A deep ReLU MLP on sklearn's digits whose learning-rate schedule has a typo: the
``StepLR`` meant to divide the learning rate by 10 each epoch multiplies it by 10
(``gamma=10`` for ``gamma=0.1``). Epoch 1 trains at 0.1, epoch 2 at 1.0, epoch 3 at 10:
the gradient norms explode and the loss goes to NaN early in epoch 3, where the
Recorder (``halt_on_nonfinite=True``) captures the step and stops the run::

    python -m examples.exploding --out sample_runs/digits-exploding

The script exits with status 1 (``debugkit.NonFiniteError``).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from examples.digits import NUM_CLASSES, DigitsDataset, build_model, load_splits

DEPTH = 6
HIDDEN = 64


def train(out: str, *, epochs: int = 4, lr: float = 0.1, gamma: float = 10.0, batch_size: int = 32,
          seed: int = 0, flush_every_s: float = 0.5) -> None:
    from debugkit import Recorder

    torch.manual_seed(seed)
    (xa, ya), _ = load_splits(seed)
    data = DigitsDataset(xa, ya)
    model = build_model(HIDDEN, depth=DEPTH)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    # The bug: gamma=10 where 0.1 was meant.
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=gamma)
    rec = Recorder(out, model, optimizer=opt, name="digits-exploding",
                   config={"lr": lr, "gamma": gamma, "depth": DEPTH, "hidden": HIDDEN,
                           "batch_size": batch_size, "epochs": epochs, "momentum": 0.9, "seed": seed},
                   model_factory="examples.digits:build_model",
                   factory_kwargs={"hidden": HIDDEN, "depth": DEPTH},
                   num_classes=NUM_CLASSES, flush_every_s=flush_every_s, halt_on_nonfinite=True)
    g = torch.Generator().manual_seed(seed)
    with rec:
        for epoch in range(epochs):
            loader = rec.track(DataLoader(data, batch_size=batch_size, shuffle=True, generator=g))
            for batch in loader:
                with rec.step(batch):
                    x, y = batch
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss, epoch=epoch)
                    opt.step()
            sched.step()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--gamma", type=float, default=10.0, help="StepLR gamma (the bug: 10)")
    a = p.parse_args(argv)
    train(a.out, epochs=a.epochs, lr=a.lr, gamma=a.gamma)


if __name__ == "__main__":
    main()
