"""Per-request cost of ``debugkit.serve`` against the bare handler, side by side.

Three CPU models (one torch thread): a no-op (``Linear(8, 8)``, the recorder's own cost),
a ~1 ms and a ~20 ms MLP. Variants of the handler, all run on the same model and input:

- ``bare``       ``with torch.no_grad(): y = model(x)``
- ``bare again`` the same function again: an A/A check of the method. Its overhead is
                 the bench's own bias and noise; a method that shows a cost here (order,
                 warm-up, the state a variant leaves behind) cannot be trusted for the rest
- ``request``    the bare handler inside ``with rec.request({"x": x}) as r: r.output(y)``
- ``wrap``       ``rec.wrap(model)(x)``
- ``no finite``  ``request`` on a recorder with ``check_finite=False`` (the finiteness
                 check's share of the cost)
- ``no capture`` ``request`` on a recorder with ``capture=False`` (no failure captures, so
                 no copy of the RNG state at each request's start: that copy's share)
- ``no memory``  ``request`` on a recorder that never reads memory (``memory_every_s`` of
                 1e9 s: the share of the readings taken every ``memory_every_s``, debugkit.serve's
                 default, 50 ms: the line ``memory read by ...`` prints the interval used)
- ``timer``      the least instrumentation a service writes by hand: two
                 ``time.perf_counter()`` calls around the model and an append of the
                 latency to a list (a reference for what any per-request code costs here)
- ``control``    the bare handler after a loop of pure Python as long as the recorder's own
                 cost (calibrated on the no-op model, without system calls): added work
                 that the bench must show at about its own length. The recorder's code costs
                 more next to a real model than in a tight loop because it runs with the
                 caches the model left (weights and kernels evict it): the control's tiny
                 loop does not, so the gap between the two is that effect, not the bench

Method: blocks of runs. Each case builds ``--models`` identical models (same weights and
inputs, each its own tensors on the heap) and a set of recorders per model; block ``b``
runs every variant on model ``b mod --models`` (the same model object and input tensor
for all variants of a block). In each block every variant runs ``run`` consecutive
requests, in an order shuffled per block; the first request of each run is discarded
(the switch from the previous variant), so what a variant leaves behind for its next
request stays in its own figures; the orders come from a new seed each run (printed;
``--seed`` repeats them), so an effect of the order is noise across runs, not a bias
repeated by every run. Each recorder's memory-reading schedule (``memory_every_s``) runs as
if its requests came back to back (:class:`MemoryClock`): the counted requests read memory
as often as a steady service's do (a line says how many did); before, the discarded first
request of each run took the reading that was due and the counted ones of a ~1 ms model
none. Each request is timed alone by the request thread's CPU
time (``time.thread_time``: other processes on a shared machine do not count) and by wall
time. A variant's overhead is the median over blocks of (its median request - the mean of
the two bare twins' median requests in the same block), as a share of the bare handler's
median; ``[lo, hi]`` is that median's 95 % interval (order statistics of the paired
differences). The A/A row is ``bare again`` - ``bare``.

Why this protocol: the ~1 ms figure moved by up to ~2 points between identical runs of the
previous one (one model and one bare handler per process, 250 blocks). That spread is about
what the median's own sampling noise gives (its 95 % interval was about as wide), plus
whatever one heap layout adds (where the weights, the input and the recorder's objects
land decides which cache sets they share: the recorder bench found identical models up
to ~80 us/step apart). So: more blocks, the baseline averaged over the two bare twins (a
third less noise variance in each paired difference than one twin), and the blocks rotated
over identical models, each with its own recorders, so no single layout decides; the
``models`` line prints each model's own median (each over a quarter of the blocks, so
about twice as noisy as the estimate). The writer threads' CPU is
read from their own clocks (``time.pthread_getcpuclockid``) and divided by the requests
they recorded.

    python bench/serve_overhead.py [--quick] [--blocks-scale 1.0] [--models 4] [--cases 1ms,20ms]

The last lines are the targets (<= 3 % at ~1 ms, <= 0.5 % at ~20 ms, by request-thread
CPU) with ``met`` / ``NOT met``, each preceded by the ``parts`` line: ``request`` minus
``no finite``, ``no capture`` and ``no memory`` (what each part costs where it runs) and
what is left.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: identical models per case (the blocks rotate over them)
DEFAULT_MODELS = 4
#: label: (hidden, layers, batch, requests per run, blocks, blocks with --quick, target)
CASES = {
    "noop": (8, 1, 1, 8, 300, 20, None),
    "1ms": (512, 4, 48, 4, 400, 12, 0.03),
    "20ms": (1024, 8, 160, 3, 90, 3, 0.005),
}
#: label: (units, units with --quick) of the interleaved phase (:func:`bench_interleaved`)
#: that gives the case's target line (~2 min of a quiet machine at ~20 ms)
INTERLEAVED_UNITS = {"20ms": (1500, 8)}


def build(hidden: int, layers: int, batch: int):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*mods).eval(), torch.randn(batch, hidden)


def spin_loop(n: int) -> None:
    """Pure Python work (no system call, a few bytes of code)."""
    for _ in range(n):
        pass


def calibrate_spin(seconds: float) -> int:
    """Loop iterations of :func:`spin_loop` that take ``seconds`` of thread CPU."""
    if seconds <= 0:
        return 0
    n = 1000
    while True:
        t = time.thread_time()
        for _ in range(20):
            spin_loop(n)
        per = (time.thread_time() - t) / 20
        if per > 2e-4:
            return max(1, int(n * seconds / per))
        n *= 4


def thread_cpu(thread) -> float:
    """CPU seconds a running thread has used (0.0 where the platform cannot tell)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError):
        return 0.0


