"""Chrome-trace analyses: torch's own key_averages as the oracle, and a Kineto-shaped GPU
trace built in the test with exact numbers."""

from __future__ import annotations

import json

import pytest

from debugkit.analysis import trace as at
from debugkit.io.chrome_trace import read_chrome_trace

from ..conftest import SAMPLE_RUNS


def test_operator_table_equals_torch_key_averages(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile

    from examples.digits import build_model

    torch.manual_seed(0)
    model = build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    f = tmp_path / "t.json"
    prof.export_chrome_trace(str(f))
    ours = at.compute_operator_table(read_chrome_trace(f)).set_index("name")
    theirs = {e.key: e for e in prof.key_averages()}
    assert set(theirs) <= set(ours.index)
    for key, e in theirs.items():
        r = ours.loc[key]
        assert r["calls"] == e.count, key
        # the trace rounds to 1 ns; key_averages sums the exact values
        assert r["self_cpu_ms"] * 1e3 == pytest.approx(e.self_cpu_time_total, abs=0.01 * r["calls"] + 1e-6), key
        assert r["cpu_total_ms"] * 1e3 == pytest.approx(e.cpu_time_total, abs=0.01 * r["calls"] + 1e-6), key
    by_shapes = at.compute_operator_table(read_chrome_trace(f), by_shapes=True)
    mm = by_shapes[by_shapes["name"] == "aten::addmm"]
    assert set(mm["input_shapes"]) == {"[[64],[32,64],[64,64],[],[]]", "[[10],[32,64],[64,10],[],[]]"}
    assert mm["calls"].sum() == ours.loc["aten::addmm", "calls"]


def ev(name, ts, dur, cat="cpu_op", pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gpu_trace(tmp_path):
    """Two steps; the step thread launches kernels on GPU 0 stream 7 (correlation ids)."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python main"}},
        ev("ProfilerStep#1", 0, 100, cat="user_annotation"),
        ev("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 20, cat="user_annotation"),
        ev("aten::linear", 20, 30),
        ev("aten::addmm", 22, 20),
        ev("cudaLaunchKernel", 25, 5, cat="cuda_runtime", correlation=11),
        ev("autograd::engine::evaluate_function: AddmmBackward0", 55, 25, cat="cpu_op"),
        ev("aten::mm", 60, 10),
        ev("cudaLaunchKernel", 62, 3, cat="cuda_runtime", correlation=12),
        ev("Optimizer.step#SGD.step", 85, 10, cat="user_annotation"),
        ev("ProfilerStep#2", 100, 100, cat="user_annotation"),
        ev("aten::linear", 110, 40),
        ev("aten::addmm", 112, 30),
        ev("cudaLaunchKernel", 115, 5, cat="cuda_runtime", correlation=13),
        ev("cudaMemcpyAsync", 160, 5, cat="cuda_runtime", correlation=14),
        # device side: GPU 0, stream 7
        ev("sgemm_kernel", 30, 40, cat="kernel", pid=0, tid=7, correlation=11, stream=7, device=0),
        ev("sgemm_kernel", 64, 10, cat="kernel", pid=0, tid=7, correlation=12, stream=7, device=0),
        ev("sgemm_kernel", 120, 20, cat="kernel", pid=0, tid=7, correlation=13, stream=7, device=0),
        ev("Memcpy HtoD", 165, 10, cat="gpu_memcpy", pid=0, tid=7, correlation=14, stream=7, device=0),
    ]
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return read_chrome_trace(f)


def test_gpu_idle_share(tmp_path):
    tr = gpu_trace(tmp_path)
    # HTA's definition: the span from the first to the last device event. By default the
    # last ProfilerStep (#2, from 100 us) is left out: only the kernels launched before it
    # (correlations 11, 12: 30-70 and 64-74 us) count, so the span 30-74 is all busy.
    r = at.compute_gpu_idle(tr).iloc[0]
    assert r["device"] == 0 and bool(r["last_step_dropped"]) and r["events"] == 2
    assert r["window_ms"] == pytest.approx(0.044)
    assert r["busy_ms"] == pytest.approx(0.044)
    assert r["idle_fraction"] == pytest.approx(0.0)
    # With the last step: span 30-175 us; busy 30-74 (44), 120-140 (20), 165-175 (10).
    r = at.compute_gpu_idle(tr, include_last_step=True).iloc[0]
    assert r["window_ms"] == pytest.approx(0.145)
    assert r["busy_ms"] == pytest.approx(0.074)
    assert r["kernel_ms"] == pytest.approx(0.064)
    assert r["idle_fraction"] == pytest.approx(1 - 74 / 145)
    assert not bool(r["last_step_dropped"])


def test_kernel_table_and_launchers(tmp_path):
    k = at.compute_kernel_table(gpu_trace(tmp_path)).set_index("name")
    assert k.loc["sgemm_kernel", "calls"] == 3
    assert k.loc["sgemm_kernel", "total_ms"] == pytest.approx(0.07)
    assert k.loc["sgemm_kernel", "max_us"] == 40
    assert k.loc["sgemm_kernel", "gpu_fraction"] == pytest.approx(70 / 80)
    assert k.loc["sgemm_kernel", "streams"] == "0:7"
    assert k.loc["sgemm_kernel", "launched_by"] == "aten::addmm"
    assert k.loc["Memcpy HtoD", "kind"] == "memory"
    assert k.loc["Memcpy HtoD", "launched_by"] == ""  # its runtime call is inside no operator


def test_cuda_time_per_operator(tmp_path):
    ops = at.compute_operator_table(gpu_trace(tmp_path)).set_index("name")
    # addmm launched the kernels of correlation 11 (40 us) and 13 (20 us) itself
    assert ops.loc["aten::addmm", "self_cuda_ms"] == pytest.approx(0.06)
    assert ops.loc["aten::linear", "self_cuda_ms"] == pytest.approx(0.0)
    assert ops.loc["aten::linear", "cuda_total_ms"] == pytest.approx(0.06)
    assert ops.loc["aten::mm", "self_cuda_ms"] == pytest.approx(0.01)
    assert ops.loc["autograd::engine::evaluate_function: AddmmBackward0", "cuda_total_ms"] == pytest.approx(0.01)
    # self CPU: linear 30 + 40 minus its addmm children 20 + 30
    assert ops.loc["aten::linear", "self_cpu_ms"] == pytest.approx(0.02)
    assert ops.loc["aten::addmm", "self_cpu_ms"] == pytest.approx((20 - 5 + 30 - 5) / 1e3)
    assert ops.loc["aten::linear", "calls"] == 2


def test_steps_breakdown(tmp_path):
    s = at.compute_trace_steps(gpu_trace(tmp_path))
    assert s["step"].tolist() == [1, 2]
    one = s.iloc[0]
    assert one["dur_ms"] == pytest.approx(0.1)
    assert one["data_ms"] == pytest.approx(0.02)
    assert one["optimizer_ms"] == pytest.approx(0.01)
    assert one["backward_ms"] == pytest.approx(0.025)
    assert one["forward_ms"] == pytest.approx(0.03)  # linear (20-50); mm sits inside backward
    assert one["other_ms"] == pytest.approx(0.1 - 0.02 - 0.01 - 0.025 - 0.03)
    two = s.iloc[1]
    assert two["forward_ms"] == pytest.approx(0.04) and two["data_ms"] == 0


def test_timeline(tmp_path):
    tr = gpu_trace(tmp_path)
    tl = at.compute_trace_timeline(tr, max_events=100, max_depth=1)
    lanes = set(tl["lane"])
    assert lanes == {"python main", "GPU 0 · stream 7"}
    cpu = tl[tl["lane_kind"] == "cpu"]
    assert cpu["depth"].max() == 1 and "aten::addmm" not in set(cpu["name"])  # depth 2
    few = at.compute_trace_timeline(tr, max_events=3)
    assert len(few) == 3 and few["dur_ms"].min() >= 0.04  # the three longest: steps and a kernel
    assert tl["start_ms"].min() == 0.0


def test_summary_contract(tmp_path):
    s = at.summarize_trace(gpu_trace(tmp_path), top=2, include_last_step=True)
    assert s["format"] == "chrome-trace" and s["events"] == 19
    assert len(s["top_self"]) == 2 and set(s["top_self"][0]) == {
        "name", "calls", "self_cpu_us", "cpu_total_us", "self_cuda_us", "cuda_total_us", "fraction"}
    assert s["gpu"]["idle_fraction"] == pytest.approx(1 - 74 / 145, abs=1e-6)
    assert s["gpu"]["top_kernels"][0]["name"] == "sgemm_kernel"
    assert {t["kind"] for t in s["threads"]} == {"cpu", "gpu"}


def test_cpu_only_sample_trace():
    from debugkit.io.run import open_run
    from debugkit.io.run_profiles import get_profile, read_entry

    tr = read_entry(get_profile(open_run(SAMPLE_RUNS / "digits-profiled"), "torch-trace"))
    steps = at.compute_trace_steps(tr)
    assert steps["step"].tolist() == [2, 3, 4]
    assert (steps[["data_ms", "forward_ms", "backward_ms", "optimizer_ms"]] > 0).all().all()
    parts = steps[["data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"]].sum(axis=1)
    assert parts.to_numpy() == pytest.approx(steps["dur_ms"].to_numpy())
    assert len(at.compute_gpu_idle(tr)) == 0 and len(at.compute_kernel_table(tr)) == 0
    ops = at.compute_operator_table(tr)
    assert ops.loc[ops["name"] == "aten::addmm", "calls"].iloc[0] == 9  # 3 Linear layers x 3 steps
