"""Child for the checkpoint tests: trains, checkpoints every 2 steps, prints each one,
and keeps going until the parent kills it with SIGKILL."""

import sys

import torch
import torch.nn.functional as F

from debugkit import Recorder

run_dir = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
rec = Recorder(run_dir, model, optimizer=opt, flush_every_s=0.05)
step = 0
while True:
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    with rec.step((x, y)):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        rec.log(loss=loss)
        opt.step()
    step += 1
    if step % 2 == 0:
        rec.checkpoint(keep_last=3)
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, f"{run_dir}/expected-{step}.ref")
        print(f"checkpoint {step}", flush=True)