def median_ci(values: list[float]) -> tuple[float, float, float]:
    """Median and its 95 % interval from order statistics (distribution-free)."""
    v = sorted(values)
    n = len(v)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return statistics.median(v), v[lo], v[hi]


class MemoryClock:
    """Each recorder's memory-reading schedule as if its requests ran back to back.

    A recorder reads memory when ``memory_every_s`` (50 ms; 5 ms until the seventh round) has passed since its last
    reading. In the bench a recorder's requests come in runs of a few, with the other
    variants' runs between them (tens of ms): every run's first request (the discarded
    switch) found a reading due and took it, and the counted ones (a ~1 ms model: 4 in
    ~4.5 ms) then never did, so the readings' cost fell outside the figures (a steady
    ~1 ms service reads at about one request in five). :meth:`pause` keeps how long the
    recorder had left until its next reading when its run ends; :meth:`resume` gives it
    that much again when its next run starts, so the counted requests read memory as
    often as in a steady stream of them.
    """

    def __init__(self):
        self._left: dict[int, float] = {}

    def resume(self, rec, now: float) -> None:
        rec._mem_next = now + self._left.get(id(rec), 0.0)

    def pause(self, rec, now: float) -> None:
        self._left[id(rec)] = max(0.0, rec._mem_next - now)


#: which recorder of a model's set each variant records with
VARIANT_RECORDER = {"request": "rec", "wrap": "rec", "no finite": "rec_nf", "no capture": "rec_nc",
                    "no memory": "rec_nm"}


def handlers(model, *, rec, rec_nf, rec_nc, rec_nm, spin_n: int | None) -> dict:
    """The variants' handlers on one model (each with its own recorders)."""
    import torch

    wrapped = rec.wrap(model)

    def bare(x):
        with torch.no_grad():
            return model(x)

    def bare_again(x):
        with torch.no_grad():
            return model(x)

    def request(x):
        with torch.no_grad(), rec.request({"x": x}) as r:
            return r.output(model(x))

    def wrap(x):
        with torch.no_grad():
            return wrapped(x)

    def no_finite(x):
        with torch.no_grad(), rec_nf.request({"x": x}) as r:
            return r.output(model(x))

    def no_capture(x):
        with torch.no_grad(), rec_nc.request({"x": x}) as r:
            return r.output(model(x))

    def no_memory(x):
        with torch.no_grad(), rec_nm.request({"x": x}) as r:
            return r.output(model(x))

    latencies: list[float] = []
    perf_counter = time.perf_counter

    def timer(x):
        t = perf_counter()
        with torch.no_grad():
            y = model(x)
        latencies.append(perf_counter() - t)
        if len(latencies) > 64:
            latencies.clear()
        return y

    def control(x):
        spin_loop(spin_n or 0)
        with torch.no_grad():
            return model(x)

    variants = {"bare": bare, "bare again": bare_again, "request": request, "wrap": wrap,
                "no finite": no_finite, "no capture": no_capture, "no memory": no_memory,
                "timer": timer}
    if spin_n is not None:
        variants["control"] = control
    return variants


