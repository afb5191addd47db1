"""What a gzip bomb in a run costs the server: unbounded inflation against debugkit's
bounded reader (issue 28, item 5), side by side, each in a fresh process.

Writes two gzipped chrome traces of ``--mib`` MiB each (spaces inside valid JSON, as
concatenated gzip members: about 1 KB per MiB) and reads them the way the Distributed page
does, three ways: ``gzip.decompress`` + ``json.loads`` (what the reader did before),
``debugkit.io.rank_traces.read_rank_traces`` (bounded, first view) and the same again in
the same process (the refusal remembered). Prints peak RSS and CPU seconds of each.

    python bench/gzip_bomb.py --mib 512
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gzip, json, resource, sys, time
paths = sys.argv[2:]
mode = sys.argv[1]
t0 = time.process_time()
outcome = "read"
if mode == "unbounded":
    for p in paths:
        doc = json.loads(gzip.decompress(open(p, "rb").read()))
        del doc
else:
    from debugkit.errors import DebugkitError
    from debugkit.io.rank_traces import read_rank_traces
    for attempt in range(2 if mode == "bounded-twice" else 1):
        t0 = time.process_time()
        try:
            read_rank_traces(paths)
        except DebugkitError as exc:
            outcome = "refused: " + str(exc).split(": refused: ", 1)[-1][:48]
cpu = time.process_time() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"cpu_s": round(cpu, 3), "peak_rss_mib": round(rss), "outcome": outcome}))
"""


def bomb(path: Path, rank: int, mib: int) -> None:
    block = gzip.compress(b" " * (1 << 20), 9)
    with open(path, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": ['))
        for _ in range(mib):
            f.write(block)
        f.write(gzip.compress(b'], "distributedInfo": {"rank": %d, "world_size": 2}}' % rank))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="unpacked MiB per trace")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        paths = [Path(d) / f"rank{r}.json.gz" for r in (0, 1)]
        for r, p in enumerate(paths):
            bomb(p, r, a.mib)
        size = sum(p.stat().st_size for p in paths)
        print(f"two traces, {size / 1e6:.2f} MB on disk, {2 * a.mib} MiB unpacked")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        print(f"{'reader':<34}{'CPU s':>8}{'peak RSS MiB':>14}  outcome")
        for mode, label in (("unbounded", "gzip.decompress + json.loads"),
                            ("bounded", "read_rank_traces, first view"),
                            ("bounded-twice", "read_rank_traces, second view")):
            out = subprocess.run([sys.executable, "-c", CHILD, mode, *map(str, paths)], env=env,
                                 capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"{label:<34}{r['cpu_s']:>8.3f}{r['peak_rss_mib']:>14}  {r['outcome']}")


if __name__ == "__main__":
    main()
