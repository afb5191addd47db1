"""Does reading a live run slow the training process that writes it?

The writer is a real training process (tests/io/live_run.py: the 24-layer MLP of
bench/recorder_overhead.py under a Recorder flushing every 0.1 s). It is run alternately
with no reader and with N reader processes, each doing what a dashboard session does on
each refresh (open_run and read every table, checking that no torn record is seen) every
--interval seconds. Prints the writer's median step time in each setting and the
slowdown, the readers' refresh count and their median refresh time.

    python bench/live_readers.py [--readers 10] [--interval 1.0] [--steps 600] [--rounds 3]

On a machine with fewer cores than readers + writer, --interval 0 (readers reading in a
tight loop) measures CPU contention, not the format: it is printed only as a bound.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LIVE = ROOT / "tests" / "io" / "live_run.py"


def _reader(run_dir: str, interval: float, stop, out) -> None:
    from tests.io.live_run import read_and_check

    prev, times, errors = None, [], 0
    while not stop.is_set():
        if not Path(run_dir, "manifest.json").exists():
            time.sleep(0.01)
            continue
        t0 = time.perf_counter()
        try:
            prev = read_and_check(run_dir, prev)
        except AssertionError:
            errors += 1
        except Exception:
            errors += 1
        times.append(time.perf_counter() - t0)
        stop.wait(interval)
    out.put((times, errors))


def one(steps: int, readers: int, interval: float) -> tuple[float, list[float], int]:
    tmp = Path(tempfile.mkdtemp(prefix="dk-live-"))
    run = tmp / "run"
    stop, out = mp.Event(), mp.Queue()
    procs = [mp.Process(target=_reader, args=(str(run), interval, stop, out)) for _ in range(readers)]
    for p in procs:
        p.start()
    res = subprocess.run([sys.executable, str(LIVE), str(run), str(steps), "0.1"],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    stop.set()
    times, errors = [], 0
    for _ in procs:
        t, e = out.get(timeout=120)
        times += t
        errors += e
    for p in procs:
        p.join(30)
    step_times = json.loads(res.stdout)[20:]  # skip warm-up
    return statistics.median(step_times), times, errors


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--readers", type=int, default=10)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    alone, read, refresh, errors = [], [], [], 0
    for _ in range(a.rounds):
        alone.append(one(a.steps, 0, a.interval)[0])
        m, t, e = one(a.steps, a.readers, a.interval)
        read.append(m)
        refresh += t
        errors += e
    ma, mr = statistics.median(alone), statistics.median(read)
    print(f"writer median step: alone {ma * 1e3:.2f} ms, with {a.readers} readers every "
          f"{a.interval:g} s {mr * 1e3:.2f} ms: slowdown {100 * (mr / ma - 1):+.1f} %")
    if refresh:
        print(f"readers: {len(refresh)} refreshes, median {statistics.median(refresh) * 1e3:.1f} ms, "
              f"torn or failed reads: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
