"""A 2-rank gloo DDP job recorded with layer statistics, whose rank 1 sees inputs 1,000x
larger than rank 0's (so the ranks' output statistics differ by that much)::

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        tests/app/_layers_ddp_job.py --out RUN
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from debugkit import Recorder  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    torch.manual_seed(100 + rank)
    with Recorder(a.out, model, optimizer=opt, name="layers-ddp", flush_every_s=0.2,
                  layer_stats_every=2) as rec:
        for _ in range(6):
            x, y = torch.randn(8, 8) * (1000.0 if rank == 1 else 1.0), torch.randint(0, 3, (8,))
            with rec.step((x, y)):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
