"""Cost of overflow-free gradient norms, against the plain fused norm.

Gradients of 24 x Linear(128, 128) + Linear(128, 10) (the model of
``recorder_overhead.py``), on CPU with one thread (and on CUDA when there is one).
Variants, interleaved in rounds so that machine noise hits all of them alike:

- plain:     ``torch._foreach_norm(grads)`` + total (overflows past ~1.8e19 per element)
- float64:   ``torch._foreach_norm(grads, 2, dtype=torch.float64)`` + total
- max-scale: ``_foreach_norm(grads, inf)`` for a per-tensor scale, then the norms of
             ``grads / scale`` (``_foreach_div`` makes a copy of every gradient)
- debugkit:  :class:`debugkit.recorder.norms.GradNormComputer` (what the Recorder runs)

Prints the median time of one call and each variant's ratio to ``plain``.

    python bench/grad_norms.py [--rounds 30 --calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def variants(params):
    from debugkit.recorder.norms import GradNormComputer

    comp = GradNormComputer(params)
    grads = lambda: [p.grad for p in params]  # noqa: E731

    def plain():
        s = torch.stack(torch._foreach_norm(grads()))
        return torch.cat([s, torch.linalg.vector_norm(s).reshape(1)])

    def float64():
        s = torch.stack(torch._foreach_norm(grads(), 2, dtype=torch.float64))
        return torch.cat([s, torch.linalg.vector_norm(s).reshape(1)])

    def max_scale():
        g = grads()
        m = torch._foreach_norm(g, float("inf"))
        m = [torch.where(x > 0, x, torch.ones_like(x)) for x in m]
        s = torch.stack(torch._foreach_norm(torch._foreach_div(g, m))) * torch.stack(m)
        return torch.cat([s, torch.linalg.vector_norm(s.double()).reshape(1)])

    return {"plain": plain, "float64": float64, "max-scale": max_scale, "debugkit": comp.compute}


def bench(device: str, rounds: int, calls: int) -> None:
    torch.manual_seed(0)
    layers = [nn.Linear(128, 128) for _ in range(24)] + [nn.Linear(128, 10)]
    params = [p for m in layers for p in m.parameters()]
    for p in params:
        p.data = p.data.to(device)
        p.grad = torch.randn_like(p.data)
    fns = variants(params)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                out = fn()
            if device == "cuda" and not isinstance(out, torch.Tensor):
                out.resolve()
            sync()
            times[name].append((time.perf_counter() - t0) / calls)
    base = statistics.median(times["plain"])
    print(f"{device}: {len(params)} gradients, {rounds} rounds x {calls} calls")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:10s} {med * 1e6:9.1f} us/call   x{med / base:5.2f} of plain")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    bench("cpu", a.rounds, a.calls)
    if torch.cuda.is_available():
        bench("cuda", a.rounds, a.calls)


if __name__ == "__main__":
    main()
