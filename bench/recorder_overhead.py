"""Recorder overhead per training step, against bare training and TensorBoard logging.

Model: 24 x (Linear(128, 128) + ReLU), batch 32, CPU, one thread. Variants, interleaved
in rounds so that machine noise hits all of them alike:

- bare:        forward, backward, SGD step
- norms only:  bare + torch._foreach_norm of every gradient (the floor any logger pays)
- debugkit:    bare inside `rec.step(...)` with `rec.log(loss=...)`, norms every step
- tensorboard: bare + SummaryWriter.add_scalar of every parameter's gradient norm and
               the loss, each step (what TensorBoard users write)

Prints median step times and overheads; the targets are debugkit's overhead at most
1/10 of TensorBoard's and under 12 % of the bare step.

    python bench/recorder_overhead.py [--rounds 30 --steps 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build():
    torch.manual_seed(0)
    layers = []
    for _ in range(24):
        layers += [nn.Linear(128, 128), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(128, 10))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from torch.utils.tensorboard import SummaryWriter

    from debugkit import Recorder

    tmp = Path(tempfile.mkdtemp(prefix="dk-bench-"))
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))
    models = {k: build() for k in ("bare", "norms", "debugkit", "tensorboard")}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    rec = Recorder(tmp / "run", models["debugkit"], optimizer=opts["debugkit"])
    tb = SummaryWriter(str(tmp / "tb"))
    names = [n for n, _ in models["tensorboard"].named_parameters()]
    times = {k: [] for k in models}
    counters = {k: 0 for k in models}

    def bare(k):
        m, o = models[k], opts[k]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()
        return loss

    def step_norms():
        m, o = models["norms"], opts["norms"]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        torch.stack(torch._foreach_norm([p.grad for p in m.parameters()])).tolist()
        o.step()

    def step_debugkit():
        m, o = models["debugkit"], opts["debugkit"]
        with rec.step((x, y)):
            loss = F.cross_entropy(m(x), y)
            o.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            o.step()

    def step_tb():
        m, o = models["tensorboard"], opts["tensorboard"]
        s = counters["tensorboard"]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        total = 0.0
        for n, p in zip(names, m.parameters()):
            v = p.grad.norm().item()
            total += v * v
            tb.add_scalar(f"grad_norm/{n}", v, s)
        tb.add_scalar("grad_norm/__total__", total ** 0.5, s)
        tb.add_scalar("loss", loss.item(), s)
        o.step()

    fns = {"bare": lambda: bare("bare"), "norms": step_norms, "debugkit": step_debugkit,
           "tensorboard": step_tb}
    for k, f in fns.items():  # warm-up
        for _ in range(10):
            f()
            counters[k] += 1
    for r in range(a.rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for k in order:
            f = fns[k]
            for _ in range(a.steps):
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
                counters[k] += 1
    rec.close()
    tb.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["bare"]
    print(f"model: 24 x Linear(128,128)+ReLU, batch 32, CPU, 1 thread; "
          f"{a.rounds} rounds x {a.steps} steps per variant, interleaved")
    print(f"{'variant':<12} {'median step':>12} {'overhead':>10}")
    for k in fns:
        ov = med[k] / base - 1
        print(f"{k:<12} {med[k] * 1e3:>10.3f}ms {ov * 100:>9.1f}%")
    dk_ov = med["debugkit"] - base
    tb_ov = med["tensorboard"] - base
    print(f"\ndebugkit overhead / TensorBoard overhead = {dk_ov / tb_ov:.3f} "
          f"(target <= 0.1); debugkit overhead = {dk_ov / base * 100:.1f}% of the bare step "
          f"(target < 12%); norms alone = {(med['norms'] / base - 1) * 100:.1f}%")


if __name__ == "__main__":
    main()
