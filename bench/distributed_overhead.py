"""What recording a DDP job with debugkit costs, next to the same job without it.

Runs a 2-rank gloo torchrun job three times per repeat, side by side in one script:
plain DDP training (what a user runs without debugkit), the same loop recorded by the
Recorder, and recorded with rec.watch_ddp(model) (timed all-reduce hook) and the hang
watchdog (hang_timeout_s) on top. Each rank measures its median step time with time.perf_counter;
the script prints the medians over repeats and the ratio.

    python bench/distributed_overhead.py [--steps 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r'''
import json, os, statistics, sys, time
sys.path.insert(0, os.environ["DK_ROOT"])
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
rec = None
if mode != "plain":
    from debugkit import Recorder
    rec = Recorder(os.path.join(out, "run"), model, optimizer=opt,
                   hang_timeout_s=60 if mode == "distributed" else None)
    if mode == "distributed":
        rec.watch_ddp(model)
times = []
for i in range(steps):
    t0 = time.perf_counter()
    if rec is None:
        loss = nn.functional.cross_entropy(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
    else:
        with rec.step((x, y)):
            loss = nn.functional.cross_entropy(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
            rec.log(loss=loss)
    times.append(time.perf_counter() - t0)
if rec is not None:
    rec.close()
med = statistics.median(times[steps // 3:])  # past start-up (rank 0's background pip check)
with open(os.path.join(out, f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump({"median_step_s": med}, f)
dist.destroy_process_group()
'''


def run_job(mode: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "worker.py"
        script.write_text(WORKER)
        env = {**os.environ, "DK_ROOT": str(ROOT), "OMP_NUM_THREADS": "1", "DEBUGKIT_HANG_PYSPY": "0"}
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc_per_node", "2", str(script), mode, str(steps), tmp],
                       check=True, env=env, capture_output=True, timeout=600)
        meds = [json.loads((Path(tmp) / f"rank{r}.json").read_text())["median_step_s"] for r in (0, 1)]
        return max(meds)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    res = {"plain": [], "recorder": [], "distributed": []}
    for _ in range(a.repeats):
        for mode in res:
            res[mode].append(run_job(mode, a.steps))
    med = {m: statistics.median(v) for m, v in res.items()}
    print(f"2-rank DDP (gloo, CPU), {a.steps} steps x {a.repeats} repeats, median step time")
    print(f"plain DDP                              {med['plain'] * 1000:8.3f} ms")
    print(f"Recorder (foundation features)         {med['recorder'] * 1000:8.3f} ms")
    print(f"Recorder + watch_ddp + hang watchdog   {med['distributed'] * 1000:8.3f} ms")
    print(f"ratio Recorder / plain                 {med['recorder'] / med['plain']:.3f}")
    print(f"ratio +distributed / Recorder          {med['distributed'] / med['recorder']:.3f}")


if __name__ == "__main__":
    main()
