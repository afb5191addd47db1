"""Small torchrun jobs the distributed tests record (run with
``python -m torch.distributed.run --standalone --nproc_per_node 2 tests/distributed/jobs.py``).

``merge``: 6 DDP steps per rank with the DDP all-reduce timed (``watch_ddp``) and a
loss all-reduce in ``rec.comm()``.
``timeout``: after 3 steps rank 1 stops calling collectives for longer than the
process group's 2-second timeout; rank 0's all-reduce inside step 3 times out.
``desync``: DDP told to leave ``2.weight`` out of its all-reduce, so that layer's
gradients differ across ranks.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from debugkit import Recorder  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["merge", "timeout", "desync"])
    p.add_argument("--out", required=True)
    a = p.parse_args()
    # Start-up (rendezvous) gets a generous timeout, so a busy machine cannot fail it;
    # the training collectives run on a group with the short one.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    timeout = 2.0 if a.scenario == "timeout" else 60.0
    group = dist.new_group(timeout=datetime.timedelta(seconds=timeout))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    if a.scenario == "desync":
        DDP._set_params_and_buffers_to_ignore_for_model(net, ["2.weight"])
    model = DDP(net, process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(a.out, model, optimizer=opt, name=f"job-{a.scenario}", flush_every_s=0.2)
    if a.scenario != "timeout":
        rec.watch_ddp(model)
    torch.manual_seed(100 + rank)
    with rec:
        for step in range(6):
            if a.scenario == "timeout" and step == 3 and rank == 1:
                time.sleep(6.0)  # busy elsewhere: never joins rank 0's all-reduce
                break
            x, y = torch.randn(8, 8), torch.randint(0, 3, (8,))
            with rec.step((x, y)):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                t = loss.detach().clone()
                with rec.comm():
                    dist.all_reduce(t, group=group)
                rec.log(loss=loss, mean_loss=t / dist.get_world_size())
    if a.scenario != "timeout":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
