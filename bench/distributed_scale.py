"""A 256-rank run of 5,000 steps: ``debugkit diagnose`` and the Distributed page.

Generates the run in debugkit's own format, with the schemas of the real 4-rank
``sample_runs/ddp-straggler`` (recorded by ``examples/ddp_digits.py`` under torchrun):
each rank's ``steps``, ``grads``, ``memory`` and ``scalars`` Arrow streams, its
``meta``/``heartbeat``/``events`` files, written with pyarrow. The job it describes:

- step times around 12 ms with per-rank noise, all ranks waiting for the slowest in the
  all-reduce (``comm_s``), as DDP does;
- rank ``--straggler`` (default 137) computes 30 % slower from a fifth of the run on;
- identical gradient norms on every rank (they are taken after the all-reduce);
- rank ``--lost`` (default 201) stops writing at step 4,200: its heartbeat says
  ``running``, no close record, while every other rank finishes (a ``rank_lost``).

Then, each in a fresh process through the installed ``debugkit`` console script or a
new interpreter, it times:

- ``diagnose``: ``debugkit diagnose RUN --json`` (imports included), and checks that
  it names the straggler and the lost rank;
- ``page``: the Distributed page rendered by Streamlit's AppTest (app.py, imports
  included) until its first chart;

and prints the median wall time, CPU time (user + sys) and peak RSS of each
(ru_maxrss of the child). The run's analyses are not cached between rounds.

    python bench/distributed_scale.py [--ranks 256] [--steps 5000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_runs" / "ddp-straggler"

PAGE = """
import sys, time
t0 = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=900)
at.query_params["run"] = sys.argv[2]
at.switch_page("pages/distributed.py")
at.run()
assert not at.exception, at.exception
assert len(at.get("plotly_chart")) >= 1, ("no chart", [e.value for e in at.error], [w.value for w in at.warning])
text = " ".join(x.value for x in [*at.markdown, *at.warning, *at.error])
print(time.perf_counter() - t0)
print(text[:4000])
"""


def _schema(name: str) -> pa.Schema:
    with open(SAMPLE / "ranks" / "0" / f"{name}-000.arrows", "rb") as f:
        return ipc.open_stream(f).schema


def _write(path: Path, schema: pa.Schema, cols: dict) -> None:
    table = pa.table({n: pa.array(cols[n], type=schema.field(n).type) for n in schema.names}, schema=schema)
    with ipc.new_stream(str(path), schema) as w:
        for batch in table.to_batches(max_chunksize=4096):  # flushed in pieces, like the writer
            w.write_batch(batch)


def build_run(root: Path, ranks: int, steps: int, straggler: int, lost: int, lost_at: int) -> Path:
    run = root / "ddp-256"
    run.mkdir(parents=True)
    manifest = json.loads((SAMPLE / "manifest.json").read_text())
    manifest.update(name=run.name, world_size=ranks, run_id="bench256")
    manifest["distributed"] = {**manifest["distributed"], "world_size": ranks, "local_world_size": 8}
    manifest["config"] = {**manifest["config"], "world_size": ranks}
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.copy(SAMPLE / "env.json", run / "env.json")
    meta0 = json.loads((SAMPLE / "ranks" / "0" / "meta-000.json").read_text())
    hb0 = json.loads((SAMPLE / "ranks" / "0" / "heartbeat.json").read_text())
    layers = meta0["layers"]
    schemas = {n: _schema(n) for n in ("steps", "grads", "memory", "scalars")}
    rng = np.random.default_rng(0)
    t_start = 1_796_300_000.0
    compute = 0.010 + 0.0005 * rng.standard_normal((ranks, steps)).clip(-3, 3)
    compute[straggler, steps // 5:] *= 1.3
    # After DDP's all-reduce every rank holds the same gradients: one set of norms.
    base_all = np.exp(-np.arange(steps) / 3000.0)
    gn_all = base_all[:, None] * (1 + 0.05 * rng.standard_normal((steps, len(layers))))
    slowest = compute.max(axis=0)  # every rank waits for the slowest in the all-reduce
    step_time = slowest + 0.002
    wall = t_start + np.cumsum(step_time)
    for r in range(ranks):
        n = lost_at if r == lost else steps
        d = run / "ranks" / str(r)
        d.mkdir(parents=True)
        s = np.arange(n, dtype=np.int64)
        comm = (slowest - compute[r])[:n] + 0.002
        _write(d / "steps-000.arrows", schemas["steps"], {
            "step": s, "wall_time": wall[:n], "step_time_s": step_time[:n],
            "data_wait_s": np.full(n, 0.0003), "comm_s": comm, "ok": np.ones(n, dtype=bool)})
        base = base_all[:n]
        gn = gn_all[:n].ravel()
        _write(d / "grads-000.arrows", schemas["grads"], {
            "step": np.repeat(s, len(layers)), "layer_id": np.tile(np.arange(len(layers)), n),
            "grad_norm": gn})
        _write(d / "memory-000.arrows", schemas["memory"], {
            "step": s, "wall_time": wall[:n], "device": ["cpu"] * n,
            "allocated_bytes": np.zeros(n, dtype=np.int64), "reserved_bytes": np.zeros(n, dtype=np.int64),
            "peak_bytes": np.zeros(n, dtype=np.int64),
            "rss_bytes": np.full(n, 400 << 20, dtype=np.int64)})
        keys = ["loss", "lr", "batch_size"]
        _write(d / "scalars-000.arrows", schemas["scalars"], {
            "step": np.repeat(s, 3), "key": keys * n,
            "value": np.column_stack([2.3 * base + 0.1, np.full(n, 0.05), np.full(n, 16.0)]).ravel(),
            "wall_time": np.repeat(wall[:n], 3)})
        pid = 10_000 + r
        meta = {**meta0, "rank": r, "world_size": ranks, "local_rank": r % 8, "node_rank": r // 8,
                "host": f"node{r // 8:02d}", "pid": pid, "local_world_size": 8,
                "started_at": t_start}
        (d / "meta-000.json").write_text(json.dumps(meta, indent=1))
        events = [{"time": t_start, "kind": "start", "segment": 0, "pid": pid}]
        if r == lost:
            hb = {**hb0, "state": "running", "pid": pid, "host": meta["host"], "time": float(wall[n - 1]),
                  "step": int(n - 1)}
        else:
            hb = {**hb0, "state": "finished", "pid": pid, "host": meta["host"], "time": float(wall[-1]),
                  "step": steps - 1}
            events.append({"time": float(wall[-1]), "kind": "close", "state": "finished", "steps": steps,
                           "skipped_batches": 0})
        (d / "heartbeat.json").write_text(json.dumps(hb, indent=1))
        (d / "events-000.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def child(cmd: list[str], cwd: Path) -> tuple[float, int, float, str]:
    """Wall seconds, peak RSS (bytes), CPU seconds (user + sys: what a busy machine
    inflates less) and stdout of one fresh process."""
    code = ("import resource, subprocess, sys, time, json\n"
            "t0 = time.perf_counter()\n"
            "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "dt = time.perf_counter() - t0\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(json.dumps({'rc': p.returncode, 'wall': dt, 'rss': u.ru_maxrss * 1024, 'cpu': u.ru_utime + u.ru_stime, "
            "'out': p.stdout, 'err': p.stderr[-3000:]}))\n")
    out = subprocess.run([sys.executable, "-c", code, *cmd], cwd=cwd, capture_output=True, text=True,
                         timeout=1800, check=True)
    res = json.loads(out.stdout)
    if res["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res['rc']}):\n{res['err']}")
    return res["wall"], res["rss"], res["cpu"], res["out"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--straggler", type=int, default=137)
    ap.add_argument("--lost", type=int, default=201)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated run (its path is printed)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dk-dist-scale-"))
    try:
        t0 = time.perf_counter()
        run = build_run(tmp, a.ranks, a.steps, a.straggler, a.lost, lost_at=int(a.steps * 0.84))
        size = sum(f.stat().st_size for f in run.rglob("*") if f.is_file())
        print(f"generated {a.ranks} ranks x {a.steps} steps ({size / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - t0:.1f} s: {run}")
        from debugkit._fsutil import find_executable

        exe = find_executable("debugkit")  # next to this interpreter first (unactivated venv)
        if not exe:
            raise SystemExit("the debugkit console script is not installed (pip install -e .)")
        os.environ["DEBUGKIT_ROOTS"] = str(tmp)  # the page serves the folder holding the run
        diag, page = [], []
        for i in range(a.repeats):
            # diagnose and the page interleaved, each in a new process, cold (no index).
            for f in run.glob(".debugkit*"):
                shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink()
            wall, rss, cpu, out = child([exe, "diagnose", "ddp-256", "--json"], tmp)
            found = json.loads(out)
            kinds = {(f.get("kind"), f.get("rank")) for f in found.get("findings", [])}
            diag.append((wall, rss, cpu))
            wall, rss, cpu, out = child([sys.executable, "-c", PAGE, str(ROOT / "app.py"), run.name], tmp)
            page.append((float(out.split("\n", 1)[0]), rss, cpu))
            page_text = out.split("\n", 1)[1]
            print(f"round {i + 1}: diagnose {diag[-1][0]:.1f} s wall, {diag[-1][2]:.1f} s CPU "
                  f"({diag[-1][1] / 2**20:.0f} MiB); page {page[-1][0]:.1f} s wall, {page[-1][2]:.1f} s CPU "
                  f"({page[-1][1] / 2**20:.0f} MiB)")
        print(f"diagnose findings: {sorted(k for k in kinds if k[0])}")
        print(f"  names the straggler (rank {a.straggler}): {any(k[1] == a.straggler for k in kinds)}; "
              f"the lost rank (rank {a.lost}): {any(k[1] == a.lost for k in kinds)}")
        print(f"  page mentions rank {a.straggler}: {str(a.straggler) in page_text}; rank {a.lost}: "
              f"{str(a.lost) in page_text}")
        med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
        print(f"\n| {a.ranks} ranks x {a.steps} steps | median wall | median CPU | peak RSS | target |")
        print("|---|---|---|---|---|")
        print(f"| `debugkit diagnose --json`, new process | {med(diag, 0):.1f} s | {med(diag, 2):.1f} s | "
              f"{med(diag, 1) / 2**20:.0f} MiB | < 10 s |")
        print(f"| Distributed page to first chart (AppTest, new process) | {med(page, 0):.1f} s | {med(page, 2):.1f} s | "
              f"{med(page, 1) / 2**20:.0f} MiB | < 10 s |")
        print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    finally:
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
