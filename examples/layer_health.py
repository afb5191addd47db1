"""Four digits MLPs with a bad initialisation or learning rate, recorded with layer statistics
(``Recorder(layer_stats_every=10)``), one for each thing that goes wrong inside the layers
(docs/layers.md)::

    python -m examples.layer_health --case dead-relu --out sample_runs/digits-dead-relu
    python -m examples.layer_health --case saturated-sigmoid --out sample_runs/digits-saturated-sigmoid
    python -m examples.layer_health --case unscaled-init --out sample_runs/digits-unscaled-init
    python -m examples.layer_health --case adam-lr-typo --out sample_runs/digits-adam-lr-typo

- ``dead-relu``: a four-layer ReLU MLP whose biases are initialised to -1 (a sign slip for
  +1): with PyTorch's default weights (|w| <= 1/8) and inputs in [0, 1], every hidden
  pre-activation is negative, so every ReLU outputs zero for every sample, passes back no
  gradient and never recovers. The loss stays near ln(10); nothing crashes (exit status 0).
- ``saturated-sigmoid``: a sigmoid MLP, 256 units wide, whose weights are drawn from
  N(0, 1) instead of PyTorch's N(0, 1/fan_in)-like default: the hidden pre-activations
  have a standard deviation near 10, most sigmoid outputs sit at 0 or 1 and pass back
  almost no gradient. It trains slowly and finishes (exit status 0).
- ``unscaled-init``: an eight-layer ReLU MLP with the same N(0, 1) weights: each layer
  multiplies the activations by ~5.7, the logits reach ~1e6, the first update is huge and
  the loss is NaN a few steps later, where the Recorder (``halt_on_nonfinite=True``)
  captures the step and stops the run (exit status 1, ``debugkit.NonFiniteError``).
- ``adam-lr-typo``: a GELU MLP trained by Adam at lr=1e-7 (meant: 1e-3). Adam's steps
  are about lr per weight whatever the gradient, so each step moves the weights by ~1e-6
  of their size (update-to-weight ratio; 1e-3 is usual) and the loss stays where it
  started. Nothing crashes (exit status 0).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from examples.digits import NUM_CLASSES, DigitsDataset, load_splits

CASES = {
    # case: (run name, depth, hidden, activation, bias init, weight std, optimizer, lr, halt)
    "dead-relu": ("digits-dead-relu", 4, 64, "relu", -1.0, None, "sgd", 0.1, False),
    "saturated-sigmoid": ("digits-saturated-sigmoid", 3, 256, "sigmoid", None, 1.0, "sgd", 0.1,
                          False),
    "unscaled-init": ("digits-unscaled-init", 8, 64, "relu", None, 1.0, "sgd", 0.01, True),
    "adam-lr-typo": ("digits-adam-lr-typo", 2, 64, "gelu", None, None, "adam", 1e-7, False),
}
LAYER_STATS_EVERY = 10


def build_model(case: str, seed: int = 0) -> nn.Module:
    """The case's MLP (64 inputs, 10 outputs) with its bad initialisation."""
    _, depth, hidden, activation, bias, std, _, _, _ = CASES[case]
    torch.manual_seed(seed)
    act = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}[activation]
    layers: list[nn.Module] = []
    width = 64
    for _ in range(depth):
        lin = nn.Linear(width, hidden)
        with torch.no_grad():
            if bias is not None:
                lin.bias.fill_(bias)
            if std is not None:
                lin.weight.normal_(0.0, std)
        layers += [lin, act()]
        width = hidden
    layers.append(nn.Linear(width, NUM_CLASSES))
    return nn.Sequential(*layers)


def train(case: str, out: str, *, epochs: int = 3, batch_size: int = 32, seed: int = 0,
          flush_every_s: float = 0.5) -> None:
    from debugkit import Recorder

    name, depth, hidden, activation, bias, std, optim, lr, halt = CASES[case]
    (xa, ya), _ = load_splits(seed)
    data = DigitsDataset(xa, ya)
    model = build_model(case, seed)
    if optim == "adam":
        opt: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rec = Recorder(out, model, optimizer=opt, name=name,
                   config={"case": case, "lr": lr, "depth": depth, "hidden": hidden,
                           "activation": activation, "bias_init": bias, "weight_std": std,
                           "optimizer": optim, "batch_size": batch_size, "epochs": epochs,
                           "seed": seed},
                   model_factory="examples.layer_health:build_model",
                   factory_kwargs={"case": case, "seed": seed}, num_classes=NUM_CLASSES,
                   flush_every_s=flush_every_s, halt_on_nonfinite=halt,
                   layer_stats_every=LAYER_STATS_EVERY)
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
    p.add_argument("--case", choices=sorted(CASES), required=True)
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=3)
    a = p.parse_args(argv)
    train(a.case, a.out, epochs=a.epochs)


if __name__ == "__main__":
    main()
