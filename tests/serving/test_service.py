"""A real HTTP inference service recorded by debugkit.serve: examples/serve_leak.py runs as
its own process on a free loopback port, this test drives it with the bounded load
generator, stops it with SIGTERM, and runs ``debugkit diagnose --json`` and ``debugkit
info --json`` through the console script from another folder. The leaky service's run
names the leak (rate, route) and both bad requests (signature, capture id); the healthy
twin's run has no finding at all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from debugkit.recorder.serve import MEMORY_EVERY_ENV
from examples.serve_leak import VOCAB, load, wait_for_port

from ..conftest import ROOT, console_script

pytestmark = pytest.mark.slow  # a service process and 1,500 HTTP requests each


def _run_service(tmp_path, name: str, healthy: bool):
    out = tmp_path / name
    port_file = tmp_path / f"{name}.port"
    # the service's run lasts about a second: at debugkit.serve's default interval (50 ms)
    # that is ~20 memory readings, too few for the leak's per-route figures; the service
    # reads every 5 ms instead (~200 readings), set by the environment variable, as a
    # deployment would, so examples/serve_leak.py (and the sample run recorded by it) stays
    env = {**os.environ, "PYTHONPATH": str(ROOT), MEMORY_EVERY_ENV: "0.005"}
    cmd = [sys.executable, "-m", "examples.serve_leak", "serve", "--out", str(out),
           "--port-file", str(port_file)] + (["--healthy"] if healthy else [])
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = wait_for_port(port_file, proc)
        res = load(f"http://127.0.0.1:{port}", requests=1500, concurrency=4, healthy=healthy)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out, res


def _cli(*args, cwd):
    p = subprocess.run([console_script(), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_diagnose_names_the_leak_and_the_bad_requests_of_a_real_service(tmp_path):
    run_dir, res = _run_service(tmp_path, "svc", healthy=False)
    assert res["statuses"] == {200: 1498, 500: 2}
    err_id, nan_id = res["failure_ids"]  # the service answered with the capture ids
    assert err_id.endswith("-error") and nan_id.endswith("-nonfinite")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    doc = _cli("diagnose", run_dir, "--json", cwd=elsewhere)
    by_kind = {}
    for f in doc["findings"]:
        by_kind.setdefault(f["kind"], []).append(f)
    (leak,) = by_kind["request_memory_leak"]
    ev = leak["evidence"]
    # every /v1/generate output kept: 8-64 tokens x 512 logits x 4 bytes, ~72 KiB on average,
    # half the requests: ~36 KiB a request, ~35 MiB per 1,000 requests
    assert 15 << 20 < ev["bytes_per_1000_requests"] < 80 << 20
    # the route that keeps memory: the traffic alternates the two routes request by request,
    # so a regression on route counts can hardly tell them apart, and each request's own
    # change is used (retained_method "own_changes" in the runs seen); memory is read about every 5 ms of a ~1 s run
    # (memory_every_s), ~200 readings, where glibc's heap steps make that mean noisy (in 1 of
    # 7 runs /v1/score's came out higher). What must hold: a route named is never the wrong one
    kept = ev["retained_bytes_per_request"]
    assert ev["retained_by"] == "route" and set(kept) == {"/v1/generate", "/v1/score"}, ev
    assert ev["retained_method"] in ("own_changes", "regression")
    assert ev["leaking_group"] in ("/v1/generate", None)
    if ev["leaking_group"]:
        assert "requests to /v1/generate keep" in leak["message"]
    assert ev["requests_to_threshold"] > 0 and ev["threshold"] == 0.75
    assert "per 1,000 requests" in leak["message"]
    (bad,) = by_kind["request_error"]
    assert bad["evidence"]["error_type"] == "IndexError" and bad["evidence"]["failure"] == err_id
    assert bad["evidence"]["signature"].startswith("input_ids:int64[1,")
    assert err_id in bad["message"] and "index out of range" in bad["message"]
    (nan,) = by_kind["request_nonfinite"]
    assert nan["evidence"]["failure"] == nan_id
    assert nan["evidence"]["signature"].endswith(";temperature:float32[]")
    (fb,) = by_kind["fallback_rate"]  # the response cache answered the repeated prompts
    # 59 repeated prompts, each an earlier prompt drawn at random: one whose original is still
    # being answered on another of the 4 connections misses the cache (CI, loaded: 58; ~0.6
    # such misses expected a run, more than 3 well under 1 %)
    hits = fb["evidence"]["count"]
    assert fb["evidence"]["fallback"] == "cache" and 59 - 3 <= hits <= 59
    assert set(by_kind) == {"request_memory_leak", "request_error", "request_nonfinite", "fallback_rate"}

    info = _cli("info", run_dir, "--json", cwd=elsewhere)
    assert info["kind"] == "inference" and info["status"] == "finished"
    assert info["requests"]["requests"] == 1500 and info["row_counts"]["requests"] == 1500
    assert info["requests"]["by_outcome"] == {"ok": 1498 - hits, "fallback": hits, "error": 1, "nonfinite": 1}
    assert {f["id"] for f in info["failures"]} == {err_id, nan_id}
    (cap,) = [f for f in info["failures"] if f["id"] == err_id]
    assert cap["kind"] == "request" and cap["outcome"] == "error" and cap["route"] in ("/v1/score", "/v1/generate")

    # the captured inputs hold the planted token id past the vocabulary
    from debugkit import open_run
    from debugkit.tensortree import load_tree

    rec = open_run(run_dir).failure(err_id)
    d = run_dir / "failures" / err_id
    ids = load_tree(d / "batch.safetensors", d / "batch.json")["input_ids"]
    assert int(ids.max()) == VOCAB + 7 and rec["call"] == "kwargs"


def test_the_healthy_twin_has_no_finding(tmp_path):
    run_dir, res = _run_service(tmp_path, "healthy", healthy=True)
    assert res["statuses"] == {200: 1500} and res["failure_ids"] == []
    doc = _cli("diagnose", run_dir, "--json", cwd=tmp_path)
    assert doc["findings"] == [] and doc["status"] == "finished"
