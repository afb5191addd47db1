"""A torch.profiler trace of a few training steps of the digits MLP, stored in a run.

The same model, data and DataLoader (two workers) as ``examples.digits``; torch.profiler
records steps 2-4 (``schedule(wait=1, warmup=1, active=3)``) with input shapes, writes
them with ``tensorboard_trace_handler`` (gzip) into a temporary folder, and the trace is
added to the run with debugkit's importer (``debugkit import torch-trace``)::

    python -m examples.digits_trace --out sample_runs/digits-profiled
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader


def record(out: str, *, steps: int = 5, batch_size: int = 32, num_workers: int = 2, seed: int = 0,
           name: str = "torch-trace") -> dict:
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from debugkit.io.importers.torch_trace import import_traces

    from .digits import DigitsDataset, build_model, load_splits

    torch.manual_seed(seed)
    (xa, ya), _ = load_splits(seed)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(DigitsDataset(xa, ya), batch_size=batch_size, shuffle=True,
                        num_workers=num_workers, generator=torch.Generator().manual_seed(seed))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with tempfile.TemporaryDirectory(prefix="digits-trace-") as tmp:
        with profile(activities=activities, record_shapes=True,
                     schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                     on_trace_ready=tensorboard_trace_handler(tmp, use_gzip=True)) as prof:
            for i, (x, y) in enumerate(loader):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                prof.step()
                if i + 1 >= steps:
                    break
        entries = import_traces(tmp, out, name=name,
                                label=f"torch.profiler, steps 2-4 of the digits MLP (batch {batch_size})")
    return entries[0]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="run directory to add the trace to")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--num-workers", type=int, default=2)
    a = p.parse_args(argv)
    e = record(a.out, steps=a.steps, num_workers=a.num_workers)
    print(f"stored {e['id']} ({e['summary']['events']} events) in {a.out}")


if __name__ == "__main__":
    main()
