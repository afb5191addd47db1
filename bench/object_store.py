"""Benchmark: a store of runs in a real S3 server behind a network delay, next to the same
store on local disk.

Starts SeaweedFS (``weed mini``, tests/s3server.py) on loopback, uploads N runs (real
sample runs in turn, ``run00000``...) into a bucket the way ``debugkit sync`` (and a
``Recorder`` writing to a URL) does, each ended run with its ``pack.zip`` (its small files
in one object, debugkit.runpack; ``--no-pack``: the files alone, as a plain copy of the
folders leaves them), and puts a latency-injecting TCP proxy
in front of its S3 port: every request waits ``--latency-ms`` (default 40 ms, a real
region is 20-80 ms) before it is forwarded. Then, each in a fresh process (imports
included), with the credentials and the proxy's address only in the environment
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_ENDPOINT_URL``):

- ``list cold``: the run list (every run found and summarised) with an empty index;
- ``list indexed``: the same in a new process once the index is filled;
- ``Home cold`` / ``Home indexed``: the Home page rendered (Streamlit's AppTest of app.py)
  with an empty index / with the index filled;
- ``Overview``: one run's Overview page (AppTest, a new process, the cache as Home left it);
- ``Overview, empty cache``: another run's Overview page with an empty cache;

and the same five on a local copy of the store. It prints seconds (median of
``--repeat``), the CPU seconds of the measured process (user + system of the child, all
its threads: what a loaded machine inflates least, and where the time goes when it is not
the network), the number of HTTP requests the proxy forwarded, and a line per issue 29
target (Home cold < 10 s, Home indexed < 3 s, Overview of one run < 5 s, on S3 at +40 ms).

    python bench/object_store.py [--runs 200] [--latency-ms 40] [--repeat 1] [--no-pack]
    python bench/object_store.py --quick     # a smoke run: 10 runs, one repeat
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLES = ["digits-mlp", "digits-bad-label", "digits-vanishing", "memory-leak",
           "wine-missing-feature"]

LIST = """
import time, sys
t0 = time.perf_counter()
from debugkit.diagnose import run_summaries
from debugkit.io import served_runs
rows = run_summaries.summarize_runs(served_runs.find_runs([served_runs.as_path(sys.argv[1])]))
assert len(rows) == int(sys.argv[2]), len(rows)
assert not any(r["error"] for r in rows), [r["error"] for r in rows if r["error"]][:3]
print(time.perf_counter() - t0)
"""

HOME = """
import time, sys, os
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.run()
assert not at.exception, [e.value for e in at.exception]
table = at.dataframe[0].value
assert len(table) == int(sys.argv[2]), len(table)
print(time.perf_counter() - t0)
"""

OVERVIEW = """
import time, sys
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=600)
at.query_params["run"] = sys.argv[3]
at.switch_page("pages/overview.py")
at.run()
assert not at.exception, [e.value for e in at.exception]
assert not at.error, [e.value for e in at.error]
print(time.perf_counter() - t0)
"""


#: Issue 29's targets (seconds, S3 at +40 ms per request, 200 runs).
TARGETS = {"Home cold (empty index)": 10.0, "Home indexed (new process)": 3.0,
           "Overview of one run (new process)": 5.0}


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(code: str, args, env, repeat: int, fresh_cache=None) -> tuple[float, float]:
    """Median wall seconds (measured inside the child, imports included) and median CPU
    seconds of the child process."""
    times, cpus = [], []
    for _ in range(repeat):
        if fresh_cache is not None:
            shutil.rmtree(fresh_cache, ignore_errors=True)
        cpu0 = _children_cpu()
        out = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=1800)
        cpus.append(_children_cpu() - cpu0)
        if out.returncode != 0:
            raise SystemExit(f"failed: {out.stderr[-3000:]}")
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times), statistics.median(cpus)


def measure(root: str, n: int, env: dict, cache: Path, repeat: int, proxy=None) -> dict:
    env = dict(env, DEBUGKIT_CACHE=str(cache), DEBUGKIT_ROOTS=root,
               DEBUGKIT_STORE=str(cache.parent / "empty-store"), PYTHONPATH=str(ROOT))
    app = ROOT / "app.py"
    out = {}

    def run(name, code, args, fresh):
        before = proxy.requests if proxy else 0
        out[name] = (*timed(code, args, env, repeat, cache if fresh else None),
                     (proxy.requests - before) // repeat if proxy else None)

    run("list cold (empty index)", LIST, [root, n], True)
    run("list indexed (new process)", LIST, [root, n], False)
    run("Home cold (empty index)", HOME, [app, n], True)
    run("Home indexed (new process)", HOME, [app, n], False)
    run("Overview of one run (new process)", OVERVIEW, [app, n, "run00001"], False)
    run("Overview, empty cache (new process)", OVERVIEW, [app, n, "run00002"], True)
    return out


def upload(server, local: Path, dest: str, n: int, pack: bool) -> None:
    """Put the runs under ``local`` at ``dest`` (``bucket/runs``): as ``debugkit sync`` does
    (with its pack) or, ``pack=False``, the files alone."""
    if not pack:
        server.filesystem().put(f"{local}/", f"{dest}/", recursive=True)
        return
    from concurrent.futures import ThreadPoolExecutor

    from debugkit.io.sync import sync_run

    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: sync_run(local / f"run{i:05d}", f"s3://{dest}/run{i:05d}", pack=True),
                        range(n)))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--latency-ms", type=float, default=40.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 10 runs, one repeat")
    ap.add_argument("--no-pack", action="store_true",
                    help="upload the runs' files alone (no pack.zip), as a plain copy does")
    args = ap.parse_args(argv)
    if args.quick:
        args.runs, args.repeat = 10, 1

    from tests.s3server import CountingProxy, start_s3_server

    load0 = f"{os.getloadavg()[0]:.1f}"
    tmp = Path(tempfile.mkdtemp(prefix="dk-bench-s3-"))
    server = start_s3_server(tmp / "s3")
    try:
        local = tmp / "local" / "runs"
        local.mkdir(parents=True)
        for i in range(args.runs):
            shutil.copytree(ROOT / "sample_runs" / SAMPLES[i % len(SAMPLES)], local / f"run{i:05d}")
        bucket = server.new_bucket("bench")
        upload(server, local, f"{bucket}/runs", args.runs, pack=not args.no_pack)
        port = int(server.endpoint.rsplit(":", 1)[1])
        proxy = CountingProxy(port, args.latency_ms / 1000)
        env = dict(os.environ, **server.env())
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
        s3 = measure(f"s3://{bucket}/runs", args.runs, env, tmp / "cache-s3" / "c", args.repeat, proxy)
        disk = measure(str(local), args.runs, dict(os.environ), tmp / "cache-disk" / "c", args.repeat)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{args.runs} runs ({'files alone' if args.no_pack else 'synced with their pack.zip'}); "
          f"S3 (SeaweedFS) behind +{args.latency_ms:g} ms per request, "
          f"vs the same runs on local disk; seconds, median of {args.repeat}; "
          f"load average before/after: {load0} / {os.getloadavg()[0]:.1f}")
    print(f"{'':<36} {'S3 +lat':>9} {'S3 cpu':>8} {'requests':>9} {'local':>8} {'local cpu':>9}")
    for k in s3:
        print(f"{k:<36} {s3[k][0]:>9.2f} {s3[k][1]:>8.2f} {s3[k][2]:>9} {disk[k][0]:>8.2f} {disk[k][1]:>9.2f}")
    scale = "" if args.runs == 200 and args.latency_ms == 40 else \
        f" (measured with {args.runs} runs at +{args.latency_ms:g} ms: not the target's setting)"
    for k, limit in TARGETS.items():
        got = s3[k][0]
        print(f"target {k}: {got:.2f} s on S3 (< {limit:g} s): {'met' if got < limit else 'NOT met'}{scale}")


if __name__ == "__main__":
    main()
