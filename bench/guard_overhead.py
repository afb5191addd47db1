"""Cost of a batch guard per training step: Recorder with and without ``guard=``.

Model and step of bench/recorder_overhead.py: 24 x (Linear(128, 128) + ReLU), batch 32,
CPU, one thread, forward + backward + SGD inside ``rec.step((x, y))`` with
``rec.log(loss=...)``. Variants, interleaved step by step so machine noise hits all alike:

- recorder:        Recorder without a guard (what a user has today)
- recorder+guard:  the same Recorder and model with ``guard=BatchSpec.infer(...)`` (dtype,
                   symbolic batch dim, labels in [0, 10), inputs finite) checked
- recorder (A/A):  the recorder variant again: the spread between two identical
                   variants, i.e. how much of the measured overhead is noise
- bare + validate: the bare step plus ``spec.validate((x, y))`` by hand, against the bare
                   step (what a user writing the checks themselves would pay)

Variants alternate step by step; prints median step times and the guard's overhead as
the median of paired per-step ratios (drift of the machine cancels); the target is < 2 %
of the step.

    python bench/guard_overhead.py [--rounds 30 --steps 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recorder_overhead import build  # noqa: E402  the same benchmark model


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from debugkit import BatchSpec, Recorder

    tmp = Path(tempfile.mkdtemp(prefix="dk-bench-guard-"))
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))
    spec = BatchSpec.infer([(x, y)], num_classes=10)
    # One model and one Recorder for the recorder variants: a step with the guard and one
    # without differ only in the guard (switched per step through the Recorder's guard
    # attribute), not in which weights sit in the CPU caches. Likewise one model for
    # bare / bare+validate.
    m_rec, m_bare = build(), build()
    o_rec = torch.optim.SGD(m_rec.parameters(), lr=1e-3)
    o_bare = torch.optim.SGD(m_bare.parameters(), lr=1e-3)
    rec = Recorder(tmp / "run", m_rec, optimizer=o_rec, guard=spec)

    def bare():
        loss = F.cross_entropy(m_bare(x), y)
        o_bare.zero_grad()
        loss.backward()
        o_bare.step()

    def validate():
        spec.validate((x, y))
        bare()

    def recorded(guard):
        rec._guard = spec if guard else None
        with rec.step((x, y)):
            loss = F.cross_entropy(m_rec(x), y)
            o_rec.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            o_rec.step()

    fns = {"bare": bare, "validate": validate, "recorder": lambda: recorded(False),
           "aa": lambda: recorded(False), "guard": lambda: recorded(True)}
    groups = (("recorder", "guard", "aa"), ("bare", "validate"))
    times = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        for _ in range(10):
            f()
    # Interleaved step by step, the order rotating every step, so a slow second of the
    # machine hits every variant alike; an overhead is the median of paired ratios.
    n = a.rounds * a.steps
    for r in range(n):
        for group in groups:
            shift = r % len(group)
            for k in group[shift:] + group[:shift]:
                t0 = time.perf_counter()
                fns[k]()
                times[k].append(time.perf_counter() - t0)
    rec.close()
    check = []
    for _ in range(2000):
        t0 = time.perf_counter()
        spec.check((x, y))
        check.append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}

    def paired(a_, b_):
        return statistics.median(p / q for p, q in zip(times[a_], times[b_])) - 1

    print(f"model: 24 x Linear(128,128)+ReLU, batch 32, CPU, 1 thread; {n} steps per variant, "
          "interleaved step by step")
    names = {"bare": "bare", "validate": "bare+validate", "recorder": "recorder",
             "aa": "recorder (A/A)", "guard": "recorder+guard"}
    print(f"{'variant':<16} {'median step':>12}")
    for k in fns:
        print(f"{names[k]:<16} {med[k] * 1e3:>10.3f}ms")
    g, v, aa = paired("guard", "recorder"), paired("validate", "bare"), paired("aa", "recorder")
    print(f"\nspec.check alone: median {statistics.median(check) * 1e6:.1f}us")
    print(f"guard overhead = median paired (recorder+guard / recorder) - 1 = {g * 100:.2f}% "
          f"(target < 2%); hand-written validate / bare - 1 = {v * 100:.2f}%; "
          f"A/A spread = {aa * 100:+.2f}%; "
          f"check alone / recorder step = {statistics.median(check) / med['recorder'] * 100:.2f}%")


if __name__ == "__main__":
    main()
