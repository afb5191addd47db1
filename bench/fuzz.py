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

``--arrow N``: N structure-aware Arrow mutations per table (tests/fuzz/arrowmut.py:
lying offsets, lengths, null counts, dictionary indices, buffers), each input in a
child process, so a segfault is counted as ``broke``, not the end of the run.

``--whole-run N [--every-file]``: N mutated copies of each sample run of
tests/fuzz/wholerun.py (1 to 3 files, or with ``--every-file`` every file, mutated by their structure: Arrow, JSON, JSON lines, safetensors, gzip), each
opened in a child process on Home, Overview, Gradients, Memory, Profiler, Distributed,
Checkpoints, Replay and Audit (AppTest); prints per page how many drew, showed a
DebugkitError's box, or broke the contract (an exception, an app traceback, the
"Something went wrong" box, a crash, a write outside the store).
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
    ap.add_argument("--arrow", type=int, default=0, metavar="N",
                    help="structure-aware Arrow mutations per table, each in a child process")
    ap.add_argument("--whole-run", type=int, default=0, metavar="N",
                    help="mutated copies per sample run, opened on every page")
    ap.add_argument("--every-file", action="store_true",
                    help="with --whole-run: mutate every file of each copy (default: 1 to 3)")
    a = ap.parse_args(argv)
    if a.arrow:
        return arrow_fuzz(a.arrow, a.seed)
    if a.whole_run:
        return whole_run_fuzz(a.whole_run, a.seed, a.every_file)
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


def arrow_fuzz(n: int, seed0: int) -> int:
    from tests.fuzz.isolated import run_isolated as run_arrow

    tables = ("scalars_table", "grads_table", "memory_table", "steps_table")
    print(f"{'table':<15} {'opened':>7} {'refused':>8} {'broke':>6} {'no input':>9}")
    bad = 0
    for table in tables:
        counts = {"opened": 0, "refused": 0, "broke": 0, "no_input": 0}
        for i in range(n):
            out = run_arrow(table, "arrow", seed0 * 100_003 + i)
            counts[out.outcome] += 1
            if out.outcome == "broke":
                print("  " + out.detail.splitlines()[0], flush=True)
        bad += counts["broke"]
        print(f"{table:<15} {counts['opened']:>7} {counts['refused']:>8} {counts['broke']:>6} "
              f"{counts['no_input']:>9}", flush=True)
    print(f"{len(tables)} tables x {n} structure-aware inputs, each in a child; contract broken by {bad}")
    return 1 if bad else 0


def whole_run_fuzz(n: int, seed0: int, every_file: bool = False) -> int:
    from tests.fuzz.wholerun import BAD, PAGES, RUNS
    from tests.fuzz.wholerun import run_isolated as run_whole

    counts = {p: {"drew": 0, "refused": 0, "broke": 0} for p in PAGES}
    broke_runs = 0
    t0 = time.perf_counter()
    for sample in RUNS:
        for i in range(n):
            salt = seed0 * 100_003 + i
            res = run_whole(sample, salt, every_file=every_file)
            bad = False
            for page, (outcome, detail) in res["pages"].items():
                key = "broke" if outcome in BAD else outcome
                counts[page][key] += 1
                if outcome in BAD:
                    bad = True
                    print(f"  {sample} salt={salt} {res['files']}: {page}: {outcome}: {detail[:200]}",
                          flush=True)
            broke_runs += bad
    print(f"{'page':<12} {'drew':>6} {'refused':>8} {'broke':>6}")
    for page in PAGES:
        c = counts[page]
        print(f"{page:<12} {c['drew']:>6} {c['refused']:>8} {c['broke']:>6}")
    total = len(RUNS) * n
    what = "every file mutated" if every_file else "1 to 3 files mutated"
    print(f"{total} mutated runs ({n} of each of {len(RUNS)} samples, {what}) x {len(PAGES)} pages in "
          f"{time.perf_counter() - t0:.0f} s; runs with a page that broke the contract: {broke_runs}")
    return 1 if broke_runs else 0


if __name__ == "__main__":
    sys.exit(main())
