"""A real 2-process gloo job under torchrun, recorded by each rank."""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from debugkit import Recorder

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with Recorder(sys.argv[1], model, optimizer=opt, name="ddp-test", flush_every_s=0.1) as rec:
    g = torch.Generator().manual_seed(100 + rank)
    for _step in range(6):
        x, y = torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)
        with rec.step((x, y)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            opt.step()
dist.destroy_process_group()
