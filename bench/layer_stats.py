"""Cost of the layer statistics (``Recorder(layer_stats_every=N)``) against its peers.

Model: 24 x (Linear(W, W) + ReLU) + Linear(W, 10), CPU, one torch thread, two configs:

- ``small``: W=128, batch 32 (a ~2-3 ms bare step on a quiet machine)
- ``large``: W=256, batch 1024 (a ~30 ms bare step)

Variants, each with its own model, run in interleaved rounds (rotating order) so machine
noise hits all alike; per-step time of a round is the training thread's CPU time (and
wall time) / steps, medians over rounds are printed:

- bare:           forward, backward, SGD step
- recorder:       bare inside ``rec.step`` with ``rec.log(loss=...)`` (norms every step)
- recorder+layers: the same with ``layer_stats_every=N``
- tb histograms:  bare + ``SummaryWriter.add_histogram`` of every weight and gradient
                  every N steps (TensorBoard's way to look inside the layers)
- wandb.watch:    bare + ``wandb.watch(model, log="all", log_freq=N)`` offline (skipped
                  with a note when wandb is not installed; bench/requirements-peers.txt)

Prints the overheads against bare, the layer statistics' own cost (recorder+layers
against recorder) against the issue's targets (<= 2 % of the small step, <= 1 % of the
large one at the default N), then the same cost from its two parts measured step by step
(one sampled step's extra, one unsampled step's extra; paired medians, which a loaded
machine disturbs far less than the whole-loop rounds) and the N at which it meets the
target.

The layer statistics are on by default at ``layer_stats_every=500``; ``--every`` (500,
the default) is the N they are measured at.

    python bench/layer_stats.py [--config small|large|both] [--every 500] [--rounds 9] [--steps 200]
    python bench/layer_stats.py --quick     # a smoke run (tests/test_benches.py): few steps
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = {"small": (128, 32), "large": (256, 1024)}


def _model(width):
    torch.manual_seed(0)
    layers = []
    for _ in range(24):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class Variant:
    def __init__(self, name, width, batch, tmp, every, kind):
        self.name = name
        self.model = _model(width)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(batch, width, generator=g)
        self.y = torch.randint(0, 10, (batch,), generator=g)
        self.kind, self.every, self.i = kind, every, 0
        self.rec = self.tb = self.wb = None
        if kind in ("recorder", "layers"):
            from debugkit import Recorder

            self.rec = Recorder(Path(tmp) / name, self.model, self.opt,
                                layer_stats_every=every if kind == "layers" else None)
        elif kind == "tb":
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(Path(tmp) / name))
        elif kind == "wandb":
            import wandb

            self.wb = wandb.init(project="bench", mode="offline", dir=str(tmp))
            self.wb.watch(self.model, log="all", log_freq=every)

    def _body(self):
        loss = F.cross_entropy(self.model(self.x), self.y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss

    def step(self):
        if self.rec is not None:
            with self.rec.step(None):
                self.rec.log(loss=self._body())
        else:
            loss = self._body()
            if self.tb is not None and self.i % self.every == 0:
                for n, p in self.model.named_parameters():
                    self.tb.add_histogram("w/" + n, p, self.i)
                    self.tb.add_histogram("g/" + n, p.grad, self.i)
            if self.wb is not None:
                self.wb.log({"loss": loss.item()})
        self.i += 1

    def close(self):
        if self.rec is not None:
            self.rec.close()
        if self.tb is not None:
            self.tb.close()
        if self.wb is not None:
            self.wb.finish()


def run(config, every, rounds, steps):
    width, batch = CONFIGS[config]
    kinds = [("bare", "bare"), ("recorder", "recorder"), ("recorder+layers", "layers"),
             ("tb histograms", "tb")]
    try:
        import wandb  # noqa: F401

        kinds.append(("wandb.watch", "wandb"))
    except ImportError:
        print("note: wandb is not installed: wandb.watch(log='all') skipped "
              "(pip install -r bench/requirements-peers.txt)")
    with tempfile.TemporaryDirectory() as tmp:
        vs = [Variant(n, width, batch, tmp, every, k) for n, k in kinds]
        for v in vs:  # warm up, and start every variant's step counter off a sample
            for _ in range(3):
                v.step()
            v.i = 0
        times = {v.name: [] for v in vs}
        cpu = {v.name: [] for v in vs}
        proc = {v.name: [] for v in vs}
        load0 = os.getloadavg()[0]
        for r in range(rounds):
            order = vs[r % len(vs):] + vs[:r % len(vs)]
            for v in order:
                t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
                for _ in range(steps):
                    v.step()
                times[v.name].append((time.perf_counter() - t0) / steps)
                cpu[v.name].append((time.thread_time() - c0) / steps)
                proc[v.name].append((time.process_time() - p0) / steps)
        for v in vs:
            v.close()
        load1 = os.getloadavg()[0]
    wall = {k: statistics.median(t) for k, t in times.items()}
    med = {k: statistics.median(t) for k, t in cpu.items()}
    pmed = {k: statistics.median(t) for k, t in proc.items()}
    bare = med["bare"]
    print(f"\nconfig {config} (W={width}, batch {batch}), every={every}, {rounds} rounds x "
          f"{steps} steps, load average {load0:.1f} -> {load1:.1f}; median per step of the "
          "training thread's CPU time (which preemption on a loaded machine does not "
          "inflate), the process's CPU time (all threads: the Recorder's writer thread "
          "too) and wall time:")
    for k, t in med.items():
        extra = "" if k == "bare" else f"  {100 * (t / bare - 1):+6.2f} % vs bare"
        pextra = "" if k == "bare" else f" {100 * (pmed[k] / pmed['bare'] - 1):+.2f} %"
        print(f"  {k:16s} {1e3 * t:8.3f} ms CPU{extra}   (process {1e3 * pmed[k]:.3f} ms"
              f"{pextra}, wall {1e3 * wall[k]:.3f} ms)")
    own = med["recorder+layers"] / med["recorder"] - 1
    pown = pmed["recorder+layers"] / pmed["recorder"] - 1
    target = 0.02 if config == "small" else 0.01
    print(f"  layer statistics beyond the recorder: {100 * own:+.2f} % of thread CPU, "
          f"{100 * pown:+.2f} % of process CPU (target <= {100 * target:.0f} %: "
          f"{'met' if max(own, pown) <= target else 'NOT met'})")
    # Each peer's cost of looking inside the layers at the same N, against ours (the peers
    # beyond the bare loop, ours beyond the Recorder without layer statistics; process CPU,
    # which counts wandb's and TensorBoard's writer threads).
    ours = pmed["recorder+layers"] - pmed["recorder"]
    for peer in ("tb histograms", "wandb.watch"):
        if peer in med:
            theirs = pmed[peer] - pmed["bare"]
            ratio = f"{theirs / ours:.1f}x ours" if ours > 0 else "ours is within noise"
            print(f"  {peer} beyond bare: {100 * (med[peer] / bare - 1):+.2f} % of thread CPU, "
                  f"{100 * theirs / pmed['bare']:+.2f} % of process CPU = {ratio} (target: "
                  f"ours cheaper: {'met' if theirs > ours else 'NOT met'})")
    return med


def _paired(a, b, reps):
    """Median thread-CPU time of one step of ``a`` and of ``b``, stepped alternately in
    ABBA order (whichever runs first after the other measured ~0.2 ms slower per step on
    the loaded 2-core machine; the alternation cancels that)."""
    t: dict = {"a": [], "b": []}
    for i in range(reps):
        for v, k in ((a, "a"), (b, "b")) if i % 2 == 0 else ((b, "b"), (a, "a")):
            t0 = time.thread_time()
            v.step()
            t[k].append(time.thread_time() - t0)
    return statistics.median(t["a"]), statistics.median(t["b"])


def step_costs(config, every, reps_sampled=20, reps_unsampled=None, quick=False):
    """The two parts of the layer statistics' cost, each measured step by step (robust to a
    loaded machine): one sampled step's extra (every=1 against the Recorder alone, paired,
    alternating, medians) and what an unsampled step pays, in place: one Recorder with
    layer statistics (never sampled, past the trigger band's dense start) steps alternately
    with them on and detached (``rec._layer_stats = None``: the same model and Recorder,
    ABBA, medians: the inline "sampled" test and band check of the lean path), plus the
    band updates (``LayerStats.observe_norms``, called on every ``update_every``-th step
    and when a norm leaves the band: its median per call x its calls per step). A paired
    comparison of two Recorders, also printed, carries their models' placement noise, tens
    of us on a loaded 2-core machine. Their sum at ``every`` is the overhead a run pays,
    ``(trigger + sampled / every) / recorder step``. TensorBoard's ``add_histogram`` of every
    weight and gradient is measured the same way per logged step, for the peers' ratio."""
    width, batch = CONFIGS[config]
    reps_unsampled = reps_unsampled or (400 if config == "small" else 100)
    if quick:
        reps_sampled, reps_unsampled = 4, 20
    with tempfile.TemporaryDirectory() as tmp:
        on = Variant("on", width, batch, tmp, 1, "layers")
        never = Variant("never", width, batch, tmp, 10**9, "layers")
        off = Variant("off", width, batch, tmp, 1, "recorder")
        bare = Variant("bare", width, batch, tmp, 1, "bare")
        tb = Variant("tb", width, batch, tmp, 1, "tb")
        for v in (on, never, off, bare, tb):
            for _ in range(3):
                v.step()
        a, b = _paired(on, off, reps_sampled)
        c, d = _paired(never, off, reps_unsampled)
        e, f = _paired(tb, bare, reps_sampled)
        rec = never.rec
        ls = rec._layer_stats
        for _ in range(0 if quick else 80):  # past the band's dense start (64 observations)
            never.step()
        trig: list = []
        observe = ls.observe_norms

        def timed(step, values):
            t0 = time.thread_time()
            try:
                return observe(step, values)
            finally:
                trig.append(time.thread_time() - t0)

        ls.observe_norms = timed
        t_on: list = []
        t_off: list = []
        for i in range(reps_unsampled):
            for with_ls in (True, False) if i % 2 == 0 else (False, True):
                rec._layer_stats = ls if with_ls else None
                rec._lean = rec._lean_ok
                t0 = time.thread_time()
                never.step()
                (t_on if with_ls else t_off).append(time.thread_time() - t0)
        rec._layer_stats = ls
        for v in (on, never, off, bare, tb):
            v.close()
    sampled, unsampled, tb_logged = a - b, c - d, e - f
    inline = statistics.median(t_on) - statistics.median(t_off)
    band = statistics.median(trig) * len(trig) / len(t_on) if trig else 0.0
    trigger = inline + band
    est = (trigger + sampled / every) / d
    target = 0.02 if config == "small" else 0.01
    print(f"  one sampled step: {1e3 * a:.3f} ms CPU vs {1e3 * b:.3f} ms unsampled "
          f"(+{1e3 * sampled:.3f} ms)")
    print(f"  an unsampled step, in place (the same Recorder with its layer statistics on and "
          f"detached, alternating): {1e6 * inline:+.1f} us, + band updates "
          f"{1e6 * band:.1f} us/step ({len(trig)} calls in {len(t_on)} steps) = "
          f"{1e6 * trigger:.1f} us (two Recorders paired: {1e6 * c:.1f} us vs {1e6 * d:.1f} us, "
          f"{1e6 * unsampled:+.1f} us)")
    print(f"  => at every={every}: ({1e6 * trigger:.1f} us + {1e3 * sampled:.3f} ms / {every})"
          f" / {1e3 * d:.3f} ms = {100 * est:+.2f} % (target <= {100 * target:.0f} %: "
          f"{'met' if est <= target else 'NOT met'}); break-even every="
          f"{math.ceil(sampled / max(1e-12, target * d - trigger)) if target * d > trigger else 'none'}")
    print(f"  TensorBoard add_histogram of every weight and gradient: +{1e3 * tb_logged:.3f} ms per "
          f"logged step = {tb_logged / sampled:.2f}x one sampled step of ours (target: ours "
          f"cheaper: {'met' if tb_logged > sampled else 'NOT met'})")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", choices=["small", "large", "both"], default="small")
    p.add_argument("--every", type=int, default=500)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 2 rounds of 10 steps, every=5, few paired steps")
    a = p.parse_args(argv)
    if a.quick:
        a.rounds, a.steps, a.every = 2, 10, 5
    torch.set_num_threads(1)
    for c in (["small", "large"] if a.config == "both" else [a.config]):
        run(c, a.every, a.rounds, a.steps)
        step_costs(c, a.every, quick=a.quick)


if __name__ == "__main__":
    main()
