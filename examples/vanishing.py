"""A deep sigmoid MLP on sklearn's digits: ten hidden layers of sigmoid units with
PyTorch's default initialisation. Each sigmoid passes back at most a quarter of the
gradient, so the first layers get gradients many orders of magnitude smaller than the
last ones, and the loss barely moves from ln(10)::

    python -m examples.vanishing --out sample_runs/digits-vanishing

The script finishes normally (exit status 0): nothing crashes, the model just does not
learn, which is what makes this failure easy to miss.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from examples.digits import NUM_CLASSES, DigitsDataset, build_model, load_splits

DEPTH = 10
HIDDEN = 64


def train(out: str, *, epochs: int = 3, lr: float = 0.1, batch_size: int = 32, seed: int = 0,
          flush_every_s: float = 0.5) -> None:
    from debugkit import Recorder

    torch.manual_seed(seed)
    (xa, ya), _ = load_splits(seed)
    data = DigitsDataset(xa, ya)
    model = build_model(HIDDEN, depth=DEPTH, activation="sigmoid")
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rec = Recorder(out, model, optimizer=opt, name="digits-vanishing",
                   config={"lr": lr, "depth": DEPTH, "hidden": HIDDEN, "activation": "sigmoid",
                           "batch_size": batch_size, "epochs": epochs, "momentum": 0.9, "seed": seed},
                   model_factory="examples.digits:build_model",
                   factory_kwargs={"hidden": HIDDEN, "depth": DEPTH, "activation": "sigmoid"},
                   num_classes=NUM_CLASSES, flush_every_s=flush_every_s)
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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args(argv)
    train(a.out, epochs=a.epochs, lr=a.lr)


if __name__ == "__main__":
    main()
