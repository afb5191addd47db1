"""Ways to take per-parameter gradient norms, timed inside a training loop and alone.

The Recorder's cost on a small step is mostly its gradient norms
(``bench/recorder_overhead.py --config small``). This script times candidate ways of
taking the same 48 norms of ``bench/recorder_overhead.py``'s small model (24 x
Linear(128)+ReLU, batch 32, one torch thread), each in its own copy of the training
loop (forward, zero_grad, backward, norms, SGD step), interleaved, and alone (the same
call repeated on the same gradients, which then stay in cache):

- ``foreach``: ``torch.stack(torch._foreach_norm(grads)).tolist()`` (what the Recorder does)
- ``vector_norm``: one ``torch.linalg.vector_norm`` per gradient
- ``dot``: one ``torch.dot`` of each flattened gradient with itself, then sqrt
- ``numpy``: numpy's ``dot`` on each gradient's ``.numpy()`` view

The parameters are listed once, outside the timed call (``nn.Module.parameters()``
walks the module tree: ~85 us a step on this model, which a logger need not pay).

    python bench/norm_variants.py [--rounds 12] [--steps 50]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from recorder_overhead import build  # the same small model (this folder is on sys.path)


def _foreach(grads):
    return torch.stack(torch._foreach_norm(grads)).tolist()


def _vector_norm(grads):
    return [float(torch.linalg.vector_norm(g)) for g in grads]


def _dot(grads):
    return torch.stack([torch.dot(g.view(-1), g.view(-1)) for g in grads]).sqrt_().tolist()


def _numpy(grads):
    return [math.sqrt(float(np.dot(a, a))) for a in (g.detach().numpy().reshape(-1) for g in grads)]


VARIANTS = {"bare": None, "foreach": _foreach, "vector_norm": _vector_norm, "dot": _dot, "numpy": _numpy}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
    models = {k: build() for k in VARIANTS}
    params = {k: list(m.parameters()) for k, m in models.items()}
    opts = {k: torch.optim.SGD(params[k], lr=1e-3) for k in VARIANTS}
    in_loop = {k: [] for k in VARIANTS}
    check = {}

    def step(k):
        loss = F.cross_entropy(models[k](x), y)
        opts[k].zero_grad()
        loss.backward()
        fn = VARIANTS[k]
        if fn is not None:
            grads = [p.grad for p in params[k]]
            t = time.perf_counter()
            check[k] = fn(grads)
            in_loop[k].append(time.perf_counter() - t)
        opts[k].step()

    for k in VARIANTS:
        for _ in range(20):
            step(k)
    steps = {k: [] for k in VARIANTS}
    order = list(VARIANTS)
    for r in range(a.rounds):
        for k in (order if r % 2 == 0 else order[::-1]):
            t = time.perf_counter()
            for _ in range(a.steps):
                step(k)
            steps[k].append((time.perf_counter() - t) / a.steps)
    # The variants agree (same model, same data: the same gradients each step).
    ref = check["foreach"]
    for k, v in check.items():
        assert np.allclose(v, ref, rtol=1e-4), k
    alone = {}
    grads = [p.grad for p in params["foreach"]]
    for k, fn in VARIANTS.items():
        if fn is None:
            continue
        reps = []
        for _ in range(15):
            t = time.perf_counter()
            for _ in range(100):
                fn(grads)
            reps.append((time.perf_counter() - t) / 100)
        alone[k] = statistics.median(reps)
    base = statistics.median(steps["bare"])
    print(f"load average {os.getloadavg()[0]:.2f}; {a.rounds} interleaved rounds x {a.steps} steps; "
          f"{len(grads)} gradients, {sum(g.numel() for g in grads):,} elements")
    print(f"{'variant':<12} {'step':>9} {'overhead':>9} {'norms in the loop':>18} {'norms alone':>12}")
    for k in VARIANTS:
        med = statistics.median(steps[k])
        loop = f"{statistics.median(in_loop[k]) * 1e6:.1f} us" if in_loop[k] else "-"
        one = f"{alone[k] * 1e6:.1f} us" if k in alone else "-"
        print(f"{k:<12} {med * 1e3:>7.3f}ms {(med / base - 1) * 100:>8.1f}% {loop:>18} {one:>12}")


if __name__ == "__main__":
    main()
