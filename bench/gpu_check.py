"""The CUDA paths of the Recorder and of replay, checked end to end on one GPU (< 5 min).

No GPU had been lent to this project when this script was written, so the paths below had
never run on one. Run it on a machine with CUDA and read its report:

1. **device-side assert**: a small CUDA training run (``rec.step``, ``rec.log``, norms
   every step, ``model_factory`` for replay) whose step 5 has an out-of-range label. The
   run is a child process (a device-side assert breaks its CUDA context for good). Checks:
   a failure capture exists, with the batch, and what it says about the model's tensors.
2. **NaN**: the same run with a NaN in step 5's inputs (the Recorder's deferred GPU
   check). Checks: one ``nonfinite`` capture at step 5.
3. **replay, GPU and CPU**: each capture replayed on the GPU (with replay's CPU
   cross-check) and on the CPU; the two reports are compared (reproduced, error type,
   culprit).
4. **OOM snapshot**: ``record_memory_history=True`` and a step that allocates more than
   the GPU has. Checks: the failure is captured and a memory snapshot is written.
5. **device syncs**: ``torch.cuda.set_sync_debug_mode("warn")`` counts the synchronising
   calls made on the training thread per step, bare loop against the recorded loop (the
   Recorder should add none: its norm and loss copies are asynchronous).
6. **overhead**: bare loop, Recorder, TensorBoard (``add_scalar`` of the same fused norms
   and the loss), interleaved in rotating rounds, median step time on the GPU.

Without CUDA it prints why and exits 0 (skipped). ``--self-test`` runs every part that
has a CPU counterpart on the CPU (the planted label raises ``IndexError`` there; parts 4
and 5 are CUDA-only and reported as skipped), so CI proves the script itself works
(``tests/test_gpu_check.py``).

    python bench/gpu_check.py [--out DIR] [--rounds 10] [--self-test]

Exit status: 0 when every check passed or was skipped, 1 when one failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NUM_CLASSES = 10
BAD_STEP = 5
STEPS = 12
MODEL_MODULE = "dk_gpucheck_model"
MODEL_SRC = textwrap.dedent('''
    """The model of bench/gpu_check.py's recorded runs (written by it; replay rebuilds it)."""
    import torch.nn as nn


    def build(width=64, num_classes=10):
        layers = []
        for _ in range(4):
            layers += [nn.Linear(width, width), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(width, num_classes))
