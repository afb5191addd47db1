"""2 ranks (gloo, CPU): rank 1's "should I log?" counter drifts, so at step 6 it enters an
all_reduce rank 0 never enters, and dies with SIGABRT while blocked in it.

The abort comes from a timer armed before that all_reduce, standing in for NCCL's
watchdog (which tears the process down with ``std::abort`` when a collective times out);
gloo itself would only raise. Rank 0 meanwhile waits in its own loss all_reduce of step
6 and gets gloo's connection error once rank 1 is gone.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/scenarios/jobs/dead_rank.py --out RUN
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from debugkit import Recorder  # noqa: E402

ABORT_AFTER_S = 3.0


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 2))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    metrics_group = dist.new_group(timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-dead-rank", flush_every_s=0.2,
                   model_factory="tests.scenarios.jobs.dead_rank:build_model")
    gen = torch.Generator().manual_seed(10 + rank)
    logged = 0
    with rec:
        for step in range(a.steps):
            x = torch.randn(16, 6, generator=gen)
            y = (x[:, 0] > 0).long()
            with rec.step((x, y)):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                for prm in model.parameters():  # data-parallel by hand: average the grads
                    dist.all_reduce(prm.grad)
                    prm.grad /= world
                opt.step()
                # The bug: rank 1 counts its log calls from 1, so at step 6 it thinks it is
                # time to reduce the metrics; rank 0 (counting from 0) does not.
                logged += 1
                if (logged + (1 if rank == 1 else 0)) % 7 == 0:
                    threading.Timer(ABORT_AFTER_S, os.abort).start()
                    m = torch.tensor([loss.item(), float(step)])
                    dist.all_reduce(m, group=metrics_group)
                t = loss.detach().clone()
                with rec.comm():
                    dist.all_reduce(t)
                rec.log(loss=loss, mean_loss=t / world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
