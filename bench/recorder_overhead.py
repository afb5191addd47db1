"""Recorder overhead per training step, against bare training and TensorBoard logging.

Model: 24 x (Linear(W, W) + ReLU), CPU, one thread, in two configurations:

- ``small``: W=128, batch 32: a ~3 ms bare step on a quiet 2-core machine, where a
  fixed per-step cost shows (small models; any GPU step whose device work is short)
- ``large``: W=128, batch 256: a ~15 ms bare step (the configuration this bench
  measured first), where a fixed cost hides

Variants, interleaved in rounds so that machine noise hits all of them alike, each on
``--models`` (3) models of its own, round r on model r % 3 (two identical models differ by
up to ~80 us a step; bench/recorder_paired.py runs every variant on one model), after
``--warmup`` (300) untimed steps per model, past the Recorder's dense spec learning (it
observes the batch of its first 256 steps): the figures are a run's steady state:

- bare:        forward, backward, SGD step
- norms only:  bare + torch._foreach_norm of every gradient (the floor any logger pays)
- debugkit:    bare inside `rec.step(...)` with `rec.log(loss=...)`, norms every step: the
               default Recorder (layer statistics every 500 steps)
- debugkit-nolayers: the same with ``layer_stats_every=None``
- tensorboard: bare + SummaryWriter.add_scalar of every parameter's gradient norm and
               the loss, each step (what TensorBoard users write)

Prints median step times and overheads; the targets are debugkit's overhead at most
1/10 of TensorBoard's and under 12 % of the bare step, and what the Recorder adds beyond
the fused norm itself under 3 %. The same comparison by the training thread's CPU time
(``time.thread_time`` around each step: time spent waiting for a core does not count, so
a loaded machine moves it far less than wall time; cache and SMT contention still do),
per-step medians and paired by round, and the CPU of debugkit's writer thread per step
(read from its own thread CPU clock), which runs beside the training thread.

Then (small config; ``--no-isolated`` skips it) the Recorder's own code timed alone:
the gradients fixed, a no-op optimizer whose step hooks still fire, the step context and
``rec.log`` called 200 times per round, rounds interleaved, each part (RNG state,
spec learning, ``rec.log``, the rows, the non-finite check) switched off in turn; the
minimum over rounds, which load inflates least.

Then (``--breakdown``, on by default) the cost of each part of the Recorder's step,
timed inside a separate recorded loop by wrapping the Recorder's own methods: gradient
norms (GradNormComputer.compute), RNG capture, batch-spec learning, memory counters,
writing the step's rows into the writer's block, the loss's ``.item()``, the rest of the
step bookkeeping,
and the writer thread's CPU time per step (it runs beside training and competes for the
GIL). debugkit opens no ``record_function`` annotation of its own: the ones a cProfile
of this loop shows are torch's ``Optimizer.step`` / ``zero_grad`` annotations, which the
bare step pays as well.

Parts are timed in place, so a part may be charged for work it only moves: the first
tensor allocated after a training step (the RNG state's 5 KB copy) pays glibc's
consolidation of the chunks backward freed, ~20 us here, which the next forward would
otherwise pay; the same call costs ~2 us a second time.

    python bench/recorder_overhead.py [--config small|large|both --rounds 30 --steps 50]
    python bench/recorder_overhead.py --config small --peers none --no-breakdown   # issue 32's figure
    python bench/recorder_overhead.py --quick   # a smoke run (tests/test_benches.py)
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/peers.py

CONFIGS = {"small": (128, 32), "large": (128, 256)}


def build(width=128):
    torch.manual_seed(0)
    layers = []
    for _ in range(24):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


# Models per variant (bare, norms, debugkit, tensorboard), round r on model r % N: two
# identical models differ by up to ~80 us a step (their tensors' addresses; six bare
# models in one process: 2,358-2,442 us), more than the 3 % target itself, so one model
# per variant made the figure a draw. Peers whose logger attaches to its model: one.
MODELS = 3
MULTI = ("bare", "norms", "debugkit", "debugkit-nolayers", "tensorboard")
WARMUP_STEPS = 300  # per model and variant (--warmup; --quick: 10)


def compare(config, rounds, steps, tmp, peers=(), n_models=MODELS, warmup=WARMUP_STEPS):
    """Per-step median time of each variant, interleaved in rotating order, each with its own
    models (``n_models`` of them, built interleaved, round ``r`` on model ``r % n_models``;
    a Recorder per debugkit model); also the training thread's CPU per step and each
    variant's background CPU (its threads and child processes) per step."""
    from peers import Background, make_logger
    from torch.utils.tensorboard import SummaryWriter

    from debugkit import Recorder

    width, batch = CONFIGS[config]
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))
    names_all = ["bare", "norms", "debugkit", "debugkit-nolayers", "tensorboard", *peers]
    n_of = {k: max(1, n_models) if k in MULTI else 1 for k in names_all}
    all_models: dict[str, list] = {k: [] for k in names_all}
    for j in range(max(n_of.values())):  # interleaved, so no variant gets the first-built ones
        for k in names_all:
            if j < n_of[k]:
                all_models[k].append(build(width))
    all_opts = {k: [torch.optim.SGD(m.parameters(), lr=1e-3) for m in ms] for k, ms in all_models.items()}
    all_params = {k: [list(m.parameters()) for m in ms] for k, ms in all_models.items()}
    # the round's model of each variant (set at each round's start; listed once, as the Recorder does)
    models = {k: ms[0] for k, ms in all_models.items()}
    opts = {k: os_[0] for k, os_ in all_opts.items()}
    params = {k: ps[0] for k, ps in all_params.items()}
    layer = [f"grad_norm/{n}" for n, _ in models["bare"].named_parameters()] + ["grad_norm/__total__"]
    bg = Background()
    loggers: dict = {}
    bg.begin("debugkit")
    recs_all = [Recorder(tmp / f"run-{config}-{j}", m, optimizer=o)
                for j, (m, o) in enumerate(zip(all_models["debugkit"], all_opts["debugkit"]))]
    bg.end("debugkit")
    # the default Recorder (layer statistics every 500 steps) and one without them
    bg.begin("debugkit-nolayers")
    recs_nol = [Recorder(tmp / f"run-{config}-nolayers-{j}", m, optimizer=o, layer_stats_every=None)
                for j, (m, o) in enumerate(zip(all_models["debugkit-nolayers"],
                                               all_opts["debugkit-nolayers"]))]
    bg.end("debugkit-nolayers")
    rec = recs_all[0]
    rec_nol = recs_nol[0]
    # The writer threads' own CPU clocks (ns resolution; /proc's stat counts 10 ms ticks).
    writer_clocks = [time.pthread_getcpuclockid(r._writer._thread.ident) for r in recs_all]

    def use(k, j):
        nonlocal rec, rec_nol
        j %= n_of[k]
        models[k], opts[k], params[k] = all_models[k][j], all_opts[k][j], all_params[k][j]
        if k == "debugkit":
            rec = recs_all[j]
        elif k == "debugkit-nolayers":
            rec_nol = recs_nol[j]
    bg.begin("tensorboard")
    tb = SummaryWriter(str(tmp / f"tb-{config}"))
    bg.end("tensorboard")
    for k in peers:
        bg.begin(k)
        loggers[k] = make_logger(k, tmp / f"{k}-{config}", models[k])
        bg.end(k)
    times: dict[str, list[float]] = {k: [] for k in models}
    cpu: dict[str, list[float]] = {k: [] for k in models}
    counters = {k: 0 for k in models}

    def fused(k):
        """The fused norms of every gradient and their total: the floor any logger pays.
        (Not m.parameters() here: walking the module tree costs ~85 us a step on this
        model, which would count as part of the norm and flatter the Recorder.)"""
        vals = torch.stack(torch._foreach_norm([p.grad for p in params[k]])).tolist()
        vals.append(math.hypot(*vals))
        return vals

    def bare(k):
        m, o = models[k], opts[k]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        o.step()

    def step_norms():
        m, o = models["norms"], opts["norms"]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        fused("norms")
        o.step()

    def recorded(k, r):  # a variant's step inside its Recorder r (bare is called alike)
        m, o = models[k], opts[k]
        with r.step((x, y)):
            loss = F.cross_entropy(m(x), y)
            o.zero_grad()
            loss.backward()
            r.log(loss=loss)
            o.step()

    def step_tb():
        m, o = models["tensorboard"], opts["tensorboard"]
        s = counters["tensorboard"]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        for n, v in zip(layer, fused("tensorboard")):
            tb.add_scalar(n, v, s)
        tb.add_scalar("loss", loss.item(), s)
        o.step()

    def peer_step(k):
        m, o, lg = models[k], opts[k], loggers[k]
        loss = F.cross_entropy(m(x), y)
        o.zero_grad()
        loss.backward()
        lg.log(counters[k], layer, None if k == "wandb_watch" else fused(k), loss)
        o.step()

    fns = {"bare": lambda: bare("bare"), "norms": step_norms, "debugkit": lambda: recorded("debugkit", rec),
           "debugkit-nolayers": lambda: recorded("debugkit-nolayers", rec_nol), "tensorboard": step_tb, **{k: (lambda k=k: peer_step(k)) for k in peers}}
    # Warm-up, each model: past the dense part of spec learning (each Recorder observes the
    # batch of its first 256 steps, then every 16th), as the breakdown and the isolated
    # parts do, so the figure is a run's steady state (10 steps before: with 3 Recorders,
    # half of the timed steps were dense ones)
    for k, f in fns.items():
        for j in range(n_of[k]):
            use(k, j)
            for _ in range(warmup):
                f()
                counters[k] += 1
    names = list(fns)
    bg_cpu = {k: 0.0 for k in names}
    per_round: dict[str, list[float]] = {k: [] for k in names}  # each round's median step
    per_round_cpu: dict[str, list[float]] = {k: [] for k in names}  # ... and its median thread CPU
    w0 = sum(time.clock_gettime(c) for c in writer_clocks)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotating order
        for k in order:
            use(k, r)
            f = fns[k]
            b0 = bg.snapshot()
            for _ in range(steps):
                c0 = time.thread_time()
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
                cpu[k].append(time.thread_time() - c0)
                counters[k] += 1
            per_round[k].append(statistics.median(times[k][-steps:]))
            per_round_cpu[k].append(statistics.median(cpu[k][-steps:]))
            b1 = bg.snapshot()
            for owner in b1:  # background work may spill into another variant's turn
                bg_cpu[owner] += b1[owner] - b0.get(owner, 0.0)
    writer_cpu = sum(time.clock_gettime(c) for c in writer_clocks) - w0
    for r_ in recs_all + recs_nol:
        r_.close()
    tb.close()
    for lg in loggers.values():
        lg.close()
    n_steps = rounds * steps

    def paired(rounds_of, k="debugkit"):
        """Paired by round (the variants of one round ran within seconds of each other),
        so that load which drifts between rounds cancels: median over rounds of
        (debugkit - norms) / bare."""
        return statistics.median((d - n) / b for d, n, b in zip(
            rounds_of[k], rounds_of["norms"], rounds_of["bare"]))

    return {"wall": {k: statistics.median(v) for k, v in times.items()},
            "cpu": {k: statistics.median(v) for k, v in cpu.items()},
            "background": {k: v / n_steps for k, v in bg_cpu.items()},
            "paired": paired(per_round), "paired_cpu": paired(per_round_cpu),
            "paired_cpu_nolayers": paired(per_round_cpu, "debugkit-nolayers"),
            "writer_cpu": writer_cpu / n_steps}


