"""Data-parallel training of the digits MLP under ``torchrun`` (gloo on CPU), recorded
by debugkit on every rank.

A 4-rank job where rank 2 reads its data from slow storage (every sample it loads
costs ``--slow-ms`` milliseconds more), so the other three wait for it in DDP's
gradient all-reduce; torch.profiler traces a few steps of every rank::

    python -m torch.distributed.run --standalone --nproc_per_node 4 \\
        -m examples.ddp_digits --out sample_runs/ddp-straggler --slow-rank 2 --profile

A 2-rank job sharded by hand (``indices[rank::world_size]``, no padding): with an odd
number of samples rank 0 gets one batch more than rank 1. Rank 1 leaves the training
loop and waits in the end-of-training barrier, so it never joins the all-reduce of
rank 0's last step; rank 0 hangs in that all-reduce. The watchdog
(``hang_timeout_s``) dumps both ranks' stacks after 1 s and the process group's
5-second timeout ends the job::

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        -m examples.ddp_digits --out sample_runs/ddp-hang --uneven
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, Subset

from examples.digits import DigitsDataset, build_model, load_splits


class SlowStorage(Dataset):
    """A dataset whose every item costs ``delay_s`` more to load (a slow disk or bucket)."""

    def __init__(self, inner: Dataset, delay_s: float):
        self.inner = inner
        self.delay_s = delay_s

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        time.sleep(self.delay_s)
        return self.inner[i]


def shard_by_hand(n: int, rank: int, world: int) -> list[int]:
    """``range(n)[rank::world]``: the usual hand-written shard, without padding."""
    return list(range(n))[rank::world]


def train(out: str, *, epochs: int, batch_size: int, lr: float, slow_rank: int | None,
          slow_ms: float, uneven: bool, profile: bool, hang_timeout_s: float,
          pg_timeout_s: float, seed: int = 0) -> None:
    from debugkit import Recorder

    # Rendezvous gets a generous timeout (start-up on a busy machine); training runs on a
    # group with the bounded one, which is what ends a hang.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    group = dist.new_group(timeout=datetime.timedelta(seconds=pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)
    (xa, ya), _ = load_splits(seed)
    data = DigitsDataset(xa, ya)
    if uneven:
        # An odd number of samples: rank 0 ends up with one batch more than the others.
        n = batch_size * world * (len(data) // (batch_size * world * 2)) + 1
        shard = Subset(data, shard_by_hand(n, rank, world))
    else:
        shard = Subset(data, shard_by_hand(len(data), rank, world))
    if slow_rank is not None and rank == slow_rank:
        shard = SlowStorage(shard, slow_ms / 1000.0)
    model = DDP(build_model(64), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rec = Recorder(out, model, optimizer=opt,
                   name="ddp-hang" if uneven else "ddp-straggler",
                   config={"epochs": epochs, "batch_size": batch_size, "lr": lr,
                           "world_size": world, "slow_rank": slow_rank, "slow_ms": slow_ms,
                           "uneven": uneven, "pg_timeout_s": pg_timeout_s},
                   model_factory="examples.digits:build_model", factory_kwargs={"hidden": 64},
                   num_classes=10, flush_every_s=0.25, hang_timeout_s=hang_timeout_s)
    rec.watch_ddp(model)
    prof = None
    if profile:
        from torch.profiler import ProfilerActivity, schedule

        trace_dir = os.path.join(out, "traces")
        os.makedirs(trace_dir, exist_ok=True)
        prof = torch.profiler.profile(
            activities=[ProfilerActivity.CPU], schedule=schedule(wait=20, warmup=2, active=4, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(
                os.path.join(trace_dir, f"rank{rank}.pt.trace.json.gz")))
        prof.start()
    g = torch.Generator().manual_seed(seed + rank)
    with rec:
        for epoch in range(epochs):
            for batch in DataLoader(shard, batch_size=batch_size, shuffle=True, generator=g):
                with rec.step(batch):
                    x, y = batch
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    rec.log(loss=loss, epoch=epoch)
                if prof is not None:
                    prof.step()
        if prof is not None:
            prof.stop()
        dist.barrier(group=group)  # every rank waits here for the others before the job ends
    dist.destroy_process_group()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--slow-rank", type=int, default=None, help="rank whose data loading is slowed")
    p.add_argument("--slow-ms", type=float, default=3.0, help="extra milliseconds per sample loaded")
    p.add_argument("--uneven", action="store_true", help="shard by hand so rank 0 has one batch more")
    p.add_argument("--profile", action="store_true", help="trace 4 steps of every rank with torch.profiler")
    p.add_argument("--hang-timeout-s", type=float, default=1.0)
    p.add_argument("--pg-timeout-s", type=float, default=5.0)
    a = p.parse_args(argv)
    train(a.out, epochs=1 if a.uneven else a.epochs, batch_size=a.batch_size, lr=a.lr,
          slow_rank=a.slow_rank, slow_ms=a.slow_ms, uneven=a.uneven, profile=a.profile,
          hang_timeout_s=a.hang_timeout_s, pg_timeout_s=a.pg_timeout_s)


if __name__ == "__main__":
    main()