def bench_model(label: str, models: list, xs: list, *, run: int, blocks: int, out: Path,
                spin_n: int | None, seed: int = 0, memory_every_s: float | None = None) -> dict:
    """Every variant on every model, blocks rotating over the models (see the module's
    docstring). ``models`` and ``xs``: identical models and their inputs; ``seed``: the
    blocks' variant orders; ``memory_every_s``: the recorders' (default: debugkit.serve's)."""
    import debugkit

    recs = []
    per_model = []
    kw = {"hash_weights": False}
    if memory_every_s is not None:
        kw["memory_every_s"] = memory_every_s
    for i, model in enumerate(models):
        rs = {"rec": debugkit.serve(model, out / f"{label}-{i}", **kw),
              "rec_nf": debugkit.serve(model, out / f"{label}-{i}-nofinite", check_finite=False, **kw),
              "rec_nc": debugkit.serve(model, out / f"{label}-{i}-nocapture", capture=False, **kw),
              "rec_nm": debugkit.serve(model, out / f"{label}-{i}-nomemory", hash_weights=False,
                                       memory_every_s=1e9)}
        recs += rs.values()
        per_model.append((handlers(model, spin_n=spin_n, **rs), rs))
    names = list(per_model[0][0])
    for (variants, _), x in zip(per_model, xs):  # warm-up: lazy initialisation, the first writer flush
        for fn in variants.values():
            for _ in range(3 * run):
                fn(x)
    cpu: dict[str, list[float]] = {k: [] for k in names}   # per block: median request
    wall: dict[str, list[float]] = {k: [] for k in names}
    block_model: list[int] = []
    thread_time, perf = time.thread_time, time.perf_counter
    writers = [r._writer._thread for r in recs]
    w0 = sum(thread_cpu(t) for t in writers)
    n0 = sum(r.requests for r in recs)
    rng = random.Random(seed)
    order = list(names)
    clock = MemoryClock()
    reads = counted = 0  # memory readings taken by the counted requests of `request`
    for b in range(blocks):
        i = b % len(models)
        (variants, rs), x = per_model[i], xs[i]
        block_model.append(i)
        rng.shuffle(order)
        for k in order:
            fn = variants[k]
            r = rs.get(VARIANT_RECORDER.get(k, ""))
            if r is not None:
                clock.resume(r, perf())
            fn(x)  # the switch from the previous variant: not counted
            ts, ws = [], []
            for _ in range(run):
                due = r._mem_next if r is not None else 0.0
                w, t = perf(), thread_time()
                fn(x)
                ts.append(thread_time() - t)
                ws.append(perf() - w)
                if k == "request":
                    counted += 1
                    reads += r._mem_next != due  # a reading moves the next one on
            if r is not None:
                clock.pause(r, perf())
            cpu[k].append(statistics.median(ts))
            wall[k].append(statistics.median(ws))
    writer_s = (sum(thread_cpu(t) for t in writers) - w0) / max(sum(r.requests for r in recs) - n0, 1)
    for r in recs:
        r.close()
    res = {"label": label, "writer_s": writer_s, "models": len(models), "variants": {},
           "mem_reads": (reads, counted), "recorders": len(recs),
           "memory_every_s": per_model[0][1]["rec"]._mem_every}
    # the baseline of each block: the mean of its two bare twins (half the baseline's noise
    # variance of one twin; the twins' difference is the A/A row)
    base_cpu = [(a + b) / 2 for a, b in zip(cpu["bare"], cpu["bare again"])]
    base_wall = [(a + b) / 2 for a, b in zip(wall["bare"], wall["bare again"])]
    for k in names:
        if k in ("bare", "bare again"):
            d_cpu = [a - b for a, b in zip(cpu[k], cpu["bare"])]
            d_wall = [a - b for a, b in zip(wall[k], wall["bare"])]
        else:
            d_cpu = [a - b for a, b in zip(cpu[k], base_cpu)]
            d_wall = [a - b for a, b in zip(wall[k], base_wall)]
        by_model = [statistics.median([d for d, m in zip(d_cpu, block_model) if m == i] or [math.nan])
                    for i in range(len(models))]
        res["variants"][k] = {"cpu": statistics.median(cpu[k]), "wall": statistics.median(wall[k]),
                              "d_cpu": median_ci(d_cpu), "d_wall": median_ci(d_wall),
                              "d_cpu_by_model": by_model, "d_cpu_blocks": d_cpu}
    return res


