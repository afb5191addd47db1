"""First ``open_run(p).grad_norms()`` in a fresh process, imports included.

Writes a run of 20,000 steps x 51 layers (1.02M gradient-norm rows) with the Recorder's
background RankWriter, then starts fresh Python processes, interleaved, that each do:

- ``python``:  nothing (``-c pass``): interpreter start-up and site
- ``pandas``:  ``import pandas`` (which imports numpy and pyarrow, and pyarrow.compute)
- ``debugkit``: ``from debugkit import open_run; open_run(p).grad_norms()``

and prints each one's median wall-clock time and CPU time (user + sys, which a busy
machine inflates less), so what debugkit adds beyond Python and pandas is visible.

    python bench/open_speed.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

VARIANTS = {
    "python": "pass",
    "pandas": "import pandas",
    "debugkit": "from debugkit import open_run; n = len(open_run({path!r}).grad_norms()); "
                "assert n == {rows}, n",
}


def child_run(code: str, cwd: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=cwd, timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv=None):
    from read_speed import write_debugkit

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--layers", type=int, default=51)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="dk-open-"))
    values = np.random.default_rng(0).lognormal(size=(a.steps, a.layers)).astype(np.float32)
    write_debugkit(tmp / "run", a.steps, a.layers, values)
    rows = a.steps * a.layers
    codes = {k: v.format(path="run", rows=rows) for k, v in VARIANTS.items()}
    for code in codes.values():  # warm-up: the page cache and .pyc files
        child_run(code, tmp)
    res = {k: ([], []) for k in codes}
    for r in range(a.repeats):
        for k in (codes if r % 2 == 0 else reversed(list(codes))):
            w, c = child_run(codes[k], tmp)
            res[k][0].append(w)
            res[k][1].append(c)
    print(f"{rows:,} rows; fresh process per call, {a.repeats} interleaved repeats; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'variant':<10} {'median wall':>12} {'median CPU':>11}")
    med = {k: (statistics.median(w), statistics.median(c)) for k, (w, c) in res.items()}
    for k, (w, c) in med.items():
        print(f"{k:<10} {w:>10.3f} s {c:>9.3f} s")
    dw = med["debugkit"][0] - med["pandas"][0]
    dc = med["debugkit"][1] - med["pandas"][1]
    print(f"debugkit beyond `import pandas`: {dw:.3f} s wall, {dc:.3f} s CPU; "
          f"`import pandas` is {med['pandas'][0] / med['debugkit'][0] * 100:.0f}% of the "
          f"total (target: total < 0.3 s)")


if __name__ == "__main__":
    main()
