"""The Recorder's cost beyond the norms on ONE model: issue 32 item 1's precise method.

``bench/recorder_overhead.py`` gives each variant models of its own, as the issue's table
does; two identical models differ by up to ~80 us a step (their tensors' addresses), so
its figure carries that draw. Here every variant trains the same model (24 x Linear(128)
+ReLU, batch 32, CPU, one thread): each variant has its own SGD optimizer over the same
parameters, the variants are swapped between interleaved rounds in rotating order, the
Recorder's forward hook (or its model class) is on the model only during its own rounds,
and each round's median of the training thread's CPU per step (``time.thread_time``) is
paired with the same round's ``norms`` (bare + the fused norm of every gradient). Variants:

- bare, norms:   as in recorder_overhead.py
- debugkit:      this checkout's Recorder, ``rec.step`` + ``rec.log(loss=...)``, without
  layer statistics (``layer_stats_every=None``; the default samples every 500th step)
- ``--against REV``: also the Recorder of git revision REV (its ``recorder.py``,
  ``spec_sampler.py`` and ``writer.py`` loaded beside this one, on this checkout's other
  modules), so a change to the step path is measured against its predecessor in one
  process
- ``--layer-stats N``: also the Recorder with ``layer_stats_every=N`` (issue 33)

    python bench/recorder_paired.py [--rounds 60 --steps 50] [--against c5c8a3d] [--layer-stats 500]
    python bench/recorder_paired.py --quick   # a smoke run (tests/test_benches.py)
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


#: Modules of the step path loaded at ``--against REV`` beside its ``recorder.py``: each one's
#: names that the recorder imported are rebound to REV's (the rest of debugkit is this
#: checkout's). ``spec_sampler``: how often spec learning observes a batch; ``writer``:
#: the per-step block the rows go into.
AT_REV = ("spec_sampler", "writer")


def _module_at(rev: str, name: str):
    """``debugkit/recorder/<name>.py`` at git revision ``rev``, loaded as a module of its own."""
    src = subprocess.run(["git", "show", f"{rev}:debugkit/recorder/{name}.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp(prefix="dk-paired-")) / f"{name}_at.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"debugkit.recorder._{name}_at", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _recorder_at(rev: str):
    """The Recorder class of ``debugkit/recorder/recorder.py`` at git revision ``rev``, with
    REV's step-path modules (:data:`AT_REV`) in place of this checkout's."""
    mod = _module_at(rev, "recorder")
    for name in AT_REV:
        old = _module_at(rev, name)
        if name == "writer":  # the row types other modules (layer statistics) hand it: ours
            from debugkit.recorder import writer

            for shared in ("PendingTensor", "RowLayout", "ColumnRows"):
                setattr(old, shared, getattr(writer, shared))
        for attr, value in list(vars(mod).items()):
            if getattr(value, "__module__", None) == f"debugkit.recorder.{name}":
                setattr(mod, attr, getattr(old, attr, value))
            elif name == "writer" and attr == "BLOCK_STEPS":
                setattr(mod, attr, old.BLOCK_STEPS)
    return mod.Recorder


def main(argv=None):
    from recorder_overhead import build

    from debugkit import Recorder

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=300, help="steps per variant before timing "
                    "(past the dense part of spec learning)")
    ap.add_argument("--against", metavar="REV", default=None)
    ap.add_argument("--layer-stats", type=int, default=None, metavar="N")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 10 steps, 20 warm-up steps")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.steps, a.warmup = 3, 10, 20
    torch.set_num_threads(1)
    m = build(128)
    base = type(m)
    x, y = torch.randn(32, 128), torch.randint(0, 10, (32,))
    params = list(m.parameters())
    tmp = Path(tempfile.mkdtemp(prefix="dk-paired-"))
    fns, hooks, recs = {}, {}, []

    def plain(norms):
        o = torch.optim.SGD(params, lr=1e-3)

        def f():
            loss = F.cross_entropy(m(x), y)
            o.zero_grad()
            loss.backward()
            if norms:
                vals = torch.stack(torch._foreach_norm([p.grad for p in params])).tolist()
                vals.append(math.hypot(*vals))
            o.step()
        return f

    def recorded(name, cls, **kw):
        o = torch.optim.SGD(params, lr=1e-3)
        rec = cls(tmp / name, m, optimizer=o, **kw)
        recs.append(rec)
        # its forward hook (an older Recorder) or its model class (.keep_output): on the
        # model in its rounds only
        hooks[name] = (dict(m._forward_hooks), type(m))
        m._forward_hooks.clear()
        m.__class__ = base

        def f():
            with rec.step((x, y)):
                loss = F.cross_entropy(m(x), y)
                o.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                o.step()
        fns[name] = f

    fns["bare"], fns["norms"] = plain(False), plain(True)
    recorded("debugkit", Recorder, layer_stats_every=None)  # issue 32's figure: no layer stats
    if a.against:
        recorded(f"debugkit@{a.against}", _recorder_at(a.against))
    if a.layer_stats:
        recorded(f"debugkit+layers/{a.layer_stats}", Recorder, layer_stats_every=a.layer_stats)
    names = list(fns)

    def use(k):
        hk, cls = hooks.get(k, ({}, base))
        m._forward_hooks.clear()
        m._forward_hooks.update(hk)
        m.__class__ = cls

    for k in names:
        use(k)
        for _ in range(a.warmup):
            fns[k]()
    per: dict[str, list[float]] = {k: [] for k in names}
    load0 = os.getloadavg()[0]
    for r in range(a.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            use(k)
            f, ts = fns[k], []
            for _ in range(a.steps):
                c0 = time.thread_time()
                f()
                ts.append(time.thread_time() - c0)
            per[k].append(statistics.median(ts))
    m._forward_hooks.clear()
    m.__class__ = base
    for rec in recs:
        rec.close()
    bare = statistics.median(per["bare"])
    print(f"one model, {len(names)} variants, {a.rounds} rounds x {a.steps} steps, rotating order, "
          f"training-thread CPU; load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'variant':<24} {'median step':>12} {'beyond the norms, paired by round':>36}")
    for k in names:
        d = statistics.median(v - n for v, n in zip(per[k], per["norms"]))
        tail = "" if k in ("bare", "norms") else \
            f"{d * 1e6:>+9.1f} us = {d / bare * 100:+.2f}% of bare (target <= 3%)"
        print(f"{k:<24} {statistics.median(per[k]) * 1e3:>10.3f}ms {tail}")
    if a.layer_stats:  # issue 33: what layer statistics add to a step they do not sample
        k = f"debugkit+layers/{a.layer_stats}"
        d = statistics.median(v - n for v, n in zip(per[k], per["debugkit"]))
        print(f"layer statistics at every={a.layer_stats} beyond the Recorder, paired by round "
              f"(round medians: its unsampled steps): {d * 1e6:+.1f} us = {d / bare * 100:+.2f}% of "
              f"bare (the sampled steps' share: bench/layer_stats.py)")


if __name__ == "__main__":
    main()