#: the variants of the interleaved phase (one request each per unit)
INTERLEAVED = ("bare", "bare again", "request", "wrap")


def bench_interleaved(label: str, models: list, xs: list, *, units: int, out: Path, seed: int = 0,
                      memory_every_s: float | None = None, names: tuple = INTERLEAVED,
                      spin_n: int | None = None) -> dict:
    """The verdict's phase for a slow model: ``units`` units, each ONE request of each of
    :data:`INTERLEAVED` in a shuffled order (unit ``u`` on model ``u mod len(models)``, a
    recorder of its own per model), each request timed alone by thread CPU. The paired
    difference of a unit is its request minus the mean of its two bare twins (the A/A:
    ``bare again - bare``), so the requests compared are at most three apart: the
    machine's own drift (other processes' use of the caches and memory) is about twice as
    small between neighbouring ~20 ms requests as between requests 8 to 30 apart (measured:
    docs/serving.md#sixth-round), which the blocks' runs of 4 requests per variant are.
    Without the blocks' discarded switch: next to a model that evicts every cache (the
    ~20 ms one) what the previous variant leaves is gone; the A/A row checks it. ``names``:
    the variants (``bare`` and ``bare again`` among them; ``control`` with ``spin_n``)."""
    import debugkit

    kw = {"hash_weights": False}
    if memory_every_s is not None:
        kw["memory_every_s"] = memory_every_s
    recs, per_model = [], []
    for i, model in enumerate(models):
        rec = debugkit.serve(model, out / f"{label}-interleaved-{i}", **kw)
        recs.append(rec)
        v = handlers(model, rec=rec, rec_nf=rec, rec_nc=rec, rec_nm=rec, spin_n=spin_n)
        per_model.append({k: v[k] for k in names})
    for variants, x in zip(per_model, xs):  # warm-up
        for fn in variants.values():
            for _ in range(3):
                fn(x)
    cpu: dict[str, list[float]] = {k: [] for k in names}
    thread_time, perf = time.thread_time, time.perf_counter
    rng = random.Random(seed)
    order = list(names)
    clock = MemoryClock()
    reads = 0
    for u in range(units):
        i = u % len(models)
        variants, x, rec = per_model[i], xs[i], recs[i]
        rng.shuffle(order)
        for k in order:
            fn = variants[k]
            recorded = k in ("request", "wrap")
            if recorded:
                clock.resume(rec, perf())
                due = rec._mem_next
            t = thread_time()
            fn(x)
            cpu[k].append(thread_time() - t)
            if recorded:
                reads += k == "request" and rec._mem_next != due
                clock.pause(rec, perf())
    for rec in recs:
        rec.close()
    base = [(a + b) / 2 for a, b in zip(cpu["bare"], cpu["bare again"])]
    diffs = {"bare again": [a - b for a, b in zip(cpu["bare again"], cpu["bare"])]}
    for k in names:
        if k not in ("bare", "bare again"):
            diffs[k] = [a - b for a, b in zip(cpu[k], base)]
    return {"label": label, "units": units, "bare_cpu": statistics.median(cpu["bare"]),
            "d_cpu": {k: median_ci(d) for k, d in diffs.items()}, "d_cpu_units": diffs,
            "mem_reads": (reads, units)}


