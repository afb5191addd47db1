"""Benchmark: reading TensorBoard event files, debugkit's reader vs TensorBoard's own.

    python bench/tensorboard_import.py                  # 200,000 scalar events
    python bench/tensorboard_import.py --events 1000000 --repeats 5

Writes an event file with ``torch.utils.tensorboard.SummaryWriter`` (``grad_norm/<layer>``
for 20 layers plus ``train/loss`` per step), then times, side by side in this process:

* debugkit: :func:`debugkit.io.tensorboard.read_scalars` (CRC-checked records, protobuf
  parsing) and the whole :func:`convert_tensorboard` to a run directory;
* TensorBoard: ``EventAccumulator(size_guidance={"scalars": 0}).Reload()`` then
  ``Scalars(tag)`` for every tag (what TensorBoard's backend does to load a run).

Prints medians and the ratio. Both read every value (checked equal once).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

N_LAYERS = 20


def write_events(logdir: Path, events: int) -> None:
    import numpy as np
    from torch.utils.tensorboard import SummaryWriter

    rng = np.random.default_rng(0)
    steps = events // (N_LAYERS + 1)
    w = SummaryWriter(str(logdir), max_queue=10_000, flush_secs=3600)
    vals = np.exp(rng.standard_normal((steps, N_LAYERS + 1)))
    for s in range(steps):
        for i in range(N_LAYERS):
            w.add_scalar(f"grad_norm/layers.{i}.weight", float(vals[s, i]), s)
        w.add_scalar("train/loss", float(vals[s, -1]), s)
    w.close()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from debugkit.io.tensorboard import convert_tensorboard, find_tensorboard_runs, read_scalars

    with tempfile.TemporaryDirectory(prefix="dk-tb-") as tmp:
        logdir = Path(tmp) / "tb"
        t = time.perf_counter()
        write_events(logdir, a.events)
        files = find_tensorboard_runs(logdir)[0][2]
        size = sum(f.stat().st_size for f in files)
        print(f"{a.events:,} scalar events ({size / 1e6:.1f} MB), written by SummaryWriter in "
              f"{time.perf_counter() - t:.1f} s; 2-CPU machine shared with other work; "
              f"{a.repeats} repeats, medians of CPU time (time.process_time)")
        ours, conv, theirs = [], [], []
        clock = time.process_time  # CPU time: the machine is shared, wall time waits for CPUs
        for k in range(a.repeats):
            t = clock()
            series = read_scalars(files)
            ours.append(clock() - t)
            out = Path(tmp) / f"run{k}"
            t = clock()
            convert_tensorboard(logdir, out)
            conv.append(clock() - t)
            shutil.rmtree(out)
            t = clock()
            ea = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
            ea.Reload()
            got = {tag: ea.Scalars(tag) for tag in ea.Tags()["scalars"]}
            theirs.append(clock() - t)
        n_theirs = sum(len(v) for v in got.values())
        assert n_theirs == len(series), (n_theirs, len(series))
        first = got["train/loss"]
        mine = [v for tg, v in zip(series.tags, series.values) if tg == "train/loss"]
        assert [e.value for e in first] == mine
        o, c, e = (statistics.median(x) for x in (ours, conv, theirs))
        print(f"debugkit read_scalars:            {o:.2f} s  ({len(series) / o / 1e6:.2f} M events/s)")
        print(f"debugkit convert_tensorboard:     {c:.2f} s  (read + write the run directory)")
        print(f"TensorBoard EventAccumulator:     {e:.2f} s  ({n_theirs / e / 1e6:.2f} M events/s)")
        print(f"ratio EventAccumulator / debugkit: read {e / o:.1f}x, full conversion {e / c:.1f}x")


if __name__ == "__main__":
    main()
