"""Findings of an inference run (``debugkit.serve``): ``request_memory_leak``,
``memory_grows_with_input``, ``latency_regression``, ``request_error``,
``request_nonfinite`` and ``fallback_rate``.

Config keys (``config["serving"]``) are those of :data:`debugkit.analysis.serving.DEFAULTS`,
e.g. ``{"host_threshold": 0.9, "latency_ratio": 2.0}``; without them the memory thresholds
are the run's own (the manifest's ``serve`` object: ``gpu_mem_threshold``,
``host_mem_threshold``). A training run has no requests and gets none of these.
"""

from __future__ import annotations

from .. import format as fmt
from ..analysis.findings import Finding
from ..analysis.serving import (
    detect_failing_signatures,
    detect_fallbacks,
    detect_latency_regression,
    detect_request_memory,
)


def run_config(run, config: dict) -> dict:
    """``config`` over the run's recorded thresholds (the manifest's ``serve`` object)."""
    serve = run.manifest.get("serve") or {}
    cfg: dict = {}
    for key, field in (("gpu_threshold", "gpu_mem_threshold"), ("host_threshold", "host_mem_threshold")):
        v = serve.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1:
            cfg[key] = float(v)
    cfg.update(config or {})
    return cfg


def collect(run, config: dict) -> list[Finding]:
    if fmt.run_kind(run.manifest) != fmt.KIND_INFERENCE:
        return []
    requests = run.requests()
    if not len(requests):
        return []
    cfg = run_config(run, config)
    failures = [f for f in run.failures() if f.get("kind") == "request"]
    return (detect_failing_signatures(requests, failures, cfg)
            + detect_request_memory(requests, run.memory_capacity(), cfg)
            + detect_latency_regression(requests, cfg)
            + detect_fallbacks(requests, cfg))
