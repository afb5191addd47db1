"""Benchmark: from ``open_run`` to the Gradients page's figures (heatmap + lines + findings).

    python bench/gradients_page.py                 # 1M and 10M gradient-norm rows
    python bench/gradients_page.py --rows 1000000 --repeats 5

For each size it writes a run with the Recorder's own writer (``RankWriter``): 100
parameters plus the total, one row each per step (1M rows = 9,901 steps; 10M rows =
99,010 steps), lognormal noise, one spike and a NaN tail. Then, in a fresh process per
repeat (so peak memory is that of the work alone), it times:

* debugkit: ``open_run`` -> ``grad_norms``/``scalars`` -> ``pivot_grad_norms`` ->
  ``detect_gradient_findings`` -> ``compute_heatmap_bins`` -> both figures -> their JSON
  (what the browser receives);
* the usual way, side by side on the same run: the same rows read, then one plotly line
  per parameter with every point (what a notebook ``px.line`` does), and its JSON.

It prints medians, the ratio, peak RSS and the browser payload of each. Targets from
issue #3: under 1 s for 1M rows, under 5 s for 10M, payload bounded (~5,000 points per
line, a few hundred heatmap columns).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

N_LAYERS = 100


def write_run(path: Path, rows: int) -> None:
    import numpy as np

    from debugkit import format as fmt
    from debugkit._fsutil import atomic_write_json
    from debugkit.recorder.writer import RankWriter

    layers = [f"blocks.{i // 4}.{['attn.weight', 'attn.bias', 'mlp.weight', 'mlp.bias'][i % 4]}"
              for i in range(N_LAYERS)]
    steps = rows // (N_LAYERS + 1)
    rng = np.random.default_rng(0)
    level = np.exp(rng.normal(0, 1, N_LAYERS))
    path.mkdir(parents=True)
    atomic_write_json(path / fmt.MANIFEST, {"schema_version": fmt.SCHEMA_VERSION, "run_id": "bench",
                                            "name": f"bench-{rows}", "created_at": time.time(),
                                            "config": {}})
    rank_dir = path / fmt.RANKS_DIR / "0"
    w = RankWriter(rank_dir, n_layers=N_LAYERS + 1, flush_every_s=3600)
    atomic_write_json(rank_dir / f"meta-{w.segment:03d}.json", {"rank": 0, "layers": layers,
                                                                 "segment": w.segment})
    chunk = 10_000
    for start in range(0, steps, chunk):
        n = min(chunk, steps - start)
        vals = level[None, :] * np.exp(0.3 * rng.standard_normal((n, N_LAYERS)))
        s = np.arange(start, start + n)
        vals[s == int(steps * 0.123457), 7] *= 1e4       # one spike
        vals[s >= steps - 50, :] = np.nan                # a NaN tail
        total = np.sqrt(np.sum(vals ** 2, axis=1))
        full = np.concatenate([vals, total[:, None]], axis=1).astype(np.float32)
        loss = 2.0 * np.exp(-s / steps) + 0.05 * rng.random(n)
        for k in range(n):
            w.add("grads", (int(s[k]), full[k]))
            w.add("scalars", (int(s[k]), "loss", float(loss[k]), 0.0))
            w.add("scalars", (int(s[k]), "lr", 1e-3, 0.0))
        w.flush()
    w.close()


def _warm_up(path: str) -> None:
    """What a running dashboard has already done: imports and first-call set-up of
    pandas, pyarrow and plotly's figure classes (timed work starts after it)."""
    import numpy as np
    import pandas as pd
    import plotly.graph_objects as go
    import pyarrow  # noqa: F401

    from debugkit.analysis.gradients.detectors import detect_gradient_findings
    from debugkit.analysis.gradients.heatmap import compute_heatmap_bins
    from debugkit.analysis.gradients.layers import group_rows
    from debugkit.analysis.gradients.matrix import TOTAL, pivot_grad_norms
    from debugkit.charts.gradients import build_grad_heatmap_figure, build_grad_lines_figure

    g = pd.DataFrame({"step": np.arange(40).repeat(2), "rank": np.zeros(80, np.int32),
                      "layer": pd.Categorical.from_codes(np.tile([0, 1], 40), ["a.w", TOTAL]),
                      "grad_norm": np.ones(80)})
    s = pd.DataFrame({"step": np.arange(40), "rank": 0, "key": "loss", "value": 1.0, "wall_time": 0.0})
    m = pivot_grad_norms(g)[0]
    detect_gradient_findings(g, s)
    build_grad_heatmap_figure(compute_heatmap_bins(m), groups=group_rows(m.layers)).to_json()
    build_grad_lines_figure(m, ["a.w"]).to_json()
    go.Figure(go.Scattergl(x=[1], y=[1])).to_json()


