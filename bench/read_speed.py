"""Reading 1,000,000 gradient-norm rows: debugkit's reader against TensorBoard's.

20,000 steps x 50 layers are written once by debugkit's writer (the Recorder's
background RankWriter) and once by TensorBoard's SummaryWriter (one scalar per layer
per step, tag `grad_norm/<layer>`). Then both are read back completely, alternately,
several times: `open_run(...).grad_norms()` and TensorBoard's `EventAccumulator`
(size_guidance 0 = keep every scalar) followed by pulling every scalar series.

    python bench/read_speed.py [--steps 20000 --layers 50 --repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_debugkit(run_dir: Path, steps: int, layers: int, values: np.ndarray) -> float:
    from debugkit import format as fmt
    from debugkit._fsutil import atomic_write_json
    from debugkit.recorder.writer import RankWriter

    run_dir.mkdir(parents=True)
    names = [f"layer{i}.weight" for i in range(layers - 1)]  # + the total = `layers` rows
    atomic_write_json(run_dir / fmt.MANIFEST, {"schema_version": fmt.SCHEMA_VERSION, "name": "bench"})
    rank_dir = run_dir / fmt.RANKS_DIR / "0"
    t0 = time.perf_counter()
    w = RankWriter(rank_dir, n_layers=layers, flush_every_s=2.0)
    atomic_write_json(rank_dir / "meta-000.json", {"rank": 0, "layers": names, "segment": 0})
    for s in range(steps):
        w.add("grads", (s, values[s]))
    w.close()
    return time.perf_counter() - t0


def write_tensorboard(tb_dir: Path, steps: int, layers: int, values: np.ndarray) -> float:
    from torch.utils.tensorboard import SummaryWriter

    tags = [f"grad_norm/layer{i}.weight" for i in range(layers - 1)] + ["grad_norm/__total__"]
    t0 = time.perf_counter()
    tb = SummaryWriter(str(tb_dir), max_queue=10_000, flush_secs=30)
    for s in range(steps):
        row = values[s]
        for j, tag in enumerate(tags):
            tb.add_scalar(tag, float(row[j]), s)
    tb.close()
    return time.perf_counter() - t0


def read_debugkit(run_dir: Path) -> int:
    from debugkit import open_run

    return len(open_run(run_dir).grad_norms())


def read_tensorboard(tb_dir: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return sum(len(acc.Scalars(tag)) for tag in acc.Tags()["scalars"])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="dk-read-"))
    values = np.random.default_rng(0).lognormal(size=(a.steps, a.layers)).astype(np.float32)
    rows = a.steps * a.layers
    wd = write_debugkit(tmp / "run", a.steps, a.layers, values)
    wt = write_tensorboard(tmp / "tb", a.steps, a.layers, values)
    print(f"{rows:,} rows ({a.steps:,} steps x {a.layers} layers)")
    print(f"write: debugkit {wd:.2f} s, TensorBoard {wt:.2f} s")
    read_debugkit(tmp / "run")  # warm-up: imports and the page cache, for both readers
    read_tensorboard(tmp / "tb")
    td, tt = [], []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        n = read_debugkit(tmp / "run")
        td.append(time.perf_counter() - t0)
        assert n == rows, n
        t0 = time.perf_counter()
        n = read_tensorboard(tmp / "tb")
        tt.append(time.perf_counter() - t0)
        assert n == rows, n
    md, mt = statistics.median(td), statistics.median(tt)
    print(f"read (median of {a.repeats}): debugkit open_run().grad_norms() {md:.3f} s, "
          f"TensorBoard EventAccumulator {mt:.2f} s")
    print(f"ratio: debugkit is {mt / md:.0f}x faster (target >= 50x, and under 0.5 s)")


if __name__ == "__main__":
    main()
