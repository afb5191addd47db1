"""An elastic torchrun job: resume_latest on start,
rec.checkpoint every few steps; on its first attempt rank 1 dies at a given step; started
again, both ranks resume from the last checkpoint. Writes the final weights of rank 0
to ``--final``."""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import debugkit
from debugkit import Recorder

STEPS = 12
EVERY = 4


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--final", required=True)
    ap.add_argument("--die-at", type=int, default=None)
    ap.add_argument("--attempt", type=int, default=None, help="default: torchrun's restart count")
    a = ap.parse_args()
    # No retry around the init here: a rank whose init fails exits and torchrun restarts
    # every worker together (see docs/checkpoints.md on why a one-rank retry can hang).
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    start = debugkit.resume_latest(a.out, model, opt) or 0
    ddp = DDP(model)
    attempt = a.attempt if a.attempt is not None else int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    with Recorder(a.out, ddp, optimizer=opt, name="elastic", flush_every_s=0.1) as rec:
        rec.log(resumed_from=start, attempt=attempt)
        for step in range(start, STEPS):
            g = torch.Generator().manual_seed(1000 * rank + step)  # the data of (rank, step)
            x, y = torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)
            if a.die_at is not None and attempt == 0 and rank == 1 and step == a.die_at:
                os._exit(17)  # a worker dies (OOM killer, lost node): torchrun restarts the job
            with rec.step((x, y), step=step):
                loss = F.cross_entropy(ddp(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()
            if (step + 1) % EVERY == 0:
                dist.barrier()  # every rank has finished the step before rank 0 saves it
                rec.checkpoint(step=step + 1)
    if rank == 0:
        torch.save(model.state_dict(), a.final)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
