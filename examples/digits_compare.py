"""Short digits MLP runs made to be compared with ``debugkit compare``.

The same training as :mod:`examples.digits` (the same model factory), shortened to a
fixed number of steps, single-threaded and without DataLoader workers, so that two runs
with the same arguments are bit-identical and two runs that differ in one argument
differ only by it::

    python -m examples.digits_compare --out runs/base
    python -m examples.digits_compare --out runs/same              # identical to base
    python -m examples.digits_compare --out runs/lr --lr 0.5       # another learning rate
    python -m examples.digits_compare --out runs/unlabelled --unlabelled 0.25

``--unlabelled F`` is the label-corrupted dataset: an export step wrote a fraction F of
the rows without their annotation, as PyTorch's ``ignore_index`` (-100).
``F.cross_entropy`` skips those rows silently, so the run trains on less data without any
error; only the labels' value range (the learned batch spec) and the data fingerprint
show it.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from examples.digits import NUM_CLASSES, DigitsDataset, build_model, load_splits

IGNORE_INDEX = -100  # PyTorch's default ignore_index of cross_entropy


def train(out: str, *, steps: int = 60, lr: float = 0.1, hidden: int = 64, batch_size: int = 32,
          unlabelled: float = 0.0, seed: int = 0, halt_on_nonfinite: bool = False) -> int:
    """Train for ``steps`` steps into the run directory ``out``; returns the steps done."""
    from debugkit import Recorder

    torch.set_num_threads(1)  # the same reduction order in every run
    torch.manual_seed(seed)
    (x, y), _ = load_splits(seed)
    if unlabelled:
        y = y.copy()
        rng = np.random.default_rng(1234)
        y[rng.random(len(y)) < unlabelled] = IGNORE_INDEX
    data = DigitsDataset(x, y)
    model = build_model(hidden)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    rec = Recorder(out, model, optimizer=opt,
                   config={"lr": lr, "hidden": hidden, "batch_size": batch_size, "steps": steps,
                           "momentum": 0.9, "seed": seed, "unlabelled": unlabelled},
                   model_factory="examples.digits:build_model", factory_kwargs={"hidden": hidden},
                   num_classes=NUM_CLASSES, flush_every_s=0.5, halt_on_nonfinite=halt_on_nonfinite)
    done = 0
    with rec:
        while done < steps:
            for batch in rec.track(DataLoader(data, batch_size=batch_size, shuffle=True,
                                              generator=g)):
                if done >= steps:
                    break
                with rec.step(batch):
                    xb, yb = batch
                    loss = F.cross_entropy(model(xb), yb, ignore_index=IGNORE_INDEX)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss)
                    opt.step()
                done += 1
    return done


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--unlabelled", type=float, default=0.0,
                   help="fraction of rows whose label is exported as -100 (ignore_index)")
    p.add_argument("--halt-on-nonfinite", action="store_true",
                   help="stop at the first NaN/Inf loss or gradient (captured as a failure)")
    a = p.parse_args(argv)
    train(a.out, steps=a.steps, lr=a.lr, hidden=a.hidden, unlabelled=a.unlabelled, seed=a.seed,
          halt_on_nonfinite=a.halt_on_nonfinite)


if __name__ == "__main__":
    main()
