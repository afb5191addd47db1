"""An unedited PyTorch loop recorded with one line: ``debugkit.watch(model, optimizer, ...)``.

The loop below is what a tutorial writes; the only debugkit line is the ``watch`` call.
Healthy run on sklearn's digits::

    python -m examples.watch_loop --out sample_runs/watch-digits

The corrupted-label run (row 37 annotated 12 of 10 classes): ``F.cross_entropy`` raises
outside the model, so the exception is captured when it ends the script
(``sys.excepthook``), with the model's latest inputs as the batch::

    python -m examples.watch_loop --out runs/watch-bad-label --corrupt-label 12

The NaN run: the breast-cancer data with the 0/0 feature of ``examples.cancer_ratio``;
the NaN gradients are caught in the optimizer hook::

    python -m examples.watch_loop --out runs/watch-nan --data cancer
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from examples.lightning_train import load_data


def build_model(n_features: int = 64, num_classes: int = 10, hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def train(out: str, *, data: str = "digits", corrupt_label=None, epochs: int = 2,
          seed: int = 0) -> None:
    import debugkit

    torch.manual_seed(seed)
    x, y, n_features, num_classes = load_data(data, corrupt_label)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = build_model(n_features, num_classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    w = debugkit.watch(model, optimizer, run_dir=out, name=f"watch-{data}",
                       model_factory="examples.watch_loop:build_model",
                       factory_kwargs={"n_features": n_features, "num_classes": num_classes},
                       halt_on_nonfinite=True, flush_every_s=0.5)
    loader = w.track(loader)  # optional: dataset indices in captures

    for epoch in range(epochs):  # the user's loop, unchanged
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--data", choices=["digits", "cancer"], default="digits")
    p.add_argument("--corrupt-label", type=int, default=None)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args(argv)
    train(a.out, data=a.data, corrupt_label=a.corrupt_label, epochs=a.epochs)


if __name__ == "__main__":
    main()
