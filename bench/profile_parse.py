"""Parse-and-aggregate time and peak memory of big profiles: debugkit versus json.load.

    python bench/profile_parse.py                 # 1,000,000-sample speedscope + 200 MB trace
    python bench/profile_parse.py --samples 200000 --trace-mb 40 --repeat 3   # quicker

Both inputs are generated inside the script in a temporary folder (nothing is
downloaded): a py-spy-style speedscope file (compact JSON, four threads, 5,000 distinct
stacks drawn with a Zipf law, depth 8-60) and a Kineto-style chrome trace (pretty-printed
like ``export_chrome_trace``: CPU operators with input shapes nested in ProfilerSteps,
``cudaLaunchKernel`` calls and the GPU kernels they launch).

Each measurement runs in a fresh child process so its peak memory (``ru_maxrss``) is its
own; the script prints the median time over ``--repeat`` runs, the peak, and the ratios.

- speedscope, debugkit: ``read_speedscope`` + ``compute_function_table`` (self/total per
  frame) + ``compute_flame_tree`` (folded at 0.1 %).
  naive: ``json.load`` + the same self/total counts and the same prefix tree, in plain
  Python over the loaded lists (what a script without debugkit does).
- chrome trace, debugkit: ``read_chrome_trace`` (streamed) + ``compute_operator_table``.
  naive: ``json.load`` + one dict per event into the same columns + the same operator
  table (so only the reading differs).
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
sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------------------- inputs
def make_speedscope(path: Path, n_samples: int, seed: int = 0) -> None:
    import numpy as np
    import orjson

    rng = np.random.default_rng(seed)
    n_frames, n_stacks, threads = 3000, 5000, 4
    frames = [{"name": f"fn_{i}", "file": f"/srv/app/pkg{i % 40}/mod{i % 300}.py", "line": 1 + i % 500,
               "col": None} for i in range(n_frames)]
    roots = rng.integers(0, 50, size=8)
    stacks = []
    for _ in range(n_stacks):
        depth = int(rng.integers(8, 61))
        st = [int(roots[rng.integers(0, len(roots))])] + rng.integers(50, n_frames, size=depth - 1).tolist()
        stacks.append(orjson.dumps(st))
    p = 1.0 / np.arange(1, n_stacks + 1) ** 1.1
    p /= p.sum()
    per = n_samples // threads
    with open(path, "wb") as f:
        f.write(b'{"$schema":"https://www.speedscope.app/file-format-schema.json","profiles":[')
        for t in range(threads):
            picks = rng.choice(n_stacks, size=per, p=p)
            if t:
                f.write(b",")
            f.write(b'{"type":"sampled","name":"Process 1 Thread %d \\"t%d\\"","unit":"seconds",'
                    b'"startValue":0.0,"endValue":%.2f,"samples":[' % (100 + t, t, per * 0.01))
            for a in range(0, per, 100_000):
                chunk = b",".join(stacks[i] for i in picks[a:a + 100_000].tolist())
                f.write((b"," if a else b"") + chunk)
            f.write(b'],"weights":[' + b",".join([b"0.01"] * per) + b"]}")
        f.write(b'],"shared":{"frames":' + orjson.dumps(frames) + b'},"activeProfileIndex":null,'
                b'"exporter":"py-spy@0.4.3","name":"bench"}')


OP = '''  {{
    "ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 4242, "tid": 4242,
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext},"Sequence number": {seq}, "Fwd thread id": 0, "Record function id": 0, "Concrete Inputs": ["", "", ""], "Input type": ["float", "float", "float"], "Input Strides": [[4096, 1], [4096, 1], [1]], "Input Dims": [[{b}, 4096], [4096, 4096], [4096]], "Ev Idx": {ext}
    }}
  }}'''
RT = '''  {{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242,
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext}, "cbid": 211, "correlation": {corr}
    }}
  }}'''
KERNEL = '''  {{
    "ph": "X", "cat": "kernel", "name": "{kname}", "pid": 0, "tid": 7,
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext}, "queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 128, "shared memory": 49152, "blocks per SM": 4.5, "warps per SM": 18.0, "grid": [128, 8, 1], "block": [256, 1, 1], "est. achieved occupancy %": 50
    }}
  }}'''
STEP = '''  {{
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{n}", "pid": 4242, "tid": 4242,
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext}, "Record function id": 0, "Ev Idx": {ext}
    }}
  }}'''
OPS = ["aten::linear", "aten::addmm", "aten::relu", "aten::layer_norm", "aten::softmax", "aten::matmul",
       "aten::mul", "aten::add", "aten::native_layer_norm", "aten::gelu"]
KERNELS = ["ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4>",
           "void at::native::layer_norm_kernel", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>"]


def make_trace(path: Path, target_bytes: int) -> int:
    """Write a Kineto-shaped trace of about ``target_bytes``; returns the event count."""
    n = 0
    ts = 1_000_000.0
    ext = corr = 0
    with open(path, "w") as f:
        f.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "NVIDIA H100", '
                '"totalGlobalMem": 85000000000}],\n  "displayTimeUnit": "ms",\n  "traceEvents": [\n')
        f.write('  {"ph": "M", "name": "thread_name", "pid": 4242, "tid": 4242, "args": {"name": "python main"}}')
        n += 1
        step = 0
        while f.tell() < target_bytes:
            step += 1
            start = ts
            body = []
            for k in range(200):  # operators per step
                ext += 1
                name = OPS[k % len(OPS)]
                body.append(OP.format(name=name, ts=ts, dur=30.0, ext=ext, seq=ext, b=32 + k % 4))
                ext += 1
                body.append(OP.format(name="aten::addmm", ts=ts + 2, dur=20.0, ext=ext, seq=ext, b=32))
                corr += 1
                body.append(RT.format(ts=ts + 5, dur=6.0, ext=ext, corr=corr))
                body.append(KERNEL.format(kname=KERNELS[k % len(KERNELS)], ts=ts + 12, dur=25.0, ext=ext, corr=corr))
                ts += 40.0
            ext += 1
            f.write(",\n" + STEP.format(n=step, ts=start - 1, dur=ts - start + 2, ext=ext))
            f.write(",\n" + ",\n".join(body))
            n += 1 + len(body)
            ts += 100.0
        f.write('\n  ],\n  "traceName": "bench.pt.trace.json"\n}\n')
    return n


# ---------------------------------------------------------------------------- work (child)
def naive_speedscope(path: str) -> dict:
    """json.load and plain-Python counting: self, total per frame, the prefix tree."""
    with open(path) as f:
        doc = json.load(f)
    frames = doc["shared"]["frames"]
    key = [(fr["name"], fr.get("file"), fr.get("line")) for fr in frames]
    self_c: dict = {}
    total_c: dict = {}
    tree: dict = {}
    n = 0
    for prof in doc["profiles"]:
        for st in prof["samples"]:
            n += 1
            if st:
                k = key[st[-1]]
                self_c[k] = self_c.get(k, 0) + 1
            for k in {key[i] for i in st}:
                total_c[k] = total_c.get(k, 0) + 1
            node = tree
            for i in st:
                child = node.get(key[i])
                if child is None:
                    child = node[key[i]] = [0, {}]
                child[0] += 1
                node = child[1]
    return {"samples": n, "functions": len(total_c)}


def debugkit_speedscope(path: str) -> dict:
    from debugkit.analysis.profile import compute_flame_tree, compute_function_table
    from debugkit.io.speedscope import read_speedscope

    prof = read_speedscope(path)
    table = compute_function_table(prof, by="frame")
    tree = compute_flame_tree(prof, by="frame")
    return {"samples": prof.total_samples, "functions": len(table), "tree_nodes": len(tree)}


def naive_trace(path: str) -> dict:
    import numpy as np
    import pandas as pd

    from debugkit.analysis.trace import compute_operator_table
    from debugkit.io.chrome_trace import INT_ARGS, ChromeTrace

    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    cols = {k: [] for k in ("ph", "cat", "name", "pid", "tid", "ts_us", "dur_us", *INT_ARGS.values(),
                            "input_dims", "input_types")}
    for ev in events:
        if ev.get("ph") != "X":
            continue
        a = ev.get("args") or {}
        cols["ph"].append("X")
        cols["cat"].append(str(ev.get("cat", "")))
        cols["name"].append(str(ev.get("name", "")))
        cols["pid"].append(str(ev.get("pid")))
        cols["tid"].append(str(ev.get("tid")))
        cols["ts_us"].append(float(ev["ts"]))
        cols["dur_us"].append(float(ev.get("dur", 0.0)))
        for k, c in INT_ARGS.items():
            v = a.get(k)
            cols[c].append(v if type(v) is int else -1)
        cols["input_dims"].append(json.dumps(a["Input Dims"]) if "Input Dims" in a else "")
        cols["input_types"].append(json.dumps(a["Input type"]) if "Input type" in a else "")
    df = pd.DataFrame({k: (pd.Categorical(v) if k in ("ph", "cat", "name", "pid", "tid", "input_dims",
                                                      "input_types") else np.asarray(v)) for k, v in cols.items()})
    ops = compute_operator_table(ChromeTrace(df, {}, {}, len(events), {}))
    return {"events": len(events), "operators": len(ops)}


def debugkit_trace(path: str) -> dict:
    from debugkit.analysis.trace import compute_operator_table
    from debugkit.io.chrome_trace import read_chrome_trace

    tr = read_chrome_trace(path)
    ops = compute_operator_table(tr)
    return {"events": tr.n_events, "operators": len(ops)}


WORK = {("speedscope", "naive"): naive_speedscope, ("speedscope", "debugkit"): debugkit_speedscope,
        ("trace", "naive"): naive_trace, ("trace", "debugkit"): debugkit_trace}


def child(kind: str, variant: str, path: str) -> None:
    import numpy  # noqa: F401  (imports are not what is measured)
    import orjson  # noqa: F401
    import pandas  # noqa: F401

    import debugkit.analysis.profile  # noqa: F401
    import debugkit.analysis.trace  # noqa: F401
    import debugkit.io.chrome_trace  # noqa: F401
    import debugkit.io.speedscope  # noqa: F401

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0, c0 = time.perf_counter(), time.process_time()
    out = WORK[(kind, variant)](path)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": dt, "cpu_s": cpu, "peak_rss": peak, "base_rss": base, "result": out}))


def measure(kind: str, variant: str, path: Path, repeat: int, timeout: float) -> dict:
    runs = []
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, __file__, "--child", kind, variant, str(path)],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise SystemExit(f"{kind}/{variant} failed:\n{proc.stderr}")
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {"median_s": statistics.median(r["seconds"] for r in runs),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "peak_rss": max(r["peak_rss"] for r in runs),
            "delta_rss": max(r["peak_rss"] - r["base_rss"] for r in runs),
            "result": runs[0]["result"], "times": [round(r["seconds"], 2) for r in runs]}


def mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--trace-mb", type=float, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--child", nargs=3, metavar=("KIND", "VARIANT", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(*a.child)
        return
    with tempfile.TemporaryDirectory(prefix="dk-bench-") as tmp:
        ss = Path(tmp) / "profile.speedscope.json"
        tr = Path(tmp) / "trace.pt.trace.json"
        t = time.perf_counter()
        make_speedscope(ss, a.samples)
        n_events = make_trace(tr, int(a.trace_mb * 2**20))
        print(f"generated in {time.perf_counter() - t:.1f} s: speedscope {a.samples:,} samples "
              f"({mb(ss.stat().st_size)}), chrome trace {n_events:,} events ({mb(tr.stat().st_size)})")
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"median of {a.repeat} runs, each in a fresh process\n")
        rows = []
        for kind, path in (("speedscope", ss), ("trace", tr)):
            res = {v: measure(kind, v, path, a.repeat, a.timeout) for v in ("debugkit", "naive")}
            d, n = res["debugkit"], res["naive"]
            key = "samples" if kind == "speedscope" else "events"
            assert d["result"][key] == n["result"][key], (d["result"], n["result"])
            rows.append((kind, d, n))
            print(f"{kind}: debugkit {d['median_s']:.2f} s wall, {d['median_cpu_s']:.2f} s CPU (runs {d['times']}), "
                  f"peak RSS {mb(d['peak_rss'])} (+{mb(d['delta_rss'])} over imports)")
            print(f"{' ' * len(kind)}  json.load {n['median_s']:.2f} s wall, {n['median_cpu_s']:.2f} s CPU "
                  f"(runs {n['times']}), peak RSS {mb(n['peak_rss'])} (+{mb(n['delta_rss'])})")
            print(f"{' ' * len(kind)}  ratio: {n['median_s'] / d['median_s']:.1f}x faster (wall), "
                  f"{n['median_cpu_s'] / d['median_cpu_s']:.1f}x (CPU), "
                  f"{n['delta_rss'] / max(d['delta_rss'], 1):.1f}x less memory; result {d['result']}\n")
        (_, dss, _), (_, dtr, _) = rows
        print("targets (wall): speedscope < 2 s: " + ("met" if dss["median_s"] < 2 else "MISSED")
              + f" ({dss['median_s']:.2f} s wall, {dss['median_cpu_s']:.2f} s CPU); trace < 15 s and < 2 GB peak: "
              + ("met" if dtr["median_s"] < 15 and dtr["peak_rss"] < 2 * 2**30 else "MISSED")
              + f" ({dtr['median_s']:.2f} s wall, {dtr['median_cpu_s']:.2f} s CPU, {mb(dtr['peak_rss'])})")
    print(f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: on a shared machine "
          "wall time includes waiting for a CPU; CPU time is closer to what an idle machine gives")


if __name__ == "__main__":
    main()