''')

CHECKS: list[dict] = []


def check(name: str, ok: bool | None, detail: str) -> None:
    """Record and print one check (ok None: skipped)."""
    CHECKS.append({"name": name, "ok": ok, "detail": detail})
    tag = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    print(f"[{tag}] {name}: {detail}", flush=True)


# ---------------------------------------------------------------------- the recorded runs
def train(out: Path, scenario: str, device: str) -> None:
    """One recorded run (child process): ``scenario`` is ``assert`` or ``nan``."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(out))
    from dk_gpucheck_model import build

    from debugkit import Recorder

    torch.manual_seed(0)
    model = build().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    rec = Recorder(out / f"run-{scenario}", model, optimizer=opt, num_classes=NUM_CLASSES,
                   model_factory=f"{MODEL_MODULE}:build", flush_every_s=0.2)
    try:
        for step in range(STEPS):
            x = torch.randn(16, 64, generator=g)
            y = torch.randint(0, NUM_CLASSES, (16,), generator=g)
            if step == BAD_STEP and scenario == "assert":
                y[3] = NUM_CLASSES  # out of range: a device-side assert on CUDA
            if step == BAD_STEP and scenario == "nan":
                x[2, 7] = float("nan")
            try:
                with rec.step((x, y)):  # the batch as the loader gave it (CPU)
                    xd, yd = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                    loss = F.cross_entropy(model(xd), yd)
                    opt.zero_grad()
                    loss.backward()
                    rec.log(loss=loss)
                    opt.step()
            except Exception as exc:  # the step failed: the Recorder captured it
                print(f"step {step}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                if scenario == "assert":
                    break  # a broken CUDA context stays broken
    finally:
        try:
            rec.close()
        except Exception as exc:
            print(f"close: {type(exc).__name__}: {str(exc)[:200]}", flush=True)


def record_runs(out: Path, device: str) -> dict:
    runs = {}
    for scenario in ("assert", "nan"):
        p = subprocess.run([sys.executable, __file__, "--_train", scenario, "--device", device,
                            "--out", str(out)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(
                               [str(ROOT), str(out), os.environ.get("PYTHONPATH", "")])})
        print(f"--- recorded run '{scenario}' on {device} (exit {p.returncode}):\n"
              + textwrap.indent((p.stdout + p.stderr).strip()[-1500:], "    "), flush=True)
        runs[scenario] = out / f"run-{scenario}"
    return runs


def check_captures(runs: dict, device: str) -> dict:
    from debugkit import open_run

    fids = {}
    for scenario, path in runs.items():
        try:
            fails = open_run(path).failures()
        except Exception as exc:
            check(f"capture ({scenario})", False, f"the run does not open: {exc}")
            continue
        at = [f for f in fails if f.get("step") == BAD_STEP]
        want = "exception" if scenario == "assert" else "nonfinite"
        good = [f for f in at if f.get("kind") == want]
        if not good:
            check(f"capture ({scenario})", False,
                  f"no {want} capture at step {BAD_STEP}; captures: "
                  + json.dumps([{k: f.get(k) for k in ("id", "kind", "step", "error_type")}
                                for f in fails]))
            continue
        f = good[0]
        fids[scenario] = f["id"]
        errs = f.get("capture_errors") or {}
        files = f.get("files") or {}
        detail = (f"{f['id']}: {f.get('error_type') or f.get('kind')}: "
                  f"{str(f.get('message'))[:160]!r}; parts {sorted(files)}"
                  + (f"; capture_errors {json.dumps(errs)[:300]}" if errs else ""))
        check(f"capture ({scenario})", "batch" in files, detail)
        if device == "cuda" and scenario == "assert":
            check("device-side assert is what the capture says", "device-side assert" in
                  str(f.get("message")) or "CUDA" in str(f.get("error_type")), detail)
    return fids


def replay_both(runs: dict, fids: dict, out: Path, device: str) -> None:
    from debugkit.replay import replay

    for scenario, fid in fids.items():
        reports = {}
        for dev in (["cuda", "cpu"] if device == "cuda" else ["cpu"]):
            t0 = time.perf_counter()
            try:
                rep = replay(runs[scenario], fid, device=dev, allow_code=True, timeout_s=120,
                             search_path=[str(out)], code_roots=[str(out)])
            except Exception as exc:
                check(f"replay {scenario} on {dev}", False, f"{type(exc).__name__}: {exc}")
                continue
            reports[dev] = rep
            r = rep.get("replay") or {}
            cul = rep.get("culprit") or {}
            cc = rep.get("cross_check")
            check(f"replay {scenario} on {dev}", bool(rep.get("reproduced")),
                  f"reproduced={rep.get('reproduced')} same_error={rep.get('same_error')} "
                  f"replay={r.get('type')}: {str(r.get('message'))[:120]!r} "
                  f"culprit={cul.get('detail') or cul.get('module')!r} "
                  f"cross_check={None if cc is None else (cc.get('replay') or {}).get('type')} "
                  f"({time.perf_counter() - t0:.1f} s)")
        if len(reports) == 2:
            a, b = reports["cuda"], reports["cpu"]
            key = lambda r: (bool(r.get("reproduced")), (r.get("culprit") or {}).get("sample_index"))
            check(f"replay {scenario}: GPU and CPU agree", key(a) == key(b),
                  f"GPU {key(a)} vs CPU {key(b)} (reproduced, culprit sample)")


# ---------------------------------------------------------------------- OOM and syncs
def oom_snapshot(out: Path) -> None:
    import torch

    from debugkit import Recorder, open_run

    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = out / "run-oom"
    rec = Recorder(run, model, optimizer=opt, record_memory_history=True)
    free, total = torch.cuda.mem_get_info()
    for step in range(3):
        try:
            with rec.step(None):
                loss = model(torch.randn(8, 64, device="cuda")).sum()
                if step == 2:
                    torch.empty(int(total * 2), dtype=torch.uint8, device="cuda")  # planted OOM
                opt.zero_grad()
                loss.backward()
                opt.step()
        except torch.OutOfMemoryError:
            pass
    rec.close()
    r = open_run(run)
    snaps = r.memory_snapshots()
    fails = r.failures()
    check("OOM: failure captured", any(f.get("step") == 2 for f in fails),
          json.dumps([{k: f.get(k) for k in ("id", "kind", "error_type")} for f in fails]))
    check("OOM: memory snapshot written", any(s.get("step") == 2 for s in snaps),
          json.dumps([{k: s.get(k) for k in ("id", "reason", "step", "bytes")} for s in snaps])[:400])


def _loop(device, kind, steps, rec=None, tb=None, model=None, opt=None):
    import torch
    import torch.nn.functional as F

    x = torch.randn(32, 128, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    params = list(model.parameters())
    for s in range(steps):
        if kind == "recorder":
            with rec.step((x, y)):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()
            continue
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if kind == "tensorboard":  # what a TensorBoard user writes: values on the host
            norms = torch.stack(torch._foreach_norm([p.grad for p in params])).tolist()
            for i, v in enumerate(norms):
                tb.add_scalar(f"grad_norm/{i}", v, s)
            tb.add_scalar("loss", loss.item(), s)
        opt.step()


def _models(device, kinds, out):
    import torch

    from debugkit import Recorder

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from recorder_overhead import build

    models = {k: build().to(device) for k in kinds}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    rec = Recorder(out / f"run-overhead-{device}", models["recorder"], optimizer=opts["recorder"])
    tb = None
    if "tensorboard" in kinds:
        from torch.utils.tensorboard import SummaryWriter

        tb = SummaryWriter(str(out / f"tb-{device}"))
    return models, opts, rec, tb


def count_syncs(out: Path, steps: int = 50) -> None:
    import torch

    models, opts, rec, _ = _models("cuda", ("bare", "recorder"), out)
    main = threading.current_thread()
    counts = {}
    for kind in ("bare", "recorder"):
        _loop("cuda", kind, 5, rec=rec, model=models[kind], opt=opts[kind])  # warm-up
        torch.cuda.synchronize()
        seen = []
        old = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None, seen=seen):
            if threading.current_thread() is main:
                seen.append(f"{filename}:{lineno}: {message}")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            torch.cuda.set_sync_debug_mode("warn")
            try:
                _loop("cuda", kind, steps, rec=rec, model=models[kind], opt=opts[kind])
            finally:
                torch.cuda.set_sync_debug_mode("default")
                warnings.showwarning = old
        counts[kind] = seen
    rec.close()
    extra = (len(counts["recorder"]) - len(counts["bare"])) / steps
    check("device syncs on the training thread per step", extra <= 0,
          f"bare {len(counts['bare']) / steps:.2f}, with the Recorder "
          f"{len(counts['recorder']) / steps:.2f} per step"
          + (f"; first extra: {sorted(set(counts['recorder']) - set(counts['bare']))[:3]}"
             if extra > 0 else ""))


def overhead(out: Path, device: str, rounds: int, steps: int = 40) -> None:
    import torch

    kinds = ("bare", "recorder", "tensorboard")
    models, opts, rec, tb = _models(device, kinds, out)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for k in kinds:
        _loop(device, k, 10, rec=rec, tb=tb, model=models[k], opt=opts[k])
    times = {k: [] for k in kinds}
    for r in range(rounds):
        order = kinds[r % 3:] + kinds[:r % 3]  # rotating order
        for k in order:
            sync()
            t0 = time.perf_counter()
            _loop(device, k, steps, rec=rec, tb=tb, model=models[k], opt=opts[k])
            sync()
            times[k].append((time.perf_counter() - t0) / steps)
    rec.close()
    tb.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["bare"]
    line = ", ".join(f"{k} {v * 1e3:.3f} ms ({(v / base - 1) * 100:+.1f} %)" for k, v in med.items())
    check(f"overhead on {device} (24 x Linear(128), batch 32; median of {rounds} rounds)",
          True, line + f"; load {os.getloadavg()[0]:.1f}")


# ---------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="work folder (default: a new temporary one)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--self-test", action="store_true",
                    help="run the parts that have a CPU counterpart on the CPU (CI)")
    ap.add_argument("--_train", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # CPU parts: one thread (the host side of a GPU step is one)
    if a._train:
        train(Path(a.out), a._train, a.device)
        return 0

    if a.self_test:
        device = "cpu"
    elif not torch.cuda.is_available():
        print("gpu_check: skipped: no CUDA device here (torch "
              f"{torch.__version__}, cuda {torch.version.cuda}); --self-test runs it on the CPU")
        return 0
    else:
        device = "cuda"
        print(f"gpu_check on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}", flush=True)
    t_start = time.perf_counter()
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="dk-gpucheck-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{MODEL_MODULE}.py").write_text(MODEL_SRC)
    os.environ.setdefault("DEBUGKIT_CACHE", str(out / "cache"))
    runs = record_runs(out, device)
    fids = check_captures(runs, device)
    replay_both(runs, fids, out, device)
    if device == "cuda":
        oom_snapshot(out)
        count_syncs(out)
    else:
        check("OOM: memory snapshot written", None, "CUDA only")
        check("device syncs on the training thread per step", None, "CUDA only")
    overhead(out, device, a.rounds if device == "cuda" else min(a.rounds, 3))
    failed = [c for c in CHECKS if c["ok"] is False]
    (out / "gpu_check.json").write_text(json.dumps({"device": device, "checks": CHECKS}, indent=1))
    print(f"gpu_check: {len(CHECKS) - len(failed)} of {len(CHECKS)} checks passed or skipped, "
          f"{len(failed)} failed, in {time.perf_counter() - t_start:.0f} s; report in "
          f"{out / 'gpu_check.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
