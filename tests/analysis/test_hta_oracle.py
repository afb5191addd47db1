"""GPU idle share and annotated step phases on Holistic Trace Analysis' own test traces
(tests/data/public/hta/, MIT), with HTA 0.5.0's printed numbers as the oracle (see the
README there for the command that printed them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from debugkit.analysis import trace as at
from debugkit.io.chrome_trace import read_chrome_trace

HTA = Path(__file__).resolve().parents[1] / "data" / "public" / "hta"
TF0 = HTA / "trace_filter" / "sampled_rank-0.json.gz"
TF1 = HTA / "trace_filter" / "sampled_rank-1.json.gz"
ALEXNET = HTA / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
SIMPLE_ADD = HTA / "simple_add" / "benchmark_result_493459_1694039959_trace.json.gz"

# (file, include_last_step) -> HTA's idle_time(us), kernel_time(us), idle_time_pctg
ORACLE = {
    (TF0, False): (321378, 600058, 53.56),
    (TF1, False): (328671, 600674, 54.72),
    (TF0, True): (675191, 1222847, 55.21),
    (TF1, True): (651136, 1231186, 52.89),
    (ALEXNET, False): (12929684, 12996011, 99.49),
    (ALEXNET, True): (12929684, 12996011, 99.49),
    (SIMPLE_ADD, False): (16414376, 16464339, 99.70),
}


@pytest.mark.parametrize("key", list(ORACLE), ids=lambda k: f"{k[0].parent.name}/{k[0].name[:14]}-last={k[1]}")
def test_gpu_idle_equals_htas_temporal_breakdown(key):
    path, last = key
    idle_us, span_us, pctg = ORACLE[key]
    g = at.compute_gpu_idle(read_chrome_trace(path), include_last_step=last)
    assert len(g) == 1
    r = g.iloc[0]
    assert r["idle_ms"] * 1e3 == pytest.approx(idle_us, abs=0.5)
    assert r["window_ms"] * 1e3 == pytest.approx(span_us, abs=0.5)
    assert round(100 * r["idle_fraction"], 2) == pctg
    with_steps = path.parent.name == "trace_filter"
    assert bool(r["last_step_dropped"]) == (with_steps and not last)


def test_the_output_says_which_variant():
    g = at.compute_gpu_idle(read_chrome_trace(TF0))
    assert at.describe_gpu_idle(g) == at.GPU_IDLE_NOTE.format(last=at.GPU_IDLE_LAST_DROPPED)
    g = at.compute_gpu_idle(read_chrome_trace(TF0), include_last_step=True)
    assert at.describe_gpu_idle(g) == at.GPU_IDLE_NOTE.format(last=at.GPU_IDLE_LAST_KEPT)
    # No ProfilerStep: every kernel counts, and the note says the result is less sure.
    g = at.compute_gpu_idle(read_chrome_trace(ALEXNET))
    assert at.GPU_IDLE_FEW_STEPS in at.describe_gpu_idle(g)


def test_profile_summary_prints_htas_figures(tmp_path):
    def summary(*extra):
        proc = subprocess.run(["debugkit", "profile-summary", str(TF1), *extra], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    s = json.loads(summary("--json"))
    assert round(100 * s["gpu"]["idle_fraction"], 2) == 54.72
    assert s["gpu"]["idle_definition"] == "hta" and s["gpu"]["last_step_dropped"] is True
    assert s["gpu"]["devices"][0]["events"] > 0
    assert "GPU idle: 54.72%" in summary()
    assert "GPU idle: 52.89%" in summary("--include-last-step")