def verdict(m: float, lo: float, hi: float, target: float) -> str:
    """``met`` when the whole 95 % interval is at or under the target, ``NOT met`` when
    the estimate is over it, ``undecided`` when the estimate is under but the interval
    reaches over it (the run could not tell)."""
    if hi <= target:
        return "met"
    return "NOT met" if m > target else "undecided (the interval reaches over the target)"


def default_note(every: float) -> str:
    """Says whether the recorders' interval is debugkit.serve's default."""
    from debugkit.recorder.serve import DEFAULT_MEMORY_EVERY_S, MEMORY_EVERY_ENV

    if every == DEFAULT_MEMORY_EVERY_S:
        return ", debugkit.serve's default"
    env = os.environ.get(MEMORY_EVERY_ENV)
    return f", NOT the default {DEFAULT_MEMORY_EVERY_S * 1e3:g} ms" + (f": {MEMORY_EVERY_ENV}={env}" if env else "")


def models_line(variants: dict, bare_cpu: float) -> str:
    """Each model's own median of ``request`` and of the A/A twin (the spread between
    identical models is what one model per run leaves to chance)."""
    return "; ".join(f"{k} " + ", ".join(f"{d / bare_cpu:+.2%}" for d in variants[k]["d_cpu_by_model"])
                     for k in ("request", "bare again"))