def child_debugkit(path: str) -> dict:
    import numpy as np

    from debugkit.analysis.gradients.detectors import detect_gradient_findings
    from debugkit.analysis.gradients.heatmap import compute_heatmap_bins
    from debugkit.analysis.gradients.layers import default_line_layers, group_rows
    from debugkit.analysis.gradients.matrix import pivot_grad_norms
    from debugkit.charts.gradients import build_grad_heatmap_figure, build_grad_lines_figure
    from debugkit.io.run import open_run

    _warm_up(path)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0 = time.process_time()
    t0 = time.perf_counter()
    run = open_run(path)
    grads = run.grad_norms()
    scalars = run.scalars()
    t_read = time.perf_counter()
    mats = pivot_grad_norms(grads)
    m = mats[0]
    findings = detect_gradient_findings(grads, scalars, matrices=mats)
    t_find = time.perf_counter()
    bins = compute_heatmap_bins(m, 300, rows=m.names)
    heat = build_grad_heatmap_figure(bins, groups=group_rows(m.layers))
    lines = build_grad_lines_figure(m, default_line_layers(m, findings, m.layers))
    payload = len(heat.to_json()) + len(lines.to_json())
    t_end = time.perf_counter()
    cpu = time.process_time() - c0
    points = max(len(t.x) for t in lines.data if t.x is not None)
    return {"seconds": t_end - t0, "cpu_s": cpu, "read_s": t_read - t0, "findings_s": t_find - t_read,
            "figures_s": t_end - t_find, "rows": int(len(grads)), "payload_bytes": payload,
            "max_points_per_line": int(points), "heatmap_columns": int(bins.max_norm.shape[1]),
            "findings": [f"{f.kind}@{f.step}" for f in findings],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "base_rss_mb": base / 1024, "nan_points_kept": int(np.sum([len(t.x) for t in lines.data
                                                                     if t.name and "NaN" in t.name and t.x is not None]))}


def child_naive(path: str) -> dict:
    import numpy as np
    import plotly.graph_objects as go

    from debugkit.io.run import open_run

    _warm_up(path)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c0 = time.process_time()
    t0 = time.perf_counter()
    grads = open_run(path).grad_norms()
    fig = go.Figure()
    for layer, g in grads.groupby("layer", observed=True, sort=False):
        fig.add_trace(go.Scattergl(x=g["step"].to_numpy(), y=g["grad_norm"].to_numpy(np.float32),
                                   mode="lines", name=str(layer)))
    fig.update_yaxes(type="log")
    payload = len(fig.to_json())
    t_end = time.perf_counter()
    return {"seconds": t_end - t0, "cpu_s": time.process_time() - c0, "rows": int(len(grads)), "payload_bytes": payload,
            "max_points_per_line": int(max(len(t.x) for t in fig.data)),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "base_rss_mb": base / 1024}


def run_child(kind: str, path: Path, timeout: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", kind, str(path)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, action="append", help="gradient-norm rows (repeatable)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-naive", action="store_true", help="skip the all-points baseline")
    p.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        out = child_debugkit(a.child[1]) if a.child[0] == "debugkit" else child_naive(a.child[1])
        print(json.dumps(out))
        return
    sizes = a.rows or [1_000_000, 10_000_000]
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (shared with other "
          f"work: wall times include waiting for a CPU, so the process's CPU time (time.process_time, "
          f"all threads) is the figure to compare); {a.repeats} repeats, fresh process each; medians")
    with tempfile.TemporaryDirectory(prefix="dk-bench-") as tmp:
        for rows in sizes:
            path = Path(tmp) / f"run-{rows}"
            t = time.perf_counter()
            write_run(path, rows)
            print(f"\n== {rows:,} gradient-norm rows ({rows // (N_LAYERS + 1):,} steps x {N_LAYERS + 1}); "
                  f"written by RankWriter in {time.perf_counter() - t:.1f} s")
            timeout = 600
            dk = [run_child("debugkit", path, timeout) for _ in range(a.repeats)]
            med = statistics.median(r["seconds"] for r in dk)
            cpu = statistics.median(r["cpu_s"] for r in dk)
            last = dk[-1]
            target = 1.0 if rows <= 1_000_000 else 5.0
            print(f"debugkit  open_run -> figures: CPU {cpu:.2f} s median (target < {target:g} s: "
                  f"{'met' if cpu < target else 'NOT met'}); wall {med:.2f} s "
                  f"(read {statistics.median(r['read_s'] for r in dk):.2f} s, findings "
                  f"{statistics.median(r['findings_s'] for r in dk):.2f} s, figures+JSON "
                  f"{statistics.median(r['figures_s'] for r in dk):.2f} s)")
            print(f"          peak RSS {statistics.median(r['peak_rss_mb'] for r in dk):.0f} MB "
                  f"(after imports {last['base_rss_mb']:.0f} MB); payload {last['payload_bytes'] / 1e6:.2f} MB, "
                  f"<= {last['max_points_per_line']:,} points per line, {last['heatmap_columns']} heatmap "
                  f"columns; findings {', '.join(last['findings'])}")
            if not a.no_naive:
                nv = [run_child("naive", path, timeout) for _ in range(a.repeats)]
                nmed = statistics.median(r["seconds"] for r in nv)
                ncpu = statistics.median(r["cpu_s"] for r in nv)
                print(f"all points (plotly, one line per parameter, no findings): CPU {ncpu:.2f} s, "
                      f"wall {nmed:.2f} s median, "
                      f"peak RSS {statistics.median(r['peak_rss_mb'] for r in nv):.0f} MB, payload "
                      f"{nv[-1]['payload_bytes'] / 1e6:.1f} MB, {nv[-1]['max_points_per_line']:,} points per line")
                print(f"ratio: all-points / debugkit CPU time = {ncpu / cpu:.2f}x (wall {nmed / med:.2f}x); payload "
                      f"{nv[-1]['payload_bytes'] / last['payload_bytes']:.0f}x smaller with debugkit")


if __name__ == "__main__":
    main()
