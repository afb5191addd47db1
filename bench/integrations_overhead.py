"""Each integration's per-step overhead against the framework's own step, side by side.

    python bench/integrations_overhead.py --rounds 3

For each framework the same training runs with and without debugkit, the variants
interleaved round by round in this one process; a step is timed from the framework's
own step-start hook to its step-end hook (Lightning: a callback that starts before and
ends after every other callback; HF Trainer: ``on_step_begin`` to ``on_step_end``;
plain loops: around the loop body), so start-up costs are left out. Prints the median
step time of each variant and the ratio.

- plain loop: the bare digits MLP step vs ``debugkit.watch`` vs ``with rec.step(batch)``
- Accelerate: ``accelerator.prepare``/``backward``/``accumulate`` (bf16) vs the same with
  ``rec.step``
- Lightning: ``Trainer.fit`` of the two-layer module vs the same with ``DebugkitCallback``
- HF Trainer: the tiny BERT vs the same with ``DebugkitCallback``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _pipcheck_running() -> bool:
    """Whether the Recorder's one-off start-up ``pip check`` (a subprocess, run from a
    thread named ``debugkit-pipcheck``) is still running: on a 2-core machine it competes
    with the training for the CPU for a few seconds, which is a start-up cost, not a
    per-step one. Steps timed while it runs are left out (and reported)."""
    import threading

    return any(t.name == "debugkit-pipcheck" and t.is_alive() for t in threading.enumerate())


def _wait_pipcheck() -> None:
    """Plain loops: let the start-up pip check finish before timing (see above)."""
    while _pipcheck_running():
        time.sleep(0.05)


DROPPED: dict = {}


def _keep(times: list, t: float) -> None:
    if _pipcheck_running():
        DROPPED[_keep.current] = DROPPED.get(_keep.current, 0) + 1
    else:
        times.append(t)


_keep.current = None


def _digits(n=640):
    import torch
    from sklearn.datasets import load_digits

    d = load_digits()
    return (torch.tensor(d.data[:n], dtype=torch.float32) / 16.0,
            torch.tensor(d.target[:n], dtype=torch.long))


def plain(variant: str, tmp: str, steps: int) -> list[float]:
    import torch
    import torch.nn.functional as F

    import debugkit
    from examples.watch_loop import build_model

    torch.manual_seed(0)
    x, y = _digits()
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rec = w = None
    if variant == "watch":
        w = debugkit.watch(model, opt, run_dir=os.path.join(tmp, "w"), capture_uncaught=False)
    elif variant == "rec.step":
        rec = debugkit.Recorder(os.path.join(tmp, "r"), model, opt)
    _wait_pipcheck()
    times = []
    for i in range(steps):
        xb, yb = x[(i * 32) % 640:][:32], y[(i * 32) % 640:][:32]
        t0 = time.perf_counter()
        if rec is not None:
            with rec.step((xb, yb)):
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()
        else:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        _keep(times, time.perf_counter() - t0)
    (w or rec).close() if (w or rec) is not None else None
    return times


def accelerate(variant: str, tmp: str, steps: int) -> list[float]:
    import torch
    import torch.nn.functional as F
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset

    from debugkit import Recorder
    from examples.watch_loop import build_model

    torch.manual_seed(0)
    acc = Accelerator(cpu=True, mixed_precision="bf16", gradient_accumulation_steps=2)
    x, y = _digits()
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(torch.cat([x] * 2), torch.cat([y] * 2)), batch_size=16)
    model, opt, loader = acc.prepare(model, opt, loader)
    rec = Recorder(os.path.join(tmp, "a"), model, opt) if variant == "debugkit" else None
    _wait_pipcheck()
    times = []
    for i, batch in enumerate(loader):
        if i >= steps:
            break
        t0 = time.perf_counter()
        if rec is not None:
            with rec.step(batch), acc.accumulate(model):
                loss = F.cross_entropy(model(batch[0]), batch[1])
                rec.log(loss=loss)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
        else:
            with acc.accumulate(model):
                loss = F.cross_entropy(model(batch[0]), batch[1])
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
        _keep(times, time.perf_counter() - t0)
    if rec is not None:
        rec.close()
    return times


def lightning(variant: str, tmp: str, steps: int) -> list[float]:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    from debugkit.integrations.lightning import DebugkitCallback
    from examples.lightning_train import Classifier

    times: list[float] = []
    t0 = [0.0]

    class Start(pl.Callback):
        def on_train_batch_start(self, *a):
            _wait_pipcheck()
            t0[0] = time.perf_counter()

    class End(pl.Callback):
        def on_train_batch_end(self, *a):
            _keep(times, time.perf_counter() - t0[0])

    pl.seed_everything(0, verbose=False)
    x, y = _digits()
    cbs = [Start()] + ([DebugkitCallback(os.path.join(tmp, "l"))] if variant == "debugkit" else []) + [End()]
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=cbs)
    trainer.fit(Classifier(), DataLoader(TensorDataset(x, y), batch_size=32))
    return times


def transformers(variant: str, tmp: str, steps: int) -> list[float]:
    from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed

    from debugkit.integrations.transformers import DebugkitCallback
    from examples.hf_bert_digits import DigitTokens, build_model

    times: list[float] = []
    t0 = [0.0]

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            _wait_pipcheck()
            t0[0] = time.perf_counter()

        def on_step_end(self, *a, **k):
            _keep(times, time.perf_counter() - t0[0])

    set_seed(0)
    args = TrainingArguments(output_dir=os.path.join(tmp, "hf-out"), use_cpu=True, report_to=[],
                             per_device_train_batch_size=32, max_steps=steps, logging_steps=1,
                             save_strategy="no", disable_tqdm=True, learning_rate=1e-3)
    cbs = [Timer()] + ([DebugkitCallback(os.path.join(tmp, "h"))] if variant == "debugkit" else [])
    Trainer(model=build_model(), args=args, train_dataset=DigitTokens(), callbacks=cbs).train()
    return times


BENCHES = {
    "plain loop": (plain, ["bare", "watch", "rec.step"]),
    "Accelerate": (accelerate, ["bare", "debugkit"]),
    "Lightning": (lightning, ["bare", "debugkit"]),
    "HF Trainer": (transformers, ["bare", "debugkit"]),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--only", choices=list(BENCHES), action="append")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (1: less noise on a shared machine)")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    for name in a.only or BENCHES:
        fn, variants = BENCHES[name]
        per = {v: [] for v in variants}
        for _ in range(a.rounds):
            for v in variants:  # interleaved: each round runs every variant once
                _keep.current = (name, v)
                with tempfile.TemporaryDirectory(prefix="dk-bench-") as tmp:
                    per[v].extend(fn(v, tmp, a.steps)[1:])  # the first step warms up
        if not all(per.values()):
            print(f"{name}: no steps left to time; raise --steps", flush=True)
            continue
        base = statistics.median(per[variants[0]])
        cells = [f"{variants[0]} {base * 1e3:.2f} ms (n={len(per[variants[0]])})"]
        for v in variants[1:]:
            m = statistics.median(per[v])
            cells.append(f"{v} {m * 1e3:.2f} ms (n={len(per[v])}; {m / base:.3f}x, "
                         f"{100 * (m / base - 1):+.1f} %)")
        dropped = ", ".join(f"{v} {DROPPED[(name, v)]}" for v in variants if (name, v) in DROPPED)
        print(f"{name:11s} median step over {a.rounds} interleaved rounds: "
              + "; ".join(cells)
              + (f" [steps left out during the start-up pip check: {dropped}]" if dropped else ""),
              flush=True)


if __name__ == "__main__":
    main()
