"""The digits MLP as a job that checkpoints, is killed, and resumes where it left off.

The training of :mod:`examples.digits` (same model, data and optimizer), written the
way an elastic job is: it checkpoints every ``--checkpoint-every`` steps with
``rec.checkpoint()``, and on start resumes from ``debugkit.resume_latest`` (the newest
checkpoint whose hashes verify) into the same run directory, continuing at the exact
batch it had reached: each epoch's shuffle comes from its own seed, so a resumed job
sees the same batches in the same order as one that never stopped.

    python -m examples.digits_resumable --out runs/r --kill-at-step 100   # dies (SIGKILL)
    python -m examples.digits_resumable --out runs/r                      # resumes, finishes

``--kill-at-step`` makes the process kill itself with SIGKILL after that step, as an
OOM killer or a pre-empted node would: nothing is flushed or closed.
``--truncate-newest`` (run on its own) cuts the newest checkpoint's weights file in
half, as a copy interrupted by a full disk would, so that a resume has to skip it.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import ConcatDataset, DataLoader

from examples.digits import CORRUPT_ROW, NUM_CLASSES, DigitsDataset, build_model, load_splits  # noqa: F401


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """The shuffled batches of one epoch: a function of (seed, epoch) only."""
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    order = torch.randperm(n, generator=g).tolist()
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def train(out: str, *, epochs: int = 3, lr: float = 0.1, hidden: int = 64, batch_size: int = 32,
          checkpoint_every: int = 30, kill_at_step: int | None = None, seed: int = 0) -> int:
    """Train (resuming if the run has a good checkpoint); returns the step it started at."""
    import debugkit
    from debugkit import Recorder

    torch.manual_seed(seed)
    (xa, ya), (xb, yb) = load_splits(seed)
    stage1 = DigitsDataset(xa, ya)
    everything = ConcatDataset([stage1, DigitsDataset(xb, yb)])
    model = build_model(hidden)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rec = Recorder(out, model, optimizer=opt, name="digits-resumed",
                   config={"lr": lr, "hidden": hidden, "batch_size": batch_size, "epochs": epochs,
                           "momentum": 0.9, "seed": seed, "checkpoint_every": checkpoint_every},
                   model_factory="examples.digits:build_model", factory_kwargs={"hidden": hidden},
                   num_classes=NUM_CLASSES, flush_every_s=0.5)
    start = debugkit.resume_latest(out, model, opt) or 0  # steps done so far
    step = 0
    with rec:
        if start:
            rec.log(resumed_from=start)
        for epoch in range(epochs):
            data = stage1 if epoch == 0 else everything
            batches = epoch_batches(len(data), batch_size, seed, epoch)
            if step + len(batches) <= start:  # the whole epoch was done before the restart
                step += len(batches)
                continue
            skip = max(0, start - step)
            step += skip
            loader = DataLoader(data, batch_sampler=batches[skip:])
            for idx, batch in zip(batches[skip:], loader):
                with rec.step(batch, step=step, indices=idx):
                    x, y = batch
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss, epoch=epoch)
                    opt.step()
                step += 1
                if step % checkpoint_every == 0:
                    rec.checkpoint(step=step, extra={"epoch": epoch})
                if kill_at_step is not None and step >= kill_at_step:
                    os.kill(os.getpid(), signal.SIGKILL)
    return start


def truncate_newest(out: str) -> Path:
    """Cut the newest checkpoint's ``model.safetensors`` to half its size; returns it."""
    from debugkit.checkpoints import DIR, read_index

    entry = max(read_index(out), key=lambda e: e["step"])
    p = Path(out) / DIR / entry["dir"] / "model.safetensors"
    size = p.stat().st_size
    with open(p, "r+b") as f:
        f.truncate(size // 2)
    return p


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory (resumed if it has checkpoints)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--checkpoint-every", type=int, default=30)
    p.add_argument("--kill-at-step", type=int, default=None,
                   help="SIGKILL this process after that many steps")
    p.add_argument("--truncate-newest", action="store_true",
                   help="only truncate the newest checkpoint of --out (simulated corruption)")
    a = p.parse_args(argv)
    if a.truncate_newest:
        print(f"truncated {truncate_newest(a.out)}")
        return
    start = train(a.out, epochs=a.epochs, checkpoint_every=a.checkpoint_every,
                  kill_at_step=a.kill_at_step)
    print(f"started at step {start}")


if __name__ == "__main__":
    main()
