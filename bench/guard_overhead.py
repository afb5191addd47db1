"""Cost of a batch guard per training step: Recorder with and without ``guard=``.

Model and step of bench/recorder_overhead.py: 24 x (Linear(128, 128) + ReLU), batch 32,
CPU, one thread, forward + backward + SGD inside ``rec.step((x, y))`` with
``rec.log(loss=...)``. Variants, interleaved in rounds so machine noise hits both alike:

- recorder:        Recorder without a guard (what a user has today)
- recorder+guard:  the same with ``guard=BatchSpec.infer(...)`` (dtype, symbolic batch
                   dim, labels in [0, 10), inputs finite) checked every step
- recorder (A/A):  a second Recorder without a guard: the spread between two identical
                   variants, i.e. how much of the measured overhead is noise
- bare + validate: the bare step plus ``spec.validate((x, y))`` by hand, against the bare
                   step (what a user writing the checks themselves would pay)

Prints median step times and the guard's overhead; the target is < 2 % of the step.

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
    keys = ("bare", "validate", "recorder", "aa", "guard")
    models = {k: build() for k in keys}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    recs = {"recorder": Recorder(tmp / "plain", models["recorder"], optimizer=opts["recorder"]),
            "aa": Recorder(tmp / "aa", models["aa"], optimizer=opts["aa"]),
            "guard": Recorder(tmp / "guard", models["guard"], optimizer=opts["guard"],
                              guard=spec)}

    def bare(k):
        m, o = models[k], opts[k]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()

    def validate():
        spec.validate((x, y))
        bare("validate")

    def recorded(k):
        m, o, rec = models[k], opts[k], recs[k]
        with rec.step((x, y)):
            loss = F.cross_entropy(m(x), y)
            o.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            o.step()

    fns = {"bare": lambda: bare("bare"), "validate": validate,
           "recorder": lambda: recorded("recorder"), "aa": lambda: recorded("aa"),
           "guard": lambda: recorded("guard")}
    times = {k: [] for k in fns}
    for f in fns.values():  # warm-up
        for _ in range(10):
            f()
    for r in range(a.rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for k in order:
            f = fns[k]
            for _ in range(a.steps):
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
    for rec in recs.values():
        rec.close()
    check = []
    for _ in range(2000):
        t0 = time.perf_counter()
        spec.check((x, y))
        check.append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"model: 24 x Linear(128,128)+ReLU, batch 32, CPU, 1 thread; "
          f"{a.rounds} rounds x {a.steps} steps per variant, interleaved")
    names = {"bare": "bare", "validate": "bare+validate", "recorder": "recorder",
             "aa": "recorder (A/A)", "guard": "recorder+guard"}
    print(f"{'variant':<16} {'median step':>12}")
    for k in fns:
        print(f"{names[k]:<16} {med[k] * 1e3:>10.3f}ms")
    g = med["guard"] / med["recorder"] - 1
    v = med["validate"] / med["bare"] - 1
    aa = med["aa"] / med["recorder"] - 1
    print(f"\nspec.check alone: median {statistics.median(check) * 1e6:.1f}us")
    print(f"guard overhead = recorder+guard / recorder - 1 = {g * 100:.2f}% (target < 2%); "
          f"hand-written validate / bare - 1 = {v * 100:.2f}%; A/A spread = {aa * 100:+.2f}%; "
          f"check alone / recorder step = {statistics.median(check) / med['recorder'] * 100:.2f}%")


if __name__ == "__main__":
    main()
