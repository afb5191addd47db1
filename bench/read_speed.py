"""Reading 1,000,000 gradient-norm rows: debugkit's reader against its peers' readers.

20,000 steps x 50 layers are written once by debugkit's writer (the Recorder's
background RankWriter) and once by TensorBoard's SummaryWriter (one scalar per layer
per step, tag `grad_norm/<layer>`), and, when installed (``bench/peers.py``), by W&B
offline (``run.log`` of a dict per step), MLflow (``log_batch`` per step into a file
store and a sqlite store) and Aim (``Run.track`` of a dict per step). Then each is read
back completely:

- in this process, alternately, several times, warm (imports and the page cache paid):
  `open_run(...).grad_norms()` and TensorBoard's `EventAccumulator` (size_guidance 0 =
  keep every scalar) followed by pulling every scalar series;
- in a **new process** per read, in rotating order (what a user opening a run waits
  for: the interpreter, the imports and the read): every reader, peers included. W&B
  has no local reader of an offline run's history any more (wandb 0.31 moved it to its
  Go service), so its reader scans the ``.wandb`` file's records (a LevelDB-log framing
  of ``wandb_internal_pb2.Record`` protobufs) with W&B's own protobuf classes; MLflow's
  is ``MlflowClient.get_metric_history`` per key; Aim's iterates each metric's values.

    python bench/read_speed.py [--steps 20000 --layers 50 --repeats 3 --peers all|none|a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/peers.py


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


def _tags(layers: int) -> list[str]:
    return [f"grad_norm/layer{i}.weight" for i in range(layers - 1)] + ["grad_norm/__total__"]


def write_peer(name: str, d: Path, steps: int, layers: int, values: np.ndarray) -> float:
    """Write the same rows with a peer's logger (bench/peers.py), as training would."""
    from peers import make_logger

    class _Loss:  # the loggers call loss.item()
        def item(self):
            return 0.0

    tags = _tags(layers)
    t0 = time.perf_counter()
    lg = make_logger(name, d, None)
    for s in range(steps):
        lg.log(s, tags, values[s].tolist(), _Loss())
    lg.close()
    return time.perf_counter() - t0


# ----------------------------------------------------------------- readers (new process)
def _read_wandb(d: Path) -> int:
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    path = next(d.rglob("*.wandb"))
    data = path.read_bytes()
    pos, block, n = 7, 32768, 0  # the file header: ":W&B", magic, version
    rec = pb.Record()
    parts: list[bytes] = []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += left
            continue
        parts.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: one record
            rec.ParseFromString(b"".join(parts))
            parts = []
            if rec.WhichOneof("record_type") == "history":
                for item in rec.history.item:
                    if item.key.startswith("grad_norm/") or item.nested_key[:1] and \
                            item.nested_key[0].startswith("grad_norm/"):
                        json.loads(item.value_json)
                        n += 1
    return n


def _read_mlflow(d: Path, store: str) -> int:
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = f"sqlite:///{d / 'mlflow.db'}" if store == "sqlite" else (d / "mlruns").as_uri()
    c = MlflowClient(tracking_uri=uri)
    exp = c.get_experiment_by_name("dk-bench")
    run = c.search_runs([exp.experiment_id])[0]
    return sum(len(c.get_metric_history(run.info.run_id, k))
               for k in run.data.metrics if k.startswith("grad_norm/"))


def _read_aim(d: Path) -> int:
    from aim import Repo

    n = 0
    for run in Repo(str(d)).iter_runs():
        for m in run.metrics():
            if m.name.startswith("grad_norm/"):
                n += len(m.values.values_list())
    return n


def read_in_child(name: str, path: str) -> int:
    if name == "debugkit":
        return read_debugkit(Path(path))
    if name == "tensorboard":
        return read_tensorboard(Path(path))
    if name == "wandb_log":
        return _read_wandb(Path(path))
    if name in ("mlflow_file", "mlflow_sqlite"):
        return _read_mlflow(Path(path), name.split("_")[1])
    if name == "aim":
        return _read_aim(Path(path))
    raise ValueError(name)


def read_fresh(name: str, path: Path) -> tuple[float, float, int]:
    """(process wall time, the read's own time, rows) of one read in a new process."""
    paths = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
    code = (f"import sys, time, json; t = time.perf_counter(); sys.path[:0] = {paths!r}; "
            f"import read_speed as r; n = r.read_in_child({name!r}, {str(path)!r}); "
            "print(json.dumps([time.perf_counter() - t, n]))")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600,
                       env={**os.environ, "WANDB_SILENT": "true"})
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{name}: {p.stderr.strip()[-800:]}")
    inner, n = json.loads(p.stdout.strip().splitlines()[-1])
    return wall, inner, n


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--layers", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers", default="all", help="'all' (those installed), 'none' or a,b,...")
    a = ap.parse_args(argv)
    from peers import available, missing_note

    readable = ["wandb_log", "mlflow_file", "mlflow_sqlite", "aim"]
    wanted = readable if a.peers == "all" else [] if a.peers == "none" else a.peers.split(",")
    for note in missing_note(wanted):
        print(note)
    peers = [p for p in wanted if available(p)]
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
    paths = {"debugkit": tmp / "run", "tensorboard": tmp / "tb"}
    for name in peers:
        d = tmp / name
        w = write_peer(name, d, a.steps, a.layers, values)
        print(f"write: {name} {w:.2f} s")
        paths[name] = d
    fresh: dict[str, list[tuple[float, float]]] = {k: [] for k in paths}
    names = list(paths)
    for r in range(a.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotating order
            if name not in fresh:
                continue
            try:
                wall, inner, n = read_fresh(name, paths[name])
            except RuntimeError as exc:
                n, err = -1, str(exc)
            else:
                err = ""
            if n != rows:  # a reader that does not give back every row is not timed
                print(f"{name}: left out: its reader gave {n:,} of {rows:,} rows back {err}")
                if name == "debugkit":
                    raise SystemExit(1)
                del fresh[name]
                continue
            fresh[name].append((wall, inner))
    print(f"read in a new process (median of {a.repeats}, rotating order; load average "
          f"{os.getloadavg()[0]:.2f}):")
    print(f"{'reader':<14} {'process':>9} {'the read':>9} {'/ debugkit':>11}")
    dk = statistics.median(w for w, _ in fresh["debugkit"])
    for name, v in fresh.items():
        wall = statistics.median(w for w, _ in v)
        inner = statistics.median(i for _, i in v)
        print(f"{name:<14} {wall:>8.2f}s {inner:>8.2f}s {wall / dk:>10.1f}x")
    print("process: from starting the interpreter to the rows in memory; the read: after "
          "the interpreter started (imports included)")


if __name__ == "__main__":
    main()