def parts_line(variants: dict, bare_cpu: float) -> str:
    """What each part of ``request`` costs (``request`` minus the variant without it, as a
    share of the bare handler's CPU) and the rest."""
    total = variants["request"]["d_cpu"][0]
    shares = {name: total - variants[k]["d_cpu"][0] for name, k in
              (("finiteness", "no finite"), ("RNG copy", "no capture"), ("memory reads", "no memory"))}
    text = ", ".join(f"{name} {v / bare_cpu:+.2%}" for name, v in shares.items())
    return f"{text}, the rest {(total - sum(shares.values())) / bare_cpu:+.2%} (of request {total / bare_cpu:+.2%})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few blocks (a smoke run; its figures are noise)")
    ap.add_argument("--blocks-scale", type=float, default=1.0, help="multiply every model's blocks")
    ap.add_argument("--models", type=int, default=DEFAULT_MODELS,
                    help="identical models per case, the blocks rotating over them (default %(default)s)")
    ap.add_argument("--seed", type=int, default=None,
                    help="the blocks' variant orders (default: a new one each run, printed; a fixed "
                         "seed repeats the same orders, and so any effect of them, in every run)")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="which cases to run, comma-separated (default: all; without noop no control)")
    args = ap.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not cases or set(cases) - set(CASES) or args.models < 1:
        ap.error(f"--cases: a comma-separated subset of {', '.join(CASES)}; --models: >= 1")
    import torch

    torch.set_num_threads(1)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    print(f"seed: {seed}  (--seed {seed} repeats this run's variant orders)")
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}  "
          f"(cpus: {os.cpu_count()}, torch threads: {torch.get_num_threads()})")
    results = []
    own = None
    spin_n = None
    with tempfile.TemporaryDirectory() as tmp:
        for label, (hidden, layers, batch, run, blocks, quick_blocks, target) in CASES.items():
            if label not in cases:
                continue
            built = [build(hidden, layers, batch) for _ in range(args.models)]
            n_blocks = quick_blocks if args.quick else max(3, int(blocks * args.blocks_scale))
            n_blocks = max(n_blocks, args.models)
            r = bench_model(label, [m for m, _ in built], [x for _, x in built], run=run, blocks=n_blocks,
                            out=Path(tmp), seed=seed + len(results),
                            spin_n=None if label == "noop" else spin_n)
            if label == "noop":  # the recorder's own request-thread CPU, warm
                own = max(r["variants"]["request"]["d_cpu"][0], 0.0)
                spin_n = calibrate_spin(own)
            r["target"] = target
            r["blocks"] = n_blocks
            if label in INTERLEAVED_UNITS:
                units, quick_units = INTERLEAVED_UNITS[label]
                n_units = quick_units if args.quick else max(3, int(units * args.blocks_scale))
                r["interleaved"] = bench_interleaved(label, [m for m, _ in built], [x for _, x in built],
                                                     units=n_units, out=Path(tmp), seed=seed + 100 + len(results))
            results.append(r)
    print(f"load average after:  {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    if spin_n is not None:
        print(f"control: a Python loop of {spin_n:,} iterations ({(own or 0) * 1e6:.1f} us of thread CPU alone)")
    print()
    print(f"{'model':6} {'variant':10} {'CPU/req':>10} {'wall/req':>10}  {'CPU vs bare [95% interval]':>32}  "
          f"{'wall vs bare':>12}")
    for r in results:
        unit, scale = ("us", 1e6) if r["label"] == "noop" else ("ms", 1e3)
        bare_cpu = r["variants"]["bare"]["cpu"]
        bare_wall = r["variants"]["bare"]["wall"]
        for k, v in r["variants"].items():
            if k == "bare":
                over_c = over_w = "-"
            elif r["label"] == "noop":
                m, lo, hi = v["d_cpu"]
                over_c = f"{m * 1e6:+.2f} us [{lo * 1e6:+.2f}, {hi * 1e6:+.2f}]"
                over_w = f"{v['d_wall'][0] * 1e6:+.2f} us"
            else:
                m, lo, hi = (d / bare_cpu * 100 for d in v["d_cpu"])
                over_c = f"{m:+.2f} % [{lo:+.2f}, {hi:+.2f}]"
                over_w = f"{v['d_wall'][0] / bare_wall * 100:+.2f} %"
            print(f"{r['label']:6} {k:10} {v['cpu'] * scale:7.3f} {unit} {v['wall'] * scale:7.3f} {unit}  "
                  f"{over_c:>32}  {over_w:>12}")
        print(f"{r['label']:6} writer thread: {r['writer_s'] * 1e6:.2f} us CPU per recorded request "
              f"({r['blocks']} blocks over {r['models']} models; {r['recorders']} recorders, each "
              f"with its own writer and its fixed cost per flush)")
        reads, counted = r["mem_reads"]
        print(f"{r['label']:6} memory read by {reads} of {counted} counted `request` requests "
              f"({reads / max(counted, 1):.1%}; memory_every_s {r['memory_every_s'] * 1e3:g} ms"
              f"{default_note(r['memory_every_s'])}; each recorder's schedule as if its requests ran back to back)")
        if r["label"] != "noop":
            print(f"{r['label']:6} models: " + models_line(r["variants"], bare_cpu))
        il = r.get("interleaved")
        if il is not None:
            ib = il["bare_cpu"]
            text = ", ".join(f"{k} {il['d_cpu'][k][0] / ib:+.2%} [{il['d_cpu'][k][1] / ib:+.2%}, "
                             f"{il['d_cpu'][k][2] / ib:+.2%}]" for k in ("request", "wrap", "bare again"))
            print(f"{r['label']:6} interleaved: {text} ({il['units']} units of one request per variant, "
                  f"bare {ib * 1e3:.3f} ms; memory read by {il['mem_reads'][0]} of {il['mem_reads'][1]} "
                  f"`request` requests): the target line's figures")
    print()
    for r in results:
        if r["target"] is None:
            continue
        bare_cpu = r["variants"]["bare"]["cpu"]
        print(f"parts  {r['label']:4} " + parts_line(r["variants"], bare_cpu))
        # the target's figures: the interleaved phase where the case has one, else the blocks
        il = r.get("interleaved")
        d_cpu, base = ((il["d_cpu"], il["bare_cpu"]) if il is not None else
                       ({k: v["d_cpu"] for k, v in r["variants"].items()}, bare_cpu))
        for k in ("request", "wrap"):
            m, lo, hi = (d / base for d in d_cpu[k])
            print(f"target {r['label']:4} {k:7} {m:+.2%} of the bare handler's CPU [{lo:+.2%}, {hi:+.2%}]"
                  f" (<= {r['target']:.1%}): {verdict(m, lo, hi, r['target'])}")
        m = d_cpu["bare again"][0] / base
        print(f"check  {r['label']:4} A/A     {m:+.2%} (the method's own bias and noise: should be ~0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
