"""A live run and its readers: used by tests/io/test_live_readers.py and bench/live_readers.py.

``python tests/io/live_run.py RUN_DIR STEPS FLUSH_S`` trains the benchmark MLP of
bench/recorder_overhead.py (24 x Linear(128,128)+ReLU, batch 32, one thread) under a
Recorder for STEPS steps and prints one JSON line: the per-step wall times in seconds.
:func:`read_and_check` is what a dashboard session does on each refresh, plus the checks
that no torn or reordered record is ever seen.
"""

from __future__ import annotations

import json
import sys
import time

N_LAYERS = 24


def train(run_dir: str, steps: int, flush_s: float) -> list[float]:
    import torch
    import torch.nn as nn

    from debugkit import Recorder
    from tests._training import train_step

    torch.set_num_threads(1)
    torch.manual_seed(0)
    layers = []
    for _ in range(N_LAYERS):
        layers += [nn.Linear(128, 128), nn.ReLU()]
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []
    with Recorder(run_dir, model, optimizer=opt, name="live", flush_every_s=flush_s) as rec:
        for _ in range(steps):
            x, y = torch.randn(32, 128), torch.randint(0, 128, (32,))
            t0 = time.perf_counter()
            train_step(rec, model, opt, (x, y))
            times.append(time.perf_counter() - t0)
    return times


def read_and_check(run_dir, prev: dict | None = None) -> dict:
    """Open the run, read every table, and check what a reader must never see: a step
    with only some of its layers, steps out of order or skipped, counts that shrink,
    non-finite values the writer never wrote. Returns the row counts; raises
    AssertionError on a violation."""
    import numpy as np

    from debugkit import open_run

    run = open_run(run_dir)
    g, s, sc = run.grad_norms(), run.steps(), run.scalars()
    counts = {"grads": len(g), "steps": len(s), "scalars": len(sc)}
    if len(g):
        per_step = g.groupby("step").size()
        assert (per_step == 2 * N_LAYERS + 1).all(), f"torn gradient step: {per_step[per_step != 2 * N_LAYERS + 1]}"
        assert np.isfinite(g["grad_norm"]).all()
    if len(s):
        st = s["step"].to_numpy()
        assert (st == np.arange(len(st))).all(), "steps out of order or skipped"
        assert (s["step_time_s"] > 0).all()
    if len(sc):
        loss = sc[sc["key"] == "loss"]["step"].to_numpy()
        assert (loss == np.arange(len(loss))).all(), "loss rows out of order or skipped"
    if prev:
        for k, v in counts.items():
            assert v >= prev[k], f"{k}: {v} rows after {prev[k]}: rows disappeared"
    return counts


if __name__ == "__main__":
    times = train(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
    print(json.dumps(times))
