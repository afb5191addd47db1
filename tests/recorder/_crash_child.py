"""Child process for the crash-safety test: records steps forever, reporting progress.

After every step it prints ``step N``; every 5th step it forces a flush and prints
``flushed N`` (every row up to step N is on disk from then on).
"""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from debugkit import Recorder

run_dir, flush_s = sys.argv[1], float(sys.argv[2])
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
rec = Recorder(run_dir, model, optimizer=opt, flush_every_s=flush_s)
print("started", flush=True)
step = 0
while True:
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    with rec.step((x, y)):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        rec.log(loss=loss)
        opt.step()
    print(f"step {step}", flush=True)
    if step % 5 == 4:
        rec._writer.flush()
        print(f"flushed {step}", flush=True)
    step += 1
