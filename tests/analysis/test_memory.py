"""Leak, pressure and fragmentation detectors on synthetic series with exact outcomes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis.memory import (
    DEFAULTS,
    GiB,
    MiB,
    compute_bands,
    config_with_defaults,
    detect_fragmentation,
    detect_leak,
    detect_memory_leaks,
    detect_memory_pressure,
    fmt_bytes,
    is_oom_failure,
    oom_failures,
    theil_sen,
    window_minima,
)
from debugkit.errors import InvalidInputError

STEPS = np.arange(300)
BASE = 1000 * MiB


def test_theil_sen_is_exact_on_a_line_and_ignores_outliers():
    x = np.arange(20.0)
    y = 3.0 * x + 7.0
    assert theil_sen(x, y) == (3.0, 7.0)
    y2 = y.copy()
    y2[[3, 11]] = [1e9, -1e9]  # two wild outliers do not move the median slope much
    slope, _ = theil_sen(x, y2)
    assert slope == pytest.approx(3.0, abs=0.35)
    assert np.isnan(theil_sen([1, 1, 1], [1, 2, 3])[0])


def test_window_minima_takes_each_windows_floor():
    steps = np.arange(12)
    vals = np.array([5, 1, 9, 7, 2, 8, 6, 6, 3, 9, 9, 0], dtype=float)
    x, y = window_minima(steps, vals, 4)
    assert x.tolist() == [1, 4, 8, 11]
    assert y.tolist() == [1, 2, 3, 0]


def test_linear_growth_exact_rate_start_and_run_out_step():
    res = detect_leak(STEPS, BASE + 4 * MiB * STEPS, capacity=24 * GiB)
    assert res["bytes_per_step"] == 4 * MiB
    assert res["start_step"] == 0
    assert res["judged_from_step"] == 30  # 10 % warm-up
    assert res["last_step"] == 299
    assert res["level_bytes"] == BASE + 4 * MiB * 299
    # (24 GiB - 2196 MiB) / 4 MiB = 5595 more steps
    assert res["steps_to_capacity"] == 5595
    assert res["oom_step"] == 299 + 5595
    assert res["noise_bytes"] == 0.0


def test_growth_then_plateau_is_not_a_leak():
    # optimizer state and the caching allocator take memory over the first third, then stop
    vals = BASE + np.minimum(STEPS, 100) * 4 * MiB
    assert detect_leak(STEPS, vals) is None


def test_smooth_rise_then_plateau_is_not_a_leak():
    vals = BASE + 800 * MiB * (1 - np.exp(-STEPS / 40))
    assert detect_leak(STEPS, vals) is None


def test_sawtooth_that_grows_is_a_leak_at_the_floor_rate():
    # activations come and go every 10 steps (+200 MiB peaks); the floor creeps by 2 MiB/step
    vals = BASE + 2 * MiB * STEPS + 200 * MiB * ((STEPS % 10) / 10)
    res = detect_leak(STEPS, vals)
    assert res["bytes_per_step"] == 2 * MiB
    assert 0 <= res["start_step"] <= 10  # within one tooth of the true start


def test_sawtooth_that_does_not_grow_is_not_a_leak():
    vals = BASE + 200 * MiB * ((STEPS % 10) / 10)
    assert detect_leak(STEPS, vals) is None


@pytest.mark.parametrize("seed", range(10))
def test_noise_is_not_a_leak(seed):
    rng = np.random.default_rng(seed)
    vals = BASE + rng.normal(0, 50 * MiB, len(STEPS))
    assert detect_leak(STEPS, vals) is None


def test_noisy_growth_is_found_with_a_close_rate():
    rng = np.random.default_rng(1)
    vals = BASE + 2 * MiB * STEPS + rng.normal(0, 20 * MiB, len(STEPS))
    res = detect_leak(STEPS, vals)
    assert res["bytes_per_step"] == pytest.approx(2 * MiB, rel=0.05)
    assert res["start_step"] <= 15


def test_leak_that_starts_late_is_reported_at_its_own_rate_and_start():
    vals = BASE + np.maximum(0, STEPS - 150) * 3 * MiB
    res = detect_leak(STEPS, vals)
    assert res["bytes_per_step"] == 3 * MiB
    assert res["start_step"] == 150


def test_warm_up_jump_then_leak():
    vals = np.where(STEPS < 5, 500 * MiB, BASE) + np.maximum(0, STEPS - 100) * 3 * MiB
    res = detect_leak(STEPS, vals)
    assert res["bytes_per_step"] == 3 * MiB
    assert res["start_step"] == 100


def test_small_growth_under_the_byte_threshold_is_ignored():
    vals = BASE + 0.05 * MiB * STEPS  # 13.5 MiB over the judged span: under 32 MiB, under 2 %
    assert detect_leak(STEPS, vals) is None
    assert detect_leak(STEPS, vals, config={"min_growth_bytes": 8 * MiB}) is None  # 2 % = 20 MiB
    res = detect_leak(STEPS, vals, config={"min_growth_bytes": 8 * MiB, "min_growth_frac": 0.01})
    assert res["bytes_per_step"] == pytest.approx(0.05 * MiB)


def test_too_few_steps_is_not_judged():
    assert detect_leak(np.arange(20), BASE + 50 * MiB * np.arange(20)) is None


def test_nan_rows_and_unsorted_steps_are_handled():
    order = np.random.default_rng(0).permutation(len(STEPS))
    vals = (BASE + 4 * MiB * STEPS).astype(float)
    vals[[7, 77]] = np.nan
    res = detect_leak(STEPS[order], vals[order])
    assert res["bytes_per_step"] == 4 * MiB


def _memory(rank_series: dict, *, cuda: dict | None = None) -> pd.DataFrame:
    rows = []
    for rank, vals in rank_series.items():
        for step, v in enumerate(vals):
            row = {"step": step, "rank": rank, "wall_time": 1000.0 + step, "device": "cpu",
                   "allocated_bytes": None, "reserved_bytes": None, "peak_bytes": None,
                   "rss_bytes": int(v)}
            if cuda and rank in cuda:
                a, r, p = cuda[rank]
                row.update(device=f"cuda:{rank}", allocated_bytes=int(a[step]),
                           reserved_bytes=int(r[step]), peak_bytes=int(p[step]))
            rows.append(row)
    df = pd.DataFrame(rows)
    for c in ("allocated_bytes", "reserved_bytes", "peak_bytes", "rss_bytes"):
        df[c] = df[c].astype("Int64")
    return df


def _capacity(host: dict, device: dict | None = None) -> pd.DataFrame:
    device = device or {}
    return pd.DataFrame({"rank": list(host), "device": ["cpu"] * len(host),
                         "device_capacity_bytes": pd.array([device.get(r) for r in host], "Int64"),
                         "host_capacity_bytes": pd.array(list(host.values()), "Int64")})


def test_detect_memory_leaks_finds_only_the_leaking_rank():
    mem = _memory({0: BASE + np.zeros(300), 1: BASE + 4 * MiB * STEPS})
    found = detect_memory_leaks(mem, _capacity({0: 24 * GiB, 1: 24 * GiB}))
    assert [(f.kind, f.rank, f.step) for f in found] == [("memory_leak", 1, 0)]
    f = found[0]
    assert f.evidence["metric"] == "rss_bytes"
    assert f.evidence["bytes_per_step"] == 4 * MiB
    assert f.evidence["oom_step"] == 5894
    assert f.severity == "warning"  # 5595 steps left, more than the run's 299
    assert "4.0 MiB per step from step 0" in f.message
    assert "run out at step 5,894" in f.message


def test_leak_close_to_capacity_is_an_error():
    mem = _memory({0: BASE + 4 * MiB * STEPS})
    (f,) = detect_memory_leaks(mem, _capacity({0: 3 * GiB}))
    # 3072 MiB - 2196 MiB = 876 MiB left, 219 steps: within another run's length
    assert f.evidence["steps_to_capacity"] == 219
    assert f.severity == "error"


def test_leak_on_gpu_allocated_memory():
    n = 300
    alloc = 2 * GiB + 8 * MiB * STEPS
    mem = _memory({0: np.full(n, BASE)}, cuda={0: (alloc, alloc + GiB, alloc + GiB)})
    (f,) = detect_memory_leaks(mem, _capacity({0: 24 * GiB}, {0: 80 * GiB}))
    assert f.evidence["metric"] == "allocated_bytes"
    assert f.evidence["bytes_per_step"] == 8 * MiB
    assert f.evidence["capacity_bytes"] == 80 * GiB


def test_memory_pressure_counts_steps_above_the_band():
    vals = np.array([5, 6, 8.5, 9, 9.6, 7, 8.2] + [6] * 13) * GiB
    mem = _memory({0: vals})
    (f,) = detect_memory_pressure(mem, _capacity({0: 10 * GiB}), {"host_threshold": 0.8})
    assert f.kind == "memory_pressure"
    assert f.evidence["steps_above"] == 4  # 8.5, 9, 9.6, 8.2 GiB > 8 GiB
    assert f.evidence["first_step"] == 2
    assert f.evidence["max_step"] == 4
    assert f.evidence["max_share"] == pytest.approx(0.96)
    assert f.severity == "error"  # 96 % >= 95 %
    assert detect_memory_pressure(mem, _capacity({0: 10 * GiB})) != []  # default 75 %
    assert detect_memory_pressure(mem, _capacity({0: 100 * GiB})) == []
    assert detect_memory_pressure(mem, None) == []  # no capacity, no band


def test_gpu_pressure_uses_reserved_memory():
    n = 30
    alloc = np.full(n, 50 * GiB)
    reserved = np.full(n, 70 * GiB)
    mem = _memory({0: np.full(n, BASE)}, cuda={0: (alloc, reserved, alloc)})
    found = detect_memory_pressure(mem, _capacity({0: 1000 * GiB}, {0: 80 * GiB}))
    assert [(f.evidence["metric"], f.evidence["steps_above"]) for f in found] == [("reserved_bytes", 30)]
    assert found[0].severity == "warning"  # 87.5 %


def test_fragmentation_when_reserved_stays_far_above_the_peak():
    n = 40
    peak = np.full(n, 20 * GiB)
    alloc = np.full(n, 15 * GiB)
    reserved = np.full(n, 50 * GiB)
    mem = _memory({0: np.full(n, BASE)}, cuda={0: (alloc, reserved, peak)})
    (f,) = detect_fragmentation(mem, _capacity({0: 1000 * GiB}, {0: 80 * GiB}))
    assert f.kind == "fragmentation"
    assert f.evidence["median_unused_share"] == pytest.approx(0.6)
    assert f.evidence["median_unused_bytes"] == 30 * GiB
    assert f.evidence["used"] == "peak_bytes"
    assert "expandable_segments" in f.message


def test_cached_activations_are_not_fragmentation():
    # end-of-step allocated is low (activations freed), but the peak fills what is reserved
    n = 40
    mem = _memory({0: np.full(n, BASE)},
                  cuda={0: (np.full(n, 10 * GiB), np.full(n, 50 * GiB), np.full(n, 48 * GiB))})
    assert detect_fragmentation(mem, _capacity({0: 1000 * GiB}, {0: 80 * GiB})) == []


def test_small_reserved_pool_is_not_reported_as_fragmentation():
    n = 40
    mem = _memory({0: np.full(n, BASE)},
                  cuda={0: (np.full(n, GiB // 8), np.full(n, GiB // 2), np.full(n, GiB // 8))})
    assert detect_fragmentation(mem, _capacity({0: 1000 * GiB}, {0: 80 * GiB})) == []


def test_cpu_runs_get_no_fragmentation_finding():
    mem = _memory({0: BASE + np.zeros(40)})
    assert detect_fragmentation(mem, _capacity({0: 24 * GiB})) == []


@pytest.mark.parametrize("bad", [{"gpu_treshold": 0.9}, {"nope": 1}])
def test_unknown_config_keys_are_refused(bad):
    with pytest.raises(InvalidInputError, match=r"memory config key .* expected one of"):
        config_with_defaults(bad)


def test_compute_bands_per_rank_and_kind():
    cap = _capacity({0: 100 * GiB, 1: 100 * GiB}, {0: 80 * GiB})
    b = compute_bands(cap, {"gpu_threshold": 0.9})
    assert b.to_dict("records") == [
        {"rank": 0, "kind": "device", "capacity_bytes": 80 * GiB, "warn_bytes": 72 * GiB, "threshold": 0.9},
        {"rank": 0, "kind": "host", "capacity_bytes": 100 * GiB, "warn_bytes": 75 * GiB, "threshold": 0.75},
        {"rank": 1, "kind": "host", "capacity_bytes": 100 * GiB, "warn_bytes": 75 * GiB, "threshold": 0.75},
    ]
    assert DEFAULTS["gpu_threshold"] == 0.80 and DEFAULTS["host_threshold"] == 0.75


@pytest.mark.parametrize("rec,expected", [
    ({"error_type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2.00 GiB"}, True),
    ({"error_type": "RuntimeError", "message": "[enforce fail at alloc_cpu.cpp:127] err == 0. "
                                               "DefaultCPUAllocator: can't allocate memory"}, True),
    ({"error_type": "MemoryError", "message": ""}, True),
    ({"error_type": "RuntimeError", "message": "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling"}, True),
    ({"error_type": "IndexError", "message": "Target 12 is out of bounds."}, False),
    ({"error_type": None, "message": None}, False),
])
def test_is_oom_failure(rec, expected):
    assert is_oom_failure(rec) is expected


def test_oom_failures_keeps_exception_captures_only():
    fs = [{"kind": "exception", "error_type": "OutOfMemoryError", "message": "x", "id": "a"},
          {"kind": "nonfinite", "error_type": None, "message": "out of memory?", "id": "b"},
          {"kind": "exception", "error_type": "ValueError", "message": "bad", "id": "c"}]
    assert [f["id"] for f in oom_failures(fs)] == ["a"]


@pytest.mark.parametrize("n,text", [(0, "0 B"), (512, "512 B"), (1536, "1.5 KiB"),
                                    (5 * MiB, "5.0 MiB"), (3 * GiB, "3.0 GiB"), (-2 * MiB, "-2.0 MiB"),
                                    (None, "?"), (float("nan"), "?")])
def test_fmt_bytes(n, text):
    assert fmt_bytes(n) == text
