"""debugkit.diagnose on inference runs: the serving source on the bundled sample (its
exact findings), the run's own thresholds and their override, training runs untouched,
and a service killed with SIGKILL read back as crashed with the rows it flushed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

import debugkit
from debugkit import open_run

from ..conftest import ROOT, SAMPLE_RUNS


def test_the_serve_leak_sample():
    run = open_run(SAMPLE_RUNS / "serve-leak")
    assert run.kind == "inference" and run.status == "finished"
    found = debugkit.diagnose(run)
    assert [f.kind for f in found] == ["request_memory_leak", "fallback_rate", "request_error",
                                       "request_nonfinite"]
    leak, fb, err, nan = found
    assert leak.severity == "warning" and leak.evidence["threshold"] == 0.75
    assert 30 << 20 < leak.evidence["bytes_per_1000_requests"] < 45 << 20  # 37.4 MiB recorded
    assert next(iter(leak.evidence["retained_bytes_per_request"])) == "/v1/generate"
    assert err.evidence["failure"] == "r0-000-req0000310-error" and err.evidence["error_type"] == "IndexError"
    assert err.evidence["signature"] == "input_ids:int64[1,32]" and err.step == 310
    assert nan.evidence["failure"] == "r0-000-req0000707-nonfinite"
    assert fb.evidence == {"fallback": "cache", "count": 59, "rate": 59 / 1500, "error_types": {},
                           "top_signature": "input_ids:int64[1,8];temperature:float32[]",
                           "top_signature_rate": 14 / 155}
    # request captures are the serving source's, not training step failures
    assert not [f for f in found if f.kind == "step_failure"]


def test_the_runs_thresholds_and_their_override():
    run = open_run(SAMPLE_RUNS / "serve-leak")
    run.manifest["serve"]["host_mem_threshold"] = 0.5
    (leak,) = [f for f in debugkit.diagnose(run) if f.kind == "request_memory_leak"]
    assert leak.evidence["threshold"] == 0.5 and "50% host threshold" in leak.message
    (leak,) = [f for f in debugkit.diagnose(run, {"serving": {"host_threshold": 0.9}})
               if f.kind == "request_memory_leak"]
    assert leak.evidence["threshold"] == 0.9
    from debugkit import InvalidInputError

    with pytest.raises(InvalidInputError, match="serving config key 'gpu'"):
        debugkit.diagnose(run, {"serving": {"gpu": 0.5}})


def test_training_runs_get_no_serving_finding():
    from debugkit.diagnose import serving

    for name in ("digits-bad-label", "memory-leak"):
        assert serving.collect(open_run(SAMPLE_RUNS / name), {}) == []


def test_a_killed_service_reads_as_crashed_with_its_flushed_requests(tmp_path):
    from examples.serve_leak import load, wait_for_port

    out, port_file = tmp_path / "svc", tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "examples.serve_leak", "serve", "--out", str(out),
                             "--port-file", str(port_file)], cwd=ROOT)
    try:
        port = wait_for_port(port_file, proc)
        res = load(f"http://127.0.0.1:{port}", requests=200, concurrency=2)
        assert sum(res["statuses"].values()) == 200
        deadline = time.monotonic() + 120  # the writer appends every 0.5 s (the example's flush_every_s)
        while len(open_run(out).requests()) < 200 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    run = open_run(out)
    assert run.status == "crashed" and run.kind == "inference"
    df = run.requests()
    assert sorted(df["request"]) == list(range(200))
