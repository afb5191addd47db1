"""A bounded random-mutation fuzz run over every reader debugkit applies to strangers' files.

For each target of tests/fuzz/targets.py (run-format files, TensorBoard event files,
py-spy speedscope/collapsed/dump files, chrome traces, memory snapshots, upload zips,
the ?run= query param) it mutates the real seed input N times (truncation, bit flips,
inserted/deleted/duplicated spans, noise) and feeds each to the reader with a time
limit. Prints, per target, how many inputs opened, were refused with a DebugkitError,
or broke the contract (any other exception or a hang), and the peak RSS of the run.
Breaking inputs are saved under tests/fuzz/corpus/<target>/ with --save, so the normal
test run replays them.

    python bench/fuzz.py [--n 200] [--seed 0] [--targets manifest upload_zip ...] [--save]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fuzz.targets import CORPUS, TARGETS, Hang, mutate, run_target, seed  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="mutations per target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", nargs="*", default=sorted(TARGETS))
    ap.add_argument("--save", action="store_true", help="save breaking inputs to the corpus")
    a = ap.parse_args(argv)
    bad_total = 0
    print(f"{'target':<18} {'opened':>7} {'refused':>8} {'broke':>6} {'s/input':>8}")
    for name in a.targets:
        rng = random.Random(a.seed)
        base = seed(name)
        counts = {"opened": 0, "refused": 0, "broke": 0}
        t0 = time.perf_counter()
        for _ in range(a.n):
            data = mutate(base, rng)
            try:
                counts[run_target(name, data)] += 1
            except (Exception, Hang) as exc:  # the contract is broken: record it
                counts["broke"] += 1
                print(f"  {name}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
                if a.save:
                    d = CORPUS / name
                    d.mkdir(parents=True, exist_ok=True)
                    (d / hashlib.sha256(data).hexdigest()[:16]).write_bytes(data)
        per = (time.perf_counter() - t0) / max(a.n, 1)
        bad_total += counts["broke"]
        print(f"{name:<18} {counts['opened']:>7} {counts['refused']:>8} {counts['broke']:>6} {per:>8.3f}",
              flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{len(a.targets)} targets x {a.n} inputs; contract broken by {bad_total}; peak RSS {peak:.0f} MiB")
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main())
