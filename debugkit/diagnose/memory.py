"""``memory_leak``, ``memory_pressure`` and ``fragmentation`` findings.

Config keys (``config["memory"]``) are those of :data:`debugkit.analysis.memory.DEFAULTS`,
e.g. ``{"gpu_threshold": 0.9, "min_growth_bytes": 64 << 20}``.
"""

from __future__ import annotations

from ..analysis.findings import Finding
from ..analysis.memory import detect_fragmentation, detect_memory_leaks, detect_memory_pressure


def collect(run, config: dict) -> list[Finding]:
    memory = run.memory()
    if not len(memory):
        return []
    capacity = run.memory_capacity()
    return (detect_memory_leaks(memory, capacity, config)
            + detect_memory_pressure(memory, capacity, config)
            + detect_fragmentation(memory, capacity, config))
