"""bench/serve_overhead.py: the --quick smoke run prints every row and the target lines,
and the method shows a planted cost (the control) while an A/A pair shows none."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "serve_overhead.py"


def _bench():
    spec = importlib.util.spec_from_file_location("serve_overhead", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_quick_run_prints_rows_targets_and_the_a_a_check(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[1]), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    for model in ("noop", "1ms", "20ms"):
        for variant in ("bare", "bare again", "request", "wrap", "no finite", "no capture", "no memory",
                        "timer"):
            assert re.search(rf"^{model}\s+{variant}\s+\d", out, re.M), (model, variant, out)
        assert re.search(rf"^{model}\s+writer thread: \d+\.\d+ us CPU per recorded request "
                         r"\(\d+ blocks over 4 models; 16 recorders, each with its own writer", out, re.M)
        assert re.search(rf"^{model}\s+memory read by \d+ of \d+ counted `request` requests "
                         r"\(\d+\.\d%; memory_every_s 50 ms, debugkit.serve's default; each recorder's "
                         r"schedule as if its requests ran back to back\)$",
                         out, re.M), out
    for model in ("1ms", "20ms"):
        assert re.search(rf"^{model}\s+control\s+\d", out, re.M)
        # each of the 4 models' own median, for request and the A/A twin
        assert re.search(rf"^{model}\s+models: request( [+-]\d+\.\d+%,){{3}} [+-]\d+\.\d+%; "
                         r"bare again( [+-]\d+\.\d+%,){3} [+-]\d+\.\d+%$", out, re.M), out
        for variant in ("request", "wrap"):
            assert re.search(rf"^target {model}\s+{variant}\s+[+-]\d+\.\d+% of the bare handler's CPU "
                             rf"\[[+-]\d+\.\d+%, [+-]\d+\.\d+%\] \(<= {'3.0' if model == '1ms' else '0.5'}%\): "
                             r"(met|NOT met|undecided \(the interval reaches over the target\))$", out, re.M), \
                (model, variant, out)
        assert re.search(rf"^check  {model}\s+A/A\s+[+-]\d+\.\d+%", out, re.M)
        assert re.search(rf"^parts  {model}\s+finiteness [+-]\d+\.\d+%, RNG copy [+-]\d+\.\d+%, memory reads "
                         r"[+-]\d+\.\d+%, the rest [+-]\d+\.\d+% \(of request [+-]\d+\.\d+%\)$", out, re.M), out
    # the ~20 ms target's figures come from the interleaved phase (8 units with --quick)
    assert re.search(r"^20ms\s+interleaved: request [+-]\d+\.\d+% \[[+-]\d+\.\d+%, [+-]\d+\.\d+%\], wrap "
                     r".*, bare again [+-]\d+\.\d+% .*\(8 units of one request per variant, bare \d+\.\d+ ms; "
                     r"memory read by \d of 8 `request` requests\): the target line's figures$", out, re.M), out
    assert not re.search(r"^1ms\s+interleaved:", out, re.M)
    assert re.search(r"^control: a Python loop of [\d,]+ iterations", out, re.M)
    assert re.search(r"^seed: \d+  \(--seed \d+ repeats this run's variant orders\)$", out, re.M), out


def test_the_method_shows_a_planted_cost_and_no_cost_between_twins(tmp_path):
    """The control with a loop of ~2 ms of CPU next to a ~10 us model: the paired method
    must show it (its interval above zero), and the A/A twin must not (a 20x margin: this
    checks the method's sign and size, not a timing target)."""
    import torch

    bench = _bench()
    torch.set_num_threads(1)
    built = [bench.build(8, 1, 1) for _ in range(3)]
    n = bench.calibrate_spin(0.002)
    r = bench.bench_model("t", [m for m, _ in built], [x for _, x in built], run=3, blocks=9, out=tmp_path,
                          spin_n=n)
    control, twin = r["variants"]["control"]["d_cpu"], r["variants"]["bare again"]["d_cpu"]
    assert control[1] > 0 and control[0] > 0.0005, control
    assert abs(twin[0]) < 0.0001, twin
    # every model had its blocks (9 blocks rotating over 3): each one's own median shows the cost
    assert r["models"] == 3 and all(d > 0.0005 for d in r["variants"]["control"]["d_cpu_by_model"])
    assert set(r["variants"]) == {"bare", "bare again", "request", "wrap", "no finite", "no capture",
                                  "no memory", "timer", "control"}


def test_parts_line_subtracts_each_variant_from_request():
    bench = _bench()
    v = {"request": {"d_cpu": (0.04, 0, 0)}, "no finite": {"d_cpu": (0.02, 0, 0)},
         "no capture": {"d_cpu": (0.03, 0, 0)}, "no memory": {"d_cpu": (0.035, 0, 0)}}
    assert bench.parts_line(v, 1.0) == ("finiteness +2.00%, RNG copy +1.00%, memory reads +0.50%, "
                                        "the rest +0.50% (of request +4.00%)")


def test_cases_and_models_flags_run_a_subset_and_refuse_bad_values(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parents[1]), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--cases", "noop", "--models", "2", "--seed", "5"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert re.search(r"^seed: 5 ", p.stdout, re.M), p.stdout
    assert re.search(r"^noop\s+writer thread: .*\(20 blocks over 2 models; 8 recorders", p.stdout, re.M), p.stdout
    assert not re.search(r"^(1ms|20ms)\s", p.stdout, re.M), p.stdout
    for bad in (["--cases", "5ms"], ["--models", "0"]):
        p = subprocess.run([sys.executable, str(SCRIPT), *bad], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and "--cases" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_models_line_gives_each_models_median_as_a_share():
    bench = _bench()
    v = {"request": {"d_cpu_by_model": [0.04, 0.05]}, "bare again": {"d_cpu_by_model": [0.001, -0.002]}}
    assert bench.models_line(v, 1.0) == "request +4.00%, +5.00%; bare again +0.10%, -0.20%"


def test_median_interval_by_order_statistics():
    bench = _bench()
    assert bench.median_ci([5.0, 1.0, 3.0]) == (3.0, 1.0, 5.0)
    m, lo, hi = bench.median_ci([float(i) for i in range(100)])
    assert (m, lo, hi) == (49.5, 40.0, 60.0)  # ranks 50 -/+ 1.96 * sqrt(100) / 2


def test_the_bench_counts_the_memory_readings_of_its_counted_requests(tmp_path):
    """The ``memory read by`` count: with a reading due every 10 ms of each recorder's own
    request time (:class:`MemoryClock`) and >= 1 ms requests, ``request`` and ``wrap`` on one
    recorder in runs of 1 + 4, the 240 counted ``request`` requests take one reading per
    ~10 ms of the recorder's ~600 requests, ~40 % of them counted ones: ~24 (more when
    the machine is loaded and requests take longer)."""
    import time

    import torch

    bench = _bench()

    class Slow(torch.nn.Module):
        def forward(self, x):
            time.sleep(0.001)
            return x * 1.0

    r = bench.bench_model("slow", [Slow()], [torch.ones(2, 2)], run=4, blocks=60, out=tmp_path,
                          spin_n=None, memory_every_s=0.01)
    reads, counted = r["mem_reads"]
    assert counted == 240
    assert 8 <= reads <= 120, r["mem_reads"]


def test_memory_clock_keeps_each_recorders_time_to_its_next_reading():
    bench = _bench()

    class Rec:
        _mem_next = 12.0

    a, b = Rec(), Rec()
    clock = bench.MemoryClock()
    clock.resume(a, 5.0)  # never paused: a reading is due at once
    assert a._mem_next == 5.0
    a._mem_next = 12.0
    clock.pause(a, 10.0)  # 2 s left
    b._mem_next = 9.0
    clock.pause(b, 10.0)  # overdue: due at once when resumed
    clock.resume(a, 50.0)
    clock.resume(b, 50.0)
    assert (a._mem_next, b._mem_next) == (52.0, 50.0)


def test_the_verdict_is_met_only_when_the_whole_interval_is_under_the_target():
    bench = _bench()
    assert bench.verdict(0.003, 0.001, 0.005, 0.005) == "met"
    assert bench.verdict(0.003, 0.001, 0.0051, 0.005) == "undecided (the interval reaches over the target)"
    assert bench.verdict(0.0051, 0.001, 0.009, 0.005) == "NOT met"
    assert bench.verdict(0.02, 0.01, 0.03, 0.005) == "NOT met"


def test_the_interleaved_phase_shows_a_planted_cost_and_none_between_twins(tmp_path):
    """One request of each variant per unit, shuffled: the control's ~2 ms loop shows
    (its interval above zero), the A/A twin does not, every unit has one request of
    each, and each recorded ``request`` took its memory reading (due every request with
    memory_every_s=0)."""
    import torch

    bench = _bench()
    torch.set_num_threads(1)
    built = [bench.build(8, 1, 1) for _ in range(2)]
    n = bench.calibrate_spin(0.002)
    r = bench.bench_interleaved("t", [m for m, _ in built], [x for _, x in built], units=12, out=tmp_path,
                                memory_every_s=0, names=bench.INTERLEAVED + ("control",), spin_n=n)
    assert r["units"] == 12 and r["mem_reads"] == (12, 12)
    assert set(r["d_cpu_units"]) == {"bare again", "request", "wrap", "control"}
    assert all(len(v) == 12 for v in r["d_cpu_units"].values())
    control, twin = r["d_cpu"]["control"], r["d_cpu"]["bare again"]
    assert control[1] > 0 and control[0] > 0.0005, control
    assert abs(twin[0]) < 0.0001, twin
