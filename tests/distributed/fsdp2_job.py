"""An FSDP2 (``fully_shard``) job the Recorder records on 2 gloo ranks (CPU).

Each parameter is a DTensor sharded on dim 0, so a rank holds half of each gradient, and
the last layer's bias (one element) is held by rank 0 alone: rank 1's shard is empty.
Rank 0 writes the oracle beside the run (``oracle.json`` in its parent folder): each step's whole-gradient norms
from ``p.grad.full_tensor()`` (a collective the Recorder itself never makes).
``--nan-step N`` makes rank 0's input NaN at step N.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/distributed/fsdp2_job.py --out RUN
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402

try:
    from torch.distributed.fsdp import fully_shard  # torch >= 2.6
except ImportError:  # pragma: no cover - torch 2.4 / 2.5
    from torch.distributed._composable.fsdp import fully_shard

from debugkit import Recorder  # noqa: E402

STEPS = 8


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--nan-step", type=int, default=None)
    a = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5), nn.ReLU(), nn.Linear(5, 1))
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    rec = Recorder(a.out, model, optimizer=opt, name="fsdp2", flush_every_s=0.2)
    oracle: dict[int, dict[str, float]] = {}
    torch.manual_seed(100 + rank)
    with rec:
        for step in range(STEPS):
            x, y = torch.randn(8, 16), torch.randn(8, 1)
            if step == a.nan_step and rank == 0:
                x[0, 0] = float("nan")
            with rec.step((x, y)):
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                oracle[step] = {n: p.grad.full_tensor().norm().item() for n, p in model.named_parameters()}
                opt.step()
                opt.zero_grad()
                rec.log(loss=loss)
    if rank == 0:
        (Path(a.out).parent / "oracle.json").write_text(json.dumps(oracle))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
