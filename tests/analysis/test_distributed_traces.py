"""HTA-style trace analysis on hand-built chrome traces of three ranks (exact numbers)."""

from __future__ import annotations

import gzip
import json

import pytest

from debugkit.analysis import distributed_traces as at
from debugkit.errors import InvalidInputError
from debugkit.io.rank_traces import read_rank_trace, read_rank_traces, stack_events

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def gpu_trace(rank: int, lag_us: float, *, world=3) -> dict:
    ev, corr = [], 0

    def kernel(name, ts, dur, stream, launch_ts):
        nonlocal corr
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch_ts,
                   "dur": 5, "pid": 1, "tid": 1, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0,
                   "tid": stream, "args": {"stream": stream, "correlation": corr}})

    for k in (1, 2):
        base = 1000.0 * k
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": base,
                   "dur": 1000, "pid": 1, "tid": 1})
        kernel("ampere_sgemm_128x64_nn", base + 100, 400, 7, base + 50)
        kernel(NCCL, base + 400 + lag_us, 500 - lag_us, 20, base + 60)
        kernel("ncclKernel_Broadcast_RING_LL_Sum_int8_t", base + 950, 5, 20, base + 70)
        kernel("Memcpy DtoH (Device -> Pinned)", base + 960, 20, 7, base + 80)
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank,
                                                    "world_size": world},
            "traceEvents": ev}


@pytest.fixture
def three_ranks(tmp_path):
    paths = []
    for r, lag in ((0, 0.0), (1, 0.0), (2, 300.0)):
        p = tmp_path / f"rank{r}.pt.trace.json"
        p.write_text(json.dumps(gpu_trace(r, lag)))
        paths.append(p)
    return stack_events(read_rank_traces(paths))


def test_reader_classifies_device_events(three_ranks):
    ev = three_ranks[three_ranks["rank"] == 0]
    kinds = ev.groupby("kind").size().to_dict()
    assert kinds == {"comm": 4, "compute": 2, "memory": 2, "step": 2, "other": 8}
    assert ev.loc[ev["kind"] == "comm", "stream"].unique().tolist() == [20]
    assert sorted(ev["iteration"].unique().tolist()) == [1, 2]


def test_late_start_metric_exact(three_ranks):
    metric, meta = at.compute_late_start_metric(three_ranks)
    assert meta["mean_iter_us"] == 1000.0 and meta["t_min_us"] == 1000.0
    assert meta["collective"] == NCCL and meta["stream"] == 20 and meta["iterations"] == [1, 2]
    assert metric["normalized_start_time"].round(6).tolist() == [0.4, 0.4, 0.7, 1.4, 1.4, 1.7]
    assert metric["lag"].round(6).tolist() == [0.0, 0.0, 0.3, 0.0, 0.0, 0.3]
    assert metric["duration"].round(6).tolist() == [0.5, 0.5, 0.2, 0.5, 0.5, 0.2]


def test_potential_stragglers_and_finding(three_ranks):
    metric, _ = at.compute_late_start_metric(three_ranks)
    cand = at.compute_potential_stragglers(metric)
    assert cand["rank"].tolist()[0] == 2
    assert cand.set_index("rank")["late_iterations"].to_dict() == {0: 2, 1: 2, 2: 2}
    assert cand["potential"].sum() == 2
    [f] = at.detect_trace_stragglers(three_ranks)
    assert (f.kind, f.rank, f.step) == ("straggler", 2, None)
    ev = f.evidence
    assert ev["source"] == "profiler_trace"
    assert ev["median_lag"] == pytest.approx(0.3) and ev["median_lag_ms"] == pytest.approx(0.3)
    assert (ev["late_iterations"], ev["iterations"]) == (2, 2)
    assert ev["overlap_pct"] == pytest.approx(0.0)


def test_comm_comp_overlap_exact(three_ranks):
    ov = at.compute_comm_comp_overlap(three_ranks).set_index("rank")
    # rank 0: all-reduce [1400, 1900) and [2400, 2900), broadcasts 2 x 5 us; gemm [1100, 1500), [2100, 2500)
    assert ov.loc[0, "comm_us"] == 1010.0 and ov.loc[0, "comp_us"] == 800.0
    assert ov.loc[0, "overlap_us"] == 200.0
    assert ov.loc[0, "overlap_pct"] == pytest.approx(100 * 200 / 1010)
    assert ov.loc[2, "overlap_pct"] == 0.0


def test_balanced_traces_give_no_finding(tmp_path):
    paths = []
    for r in range(3):
        p = tmp_path / f"r{r}.json"
        p.write_text(json.dumps(gpu_trace(r, 0.0)))
        paths.append(p)
    assert at.detect_trace_stragglers(stack_events(read_rank_traces(paths))) == []


def test_kernel_counts_in_the_iteration_of_its_launch(tmp_path):
    doc = gpu_trace(0, 0.0)
    # A kernel that runs after its step ended on the CPU side but was launched inside it.
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2990, "dur": 5,
         "pid": 1, "tid": 1, "args": {"correlation": 999}},
        {"ph": "X", "cat": "kernel", "name": "late_gemm", "ts": 3100, "dur": 50, "pid": 0,
         "tid": 7, "args": {"stream": 7, "correlation": 999}}]
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    ev = read_rank_trace(p).events
    assert ev.loc[ev["name"] == "late_gemm", "iteration"].item() == 2


def test_merge_and_intersection_helpers():
    s, e = at.merge_intervals([5, 0, 2, 10], [6, 3, 4, 12])
    assert s.tolist() == [0, 5, 10] and e.tolist() == [4, 6, 12]
    assert at.intersection_length([0, 10], [5, 20], [3, 12], [11, 30]) == 2 + 1 + 8


@pytest.mark.parametrize("content,match", [
    (b"{not json", "invalid JSON"),
    (b'{"traceEvents": 3}', "no traceEvents list"),
    (b'{"traceEvents": []}', "no distributedInfo.rank"),
    (b'{"traceEvents": [], "distributedInfo": {"rank": -1}}', "no distributedInfo.rank"),
    (b"\x1f\x8b\x08\x00garbage", "bad gzip data"),
])
def test_bad_trace_files(tmp_path, content, match):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(InvalidInputError, match=match):
        read_rank_trace(p)
    assert p.read_bytes() == content  # never changed


def test_two_files_for_one_rank(tmp_path):
    for n in ("a.json", "b.json"):
        (tmp_path / n).write_text(json.dumps(gpu_trace(1, 0.0)))
    with pytest.raises(InvalidInputError, match="rank 1 already read from"):
        read_rank_traces([tmp_path / "a.json", tmp_path / "b.json"])
