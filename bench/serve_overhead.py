"""Per-request cost of ``debugkit.serve`` against the bare handler, side by side.

Two CPU models (one thread): a ~1 ms and a ~20 ms MLP. Each round runs a batch of
requests through every variant in a shuffled order (interleaved, so a load change on a
shared machine hits all of them alike); the figures are medians over rounds:

- ``bare``      ``with torch.no_grad(): y = model(x)``
- ``request``   the same inside ``with rec.request({"x": x}) as r: r.output(y)``
- ``wrap``      ``rec.wrap(model)(x)``
- ``control``   the bare handler plus a spin of pure Python as long as the recorder's own
                cost (measured on the no-op model first): what any handler code of that
                length costs around this model on this machine (caches, branch predictors:
                on a loaded 2-core VM 15 us of Python next to a 1 ms model cost 20-50 us)

Per request it reports wall time and the request thread's CPU time (``time.thread_time``,
less sensitive to other processes than wall time), and the overhead of each against the
bare handler, with the targets (<= 3 % at ~1 ms, <= 0.5 % at ~20 ms). A no-op model gives
the recorder's own cost in microseconds. The background writer's CPU is reported apart
(process CPU minus request-thread CPU). The load average is printed: on a loaded machine
wall-time ratios move by a few percent between runs; thread CPU time much less.

    python bench/serve_overhead.py [--rounds 11] [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build(hidden: int, layers: int, batch: int):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*mods).eval(), torch.randn(batch, hidden)


def measure(fn, x, n: int) -> tuple[float, float, float]:
    """(wall, request-thread CPU, process CPU) seconds per call over ``n`` calls."""
    w0, t0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    for _ in range(n):
        fn(x)
    return ((time.perf_counter() - w0) / n, (time.thread_time() - t0) / n,
            (time.process_time() - p0) / n)


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU in Python."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def bench_model(label: str, model, x, *, rounds: int, per_round: int, out: Path,
                control_s: float | None = None) -> dict:
    import torch

    import debugkit

    rec = debugkit.serve(model, out / label, hash_weights=False)
    wrapped = rec.wrap(model)

    def bare(x):
        with torch.no_grad():
            return model(x)

    def request(x):
        with torch.no_grad(), rec.request({"x": x}) as r:
            return r.output(model(x))

    def wrap(x):
        with torch.no_grad():
            return wrapped(x)

    def control(x):
        spin(control_s or 0.0)
        with torch.no_grad():
            return model(x)

    variants = {"bare": bare, "request": request, "wrap": wrap}
    if control_s is not None:
        variants["control"] = control
    for fn in variants.values():  # warm-up
        measure(fn, x, max(3, per_round // 5))
    res: dict[str, list] = {k: [] for k in variants}
    rng = random.Random(0)
    for _ in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for k in order:
            res[k].append(measure(variants[k], x, per_round))
    rec.close()
    med = {k: tuple(statistics.median(r[i] for r in v) for i in range(3)) for k, v in res.items()}
    # per-round paired ratios (a round's variants ran back to back): their median
    ratio = {k: (statistics.median(a[0] / b[0] for a, b in zip(res[k], res["bare"])),
                 statistics.median(a[1] / b[1] for a, b in zip(res[k], res["bare"])))
             for k in variants}
    return {"label": label, "median": med, "ratio": ratio, "requests": rec.requests}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and requests (a smoke run)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rounds = 3 if args.quick else args.rounds
    cases = [
        ("noop", *build(8, 1, 1), 2000, None),
        ("1ms", *build(512, 4, 48), 100, 0.03),
        ("20ms", *build(1024, 8, 160), 8, 0.005),
    ]
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}  "
          f"(cpus: {os.cpu_count()}, torch threads: {torch.get_num_threads()})")
    rows = []
    own = None
    with tempfile.TemporaryDirectory() as tmp:
        for label, model, x, n, target in cases:
            per_round = max(3, n // (4 if args.quick else 1))
            r = bench_model(label, model, x, rounds=rounds, per_round=per_round, out=Path(tmp),
                            control_s=own)
            if label == "noop":  # the recorder's own thread CPU per request
                own = max(r["median"]["request"][1] - r["median"]["bare"][1], 0.0)
            rows.append((r, target))
    print(f"load average after:  {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print(f"{'model':6} {'variant':8} {'wall/req':>11} {'thread CPU/req':>15} {'wall vs bare':>13} "
          f"{'CPU vs bare':>12} {'writer CPU/req':>15}  target")
    for r, target in rows:
        bare_w, bare_t, _ = r["median"]["bare"]
        for k, (w, t, p) in r["median"].items():
            if k == "bare":
                over_w = over_t = "-"
            elif r["label"] == "noop":
                over_w = f"+{(w - bare_w) * 1e6:.1f} us"
                over_t = f"+{(t - bare_t) * 1e6:.1f} us"
            else:
                over_w = f"{(r['ratio'][k][0] - 1) * 100:+.2f} %"
                over_t = f"{(r['ratio'][k][1] - 1) * 100:+.2f} %"
            unit, scale = ("us", 1e6) if r["label"] == "noop" else ("ms", 1e3)
            writer = f"{max(p - t, 0.0) * 1e6:.1f} us" if k != "bare" else "-"
            print(f"{r['label']:6} {k:8} {w * scale:8.3f} {unit} {t * scale:12.3f} {unit} {over_w:>13} "
                  f"{over_t:>12} {writer:>15}  "
                  f"{'' if target is None or k in ('bare', 'control') else f'<= {target:.1%}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
