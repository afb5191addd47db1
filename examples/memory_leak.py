"""A training loop that leaks memory the classic way: it keeps every step's loss.

The loop keeps each step's ``loss`` tensor in ``history`` to report the epoch's mean
loss at the end of the epoch, and calls ``loss.backward(retain_graph=True)`` (left
over from an experiment with a second backward pass). A kept loss holds its autograd
graph, and a retained graph holds every activation saved for backward, so each step
leaves its activations behind: with a batch of 1024 and three hidden layers of 512
units that is about 6 MiB a step, and the process's resident memory climbs step after
step until the epoch summary, which never frees them because ``history`` lives for the
whole run::

    python -m examples.memory_leak --out sample_runs/memory-leak

``debugkit diagnose sample_runs/memory-leak`` reports ``memory_leak`` with its rate.
The fix is ``history.append(loss.item())`` (or ``loss.detach()``) and dropping
``retain_graph=True``; ``--fixed`` runs that version.

On a CUDA machine (``--device cuda``) the Recorder also records the allocator's history
and writes PyTorch memory snapshots into the run (``record_memory_history=True``).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, RandomSampler

from examples.digits import NUM_CLASSES, DigitsDataset, build_model, load_splits


def train(out: str, *, epochs: int = 12, hidden: int = 512, depth: int = 3, batch_size: int = 1024,
          steps_per_epoch: int = 5,
          lr: float = 0.05, seed: int = 0, device: str = "cpu", fixed: bool = False,
          flush_every_s: float = 0.5) -> None:
    from debugkit import Recorder

    torch.manual_seed(seed)
    (xa, ya), _ = load_splits(seed)
    data = DigitsDataset(xa, ya)
    model = build_model(hidden, depth).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rec = Recorder(out, model, optimizer=opt, name="memory-leak" + ("-fixed" if fixed else ""),
                   config={"hidden": hidden, "depth": depth, "batch_size": batch_size, "lr": lr,
                           "epochs": epochs, "seed": seed, "fixed": fixed},
                   model_factory="examples.digits:build_model",
                   factory_kwargs={"hidden": hidden, "depth": depth}, num_classes=NUM_CLASSES,
                   flush_every_s=flush_every_s, record_memory_history=True)
    g = torch.Generator().manual_seed(seed)
    # Large batches drawn with replacement from the 1,437 training digits.
    sampler = RandomSampler(data, replacement=True, num_samples=batch_size * steps_per_epoch,
                            generator=g)
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True)
    history = []  # every step's loss, for the epoch mean (and, by mistake, its graph)
    with rec:
        for epoch in range(epochs):
            for x, y in rec.track(loader):
                with rec.step((x, y)):
                    x, y = x.to(device), y.to(device)
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    if fixed:
                        loss.backward()
                        history.append(loss.item())
                    else:
                        loss.backward(retain_graph=True)
                        history.append(loss)
                    opt.step()
                    rec.log(loss=loss, epoch=epoch)
            mean = (sum(history) / len(history)) if fixed else torch.stack(history).mean().item()
            print(f"epoch {epoch}: mean loss so far {mean:.4f}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--device", default="cpu")
    p.add_argument("--fixed", action="store_true", help="keep loss.item() instead of the tensor")
    a = p.parse_args(argv)
    train(a.out, epochs=a.epochs, hidden=a.hidden, batch_size=a.batch_size, device=a.device,
          fixed=a.fixed)


if __name__ == "__main__":
    main()