class _Timer:
    """Accumulates the time spent in wrapped callables, per part, for the current step."""

    def __init__(self):
        self.cur: dict[str, float] = {}
        self.steps: list[dict[str, float]] = []

    def wrap(self, part, fn):
        clock = time.perf_counter

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.cur[part] = self.cur.get(part, 0.0) + clock() - t0
        return timed

    def next_step(self):
        self.steps.append(self.cur)
        self.cur = {}


def breakdown(config, steps, tmp):
    """Per-part cost of the Recorder's step in microseconds: the median over steps of each
    part's time in that step (robust to a busy machine's preemptions), and the writer
    thread's CPU time divided by the steps it served."""
    from debugkit import Recorder
    from debugkit.recorder import recorder as recmod

    width, batch = CONFIGS[config]
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))
    m = build(width)
    o = torch.optim.SGD(m.parameters(), lr=1e-3)
    rec = Recorder(tmp / f"breakdown-{config}", m, optimizer=o, flush_every_s=2.0)
    tm = _Timer()
    # The full step path, whose helpers can be wrapped one by one: the default (lean) path
    # runs the same work inline in _Step.__enter__/__exit__ and the pre-hook (attribution).
    rec._lean = False
    # Outer entry points (inclusive) and the parts inside them (exclusive of each other).
    rec._begin_step = tm.wrap("_in_recorder", rec._begin_step)
    rec._end_step = tm.wrap("_in_recorder_end", rec._end_step)
    rec.log = tm.wrap("_in_log", rec.log)
    rec._pre_optimizer_step = tm.wrap("_in_pre_hook", rec._pre_optimizer_step)
    rec._post_optimizer_step = tm.wrap("_in_post_hook", rec._post_optimizer_step)
    rec._norms.compute = tm.wrap("norms", rec._norms.compute)
    orig_rng = recmod.take_rng_state
    recmod.take_rng_state = tm.wrap("rng", orig_rng)
    rec._specs.observe = tm.wrap("spec", rec._specs.observe)
    rec._specs.commit = tm.wrap("spec", rec._specs.commit)
    rec._specs.discard = tm.wrap("spec", rec._specs.discard)
    rec._rss.read = tm.wrap("memory", rec._rss.read)
    rec._finish_step_rows = tm.wrap("rows", rec._finish_step_rows)
    rec._scalar_value = tm.wrap("item", rec._scalar_value)
    writer_cpu = [0.0]
    flush = rec._writer._flush
    heartbeat = rec._writer._write_heartbeat

    def on_thread(fn):
        def timed():
            t0 = time.thread_time()
            try:
                return fn()
            finally:
                if threading.current_thread().name == "debugkit-writer":
                    writer_cpu[0] += time.thread_time() - t0
        return timed

    rec._writer._flush = on_thread(flush)
    rec._writer._write_heartbeat = on_thread(heartbeat)
    # Re-register the optimizer hooks so they call the wrapped methods.
    for h in rec._hooks:
        h.remove()
    rec._hooks = [o.register_step_pre_hook(rec._pre_optimizer_step),
                  o.register_step_post_hook(rec._post_optimizer_step)]

    def one():
        with rec.step((x, y)):
            loss = F.cross_entropy(m(x), y)
            o.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            o.step()

    for _ in range(300):  # past the dense part of spec learning (SPEC_DENSE batches)
        one()
        tm.next_step()
    tm.steps.clear()
    writer_cpu[0] = 0.0
    step_times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        one()
        step_times.append(time.perf_counter() - t0)
        tm.next_step()
    rec.close()
    recmod.take_rng_state = orig_rng
    keys = {k for st in tm.steps for k in st}
    per = {k: statistics.median(st.get(k, 0.0) for st in tm.steps) * 1e6 for k in keys}
    inside = sum(per.get(k, 0.0) for k in ("_in_recorder", "_in_recorder_end", "_in_log",
                                           "_in_pre_hook", "_in_post_hook"))
    parts = {k: per.get(k, 0.0) for k in ("norms", "rng", "spec", "memory", "rows", "item")}
    parts["rows"] -= parts["memory"]  # the RSS read happens inside the rows' call
    parts["bookkeeping"] = inside - sum(parts.values())
    parts["writer thread (CPU)"] = writer_cpu[0] / steps * 1e6
    return parts, statistics.median(step_times)


