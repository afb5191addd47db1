"""Home page's run list on a large store: first ever, and in a new process once indexed.

Builds a store of N runs by linking real sample runs (``sample_runs/``: digits-mlp,
digits-bad-label, digits-vanishing, memory-leak, wine-missing-feature, in turn) into N
folders (hard links: no copy of the data), then times, each in a fresh process:

- ``first``: :func:`debugkit.diagnose.run_summaries.summarize_runs` over the store with an empty
  index (every run analysed: what the Home page did at every cold start before the index)
- ``indexed``: the same in a new process once the index is filled (a cold server)
- ``home``: a new process rendering the Home page (Streamlit's AppTest of app.py,
  imports included) over the indexed store

With ``--memory`` the store is put on fsspec's ``memory://`` filesystem instead (then
``first`` and ``indexed`` run in one process, the only one that sees that filesystem).

    python bench/home.py [--runs 1000] [--memory]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ["digits-mlp", "digits-bad-label", "digits-vanishing", "memory-leak",
           "wine-missing-feature"]

LIST = """
import time, sys
t0 = time.perf_counter()
from debugkit.diagnose import run_summaries
from debugkit.io import served_runs
rows = run_summaries.summarize_runs(served_runs.find_runs([served_runs.as_path(sys.argv[1])]))
assert len(rows) == int(sys.argv[2]), len(rows)
print(time.perf_counter() - t0, sum(r["cached"] for r in rows))
"""

HOME = """
import time, sys
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.run()
assert not at.exception, at.exception
assert len(at.dataframe[0].value) == int(sys.argv[2])
print(time.perf_counter() - t0, 0)
"""


def build_store(root: Path, n: int) -> None:
    for i in range(n):
        src = ROOT / "sample_runs" / SAMPLES[i % len(SAMPLES)]
        shutil.copytree(src, root / f"run{i:05d}", copy_function=os.link)


def timed(code: str, args, env) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=3600)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    t, cached = out.stdout.split()[-2:]
    return float(t), int(cached)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--memory", action="store_true")
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="dk-home-"))
    env = {**os.environ, "DEBUGKIT_CACHE": str(tmp / "cache"), "DEBUGKIT_STORE": str(tmp / "store")}
    t0 = time.perf_counter()
    build_store(tmp / "runs", a.runs)
    print(f"{a.runs} runs linked in {time.perf_counter() - t0:.1f} s; "
          f"load average {os.getloadavg()[0]:.2f}")
    if a.memory:
        return memory_store(tmp / "runs", a.runs, env)
    first, c1 = timed(LIST, [tmp / "runs", a.runs], env)
    indexed, c2 = timed(LIST, [tmp / "runs", a.runs], env)
    home, _ = timed(HOME, [ROOT / "app.py", a.runs], {**env, "DEBUGKIT_ROOTS": str(tmp / "runs")})
    print(f"{'what':<44} {'seconds':>8}")
    print(f"{'first (empty index; every run analysed)':<44} {first:>8.2f}   ({c1} from the index)")
    print(f"{'indexed, new process (summarize_runs)':<44} {indexed:>8.2f}   ({c2} from the index)")
    print(f"{'Home page, new process (AppTest, imports)':<44} {home:>8.2f}")
    print(f"first / indexed = {first / indexed:.0f}x (target: Home < 5 s cold)")
    shutil.rmtree(tmp, ignore_errors=True)


def memory_store(local: Path, n: int, env) -> None:
    import fsspec

    os.environ.update(env)
    from debugkit.diagnose import run_summaries
    from debugkit.io import served_runs

    fs = fsspec.filesystem("memory")
    fs.put(str(local), "/dk-home-bench/runs", recursive=True)
    url = "memory://dk-home-bench/runs"
    out = []
    for _ in range(2):
        t0 = time.perf_counter()
        rows = run_summaries.summarize_runs(served_runs.find_runs([served_runs.as_path(url)]))
        out.append((time.perf_counter() - t0, sum(r["cached"] for r in rows)))
        assert len(rows) == n
    print(f"memory:// first (empty index) {out[0][0]:.2f} s; indexed {out[1][0]:.2f} s "
          f"({out[1][1]} from the index)")
    fs.rm("/dk-home-bench", recursive=True)


if __name__ == "__main__":
    main()
