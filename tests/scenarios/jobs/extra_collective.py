"""Two ranks (torchrun, gloo, 20 s collective timeout) train replicas of a small MLP on the
same batches and reduce their loss and accuracy twice every step with ``all_reduce``
(inside ``rec.comm()``).
From step 12, rank 1 also reduces a "best accuracy so far" metric that only it tracks:
one extra ``all_reduce`` at step 12 only. gloo pairs collectives by order, so nothing
fails there: the ranks' reductions are paired out of step from then on, and at the
last step (23) rank 1 waits for an ``all_reduce`` rank 0 never calls, until rank 0 exits
(or the timeout).

    torchrun --nproc_per_node 2 tests/scenarios/jobs/extra_collective.py --out RUN
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

from debugkit import Recorder  # noqa: E402

STEPS, EXTRA_AT = 24, 12


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = Recorder(a.out, model, optimizer=opt, name="scenario-extra-collective", flush_every_s=0.5)
    g = torch.Generator().manual_seed(100)  # both ranks draw the same batches: replicas agree
    with rec:
        for step in range(STEPS):
            x = torch.randn(32, 8, generator=g)
            y = (x[:, 0] > 0).long()
            with rec.step((x, y)):
                out = model(x)
                loss = nn.functional.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                stats = torch.stack([loss.detach(), (out.argmax(1) == y).float().mean()])
                with rec.comm():
                    dist.all_reduce(stats)  # the job-wide mean loss and accuracy
                if rank == 1 and step == EXTRA_AT:
                    best = stats.clone()
                    with rec.comm():
                        dist.all_reduce(best)  # a metric only rank 1 tracks: rank 0 never calls it
                with rec.comm():
                    dist.all_reduce(stats)  # a second reduction (the logged copy)
                rec.log(loss=loss)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