ISOLATED_PARTS = {
    "rng": "RNG state at the step's start",
    "spec": "batch-spec learning",
    "log": "rec.log(loss=...)",
    "rows": "the step's rows into the writer's block",
    "check": "the non-finite check",
}


def isolated(rounds, tmp, n=200):
    """The Recorder's own code per step with the model's work taken out: the gradients
    fixed, a no-op optimizer whose step hooks still fire, ``n`` steps per round, rounds
    interleaved in rotating order, the training thread's CPU; each part switched off in
    turn (by patching the Recorder's internals: attribution only). Minimums over rounds,
    which a loaded machine inflates least (the code is the same every round).

    Returns ``{variant: us per step beyond the fused norm}`` (``full``: as shipped)."""
    from debugkit import Recorder
    from debugkit.recorder import recorder as recmod

    class NoStep(torch.optim.Optimizer):
        def __init__(self, ps):
            super().__init__(ps, {"lr": 1e-3})

        def step(self, closure=None):
            return None

    m = build(CONFIGS["small"][0])
    x = torch.randn(CONFIGS["small"][1], CONFIGS["small"][0])
    y = torch.randint(0, 10, (CONFIGS["small"][1],))
    F.cross_entropy(m(x), y).backward()
    ps = list(m.parameters())
    loss = F.cross_entropy(m(x), y).detach()
    o0 = NoStep(ps)

    def norms():
        vals = torch.stack(torch._foreach_norm([p.grad for p in ps])).tolist()
        vals.append(math.hypot(*vals))
        o0.step()

    fns, recs = {"norms": norms}, []
    for name in ("full", *ISOLATED_PARTS):
        o = NoStep(ps)
        rec = Recorder(tmp / f"isolated-{name}", m, optimizer=o, flush_every_s=2.0)
        recs.append(rec)
        if name == "rng":
            rec._get_cpu_rng = dict  # the lean path's bound get_state
        elif name == "spec":
            rec._specs._specs, rec._specs.every = None, 0
        elif name == "rows":
            rec._finish_step_rows = lambda st, t1, ok, rec=rec: setattr(rec, "_step_no", st.step + 1)
        elif name == "check":
            rec._nonfinite.check = lambda *a, **k: None

        def f(o=o, rec=rec, log=name != "log"):
            with rec.step((x, y)):
                if log:
                    rec.log(loss=loss)
                o.step()
        fns[name] = f
    orig = recmod.take_rng_state
    best = {k: math.inf for k in fns}
    for f in fns.values():
        for _ in range(300):  # past the dense part of spec learning
            f()
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            if k == "rng":
                recmod.take_rng_state = dict
            f = fns[k]
            c0 = time.thread_time()
            for _ in range(n):
                f()
            best[k] = min(best[k], (time.thread_time() - c0) / n)
            recmod.take_rng_state = orig
    for rec in recs:
        rec.close()
    return {k: (v - best["norms"]) * 1e6 for k, v in best.items() if k != "norms"}


LABELS = {
    "norms": "gradient norms (GradNormComputer.compute)",
    "rng": "RNG capture (torch CPU generator state)",
    "spec": "batch-spec learning (observe + commit)",
    "memory": "memory counters (RSS; CUDA counters on GPU)",
    "rows": "the step's rows into the writer's block (by index)",
    "item": "loss to a Python float (rec.log)",
    "bookkeeping": "the rest of the step's bookkeeping",
    "writer thread (CPU)": "writer thread CPU time (Arrow batches, files, heartbeat)",
}


def main(argv=None):
    from peers import PEERS, available, missing_note

    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=[*CONFIGS, "both"], default="both")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--models", type=int, default=MODELS,
                    help="models per variant (bare, norms, debugkit, tensorboard), rotating by round")
    ap.add_argument("--warmup", type=int, default=WARMUP_STEPS,
                    help="untimed steps per model and variant first (the Recorder's first 256 steps "
                         "observe every batch for its spec; --models 1 --warmup 10 is the protocol "
                         "before 2026-12-06)")
    ap.add_argument("--breakdown-steps", type=int, default=2000)
    ap.add_argument("--no-breakdown", action="store_true")
    ap.add_argument("--no-isolated", action="store_true",
                    help="skip the Recorder's own code timed alone (small config)")
    ap.add_argument("--json", metavar="PATH", default=None,
                    help="append each configuration's figures as one JSON line to PATH")
    ap.add_argument("--peers", default="all",
                    help=f"comma-separated peer variants ({', '.join(PEERS)}), 'all' (those installed) or "
                         "'none'")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: small config, 3 rounds of 10 steps, no peers, 20 breakdown steps")
    a = ap.parse_args(argv)
    if a.quick:
        a.config, a.rounds, a.steps, a.breakdown_steps, a.peers = "small", 3, 10, 20, "none"
        a.warmup = 10
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="dk-bench-"))
    wanted = list(PEERS) if a.peers == "all" else [] if a.peers == "none" else a.peers.split(",")
    for note in missing_note(wanted):
        print(note)
    peers = [p for p in wanted if available(p)]
    configs = list(CONFIGS) if a.config == "both" else [a.config]
    for config in configs:
        width, batch = CONFIGS[config]
        load0 = os.getloadavg()[0]
        res = compare(config, a.rounds, a.steps, tmp, peers, a.models, a.warmup)
        med, cpu, bg, paired = res["wall"], res["cpu"], res["background"], res["paired"]
        base = med["bare"]
        print(f"\n[{config}] model: 24 x Linear({width},{width})+ReLU, batch {batch}, CPU, "
              f"1 thread; {a.rounds} rounds x {a.steps} steps per variant, rotating order, "
              f"{a.models} models per variant (round r on model r % {a.models}), {a.warmup} warm-up steps each; "
              f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
        print(f"{'variant':<14} {'median step':>12} {'overhead':>10} {'/ debugkit':>11} "
              f"{'thread CPU':>11} {'background CPU':>15}")
        dk_ov = med["debugkit"] - base
        for k in med:
            ov = med[k] - base
            rel = f"{ov / dk_ov:>10.1f}x" if dk_ov > 0 and k not in ("bare", "norms") else f"{'':>11}"
            print(f"{k:<14} {med[k] * 1e3:>10.3f}ms {ov / base * 100:>9.1f}% {rel} "
                  f"{cpu[k] * 1e3:>9.3f}ms {bg.get(k, 0.0) * 1e3:>12.3f}ms")
        tb_ov = med["tensorboard"] - base
        print("background CPU: CPU time per step of the threads and processes the variant's "
              "set-up started (writer threads, W&B's service), beside the training thread"
              + ("; W&B's service process is shared by both W&B runs and charged to the "
                 "first one set up" if {"wandb_log", "wandb_watch"} <= set(peers) else ""))
        print(f"debugkit overhead / TensorBoard overhead = {dk_ov / tb_ov:.3f} "
              f"(target <= 0.1); debugkit overhead = {dk_ov / base * 100:.1f}% of the bare "
              f"step (target <= 12%); norms alone = {(med['norms'] / base - 1) * 100:.1f}%; "
              f"debugkit beyond the norms = {(med['debugkit'] - med['norms']) / base * 100:.1f}%"
              f" (target <= 3%); paired by round: {paired * 100:.1f}%")
        # The training thread's CPU time is what the Recorder's own code costs that thread;
        # it does not count the time the thread waited for a core, so it moves far less
        # with the machine's load than wall time (cache contention still shows).
        cbase = cpu["bare"]
        print(f"by training-thread CPU (time.thread_time, per-step medians): norms alone = "
              f"{(cpu['norms'] / cbase - 1) * 100:.1f}%; debugkit beyond the norms = "
              f"{(cpu['debugkit'] - cpu['norms']) / cbase * 100:.1f}% "
              f"({(cpu['debugkit'] - cpu['norms']) * 1e6:.1f} us; paired by round: "
              f"{res['paired_cpu'] * 100:.1f}%) (target <= 3%)")
        print(f"by training-thread CPU, debugkit without layer statistics (layer_stats_every=None)"
              f" beyond the norms = {(cpu['debugkit-nolayers'] - cpu['norms']) / cbase * 100:.1f}% "
              f"({(cpu['debugkit-nolayers'] - cpu['norms']) * 1e6:.1f} us; paired by round: "
              f"{res['paired_cpu_nolayers'] * 100:.1f}%); the default's layer statistics "
              f"(every 500 steps) on its unsampled steps: "
              f"{(res['paired_cpu'] - res['paired_cpu_nolayers']) * 100:+.2f}% paired "
              "(their sampled steps, 1 in 500, are beyond per-step medians: bench/layer_stats.py)")
        print(f"debugkit's writer thread (its own CPU clock, beside training): "
              f"{res['writer_cpu'] * 1e6:.1f} us per step = {res['writer_cpu'] / cbase * 100:.2f}% "
              f"of the bare step's CPU")
        if a.json:
            import json

            with open(a.json, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"config": config, "load_before": load0,
                                     "load_after": os.getloadavg()[0], "rounds": a.rounds,
                                     "steps": a.steps, **res}) + "\n")
        if config == "small" and not a.no_isolated:
            iso = isolated(a.rounds, tmp)
            full = iso["full"]
            print(f"[small] the Recorder's own code alone (gradients fixed, no-op optimizer step "
                  f"with its hooks; min over {a.rounds} interleaved rounds of 200 steps, training-"
                  f"thread CPU): {full:.1f} us beyond the fused norm = "
                  f"{full / (cbase * 1e6) * 100:.2f}% of this run's bare step; each part (what "
                  "switching it off saves):")
            for k, label in ISOLATED_PARTS.items():
                print(f"  {label:<58} {full - iso[k]:>8.1f} us")
            if a.json:
                import json

                with open(a.json, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"config": config, "isolated_us": iso}) + "\n")
        if a.no_breakdown:
            continue
        parts, rec_step = breakdown(config, a.breakdown_steps, tmp)
        # Percentages against this loop's own bare part (its median step less the parts),
        # so that load which changed between the two measurements does not skew them.
        base = rec_step - sum(parts.values()) / 1e6
        print(f"[{config}] cost of each part of the Recorder's step "
              f"({a.breakdown_steps} steps after 300 warm-up; recorded step {rec_step * 1e3:.3f} "
              f"ms, of which the training itself ~{base * 1e3:.3f} ms):")
        for k, us in parts.items():
            print(f"  {LABELS[k]:<58} {us:>8.1f} us  {us / (base * 1e6) * 100:>6.2f}% of bare")
        beyond = sum(v for k, v in parts.items() if k != "norms")
        print(f"  {'all parts but the norms':<58} {beyond:>8.1f} us  "
              f"{beyond / (base * 1e6) * 100:>6.2f}% of bare")


if __name__ == "__main__":
    main()
