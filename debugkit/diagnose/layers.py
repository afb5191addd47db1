"""Layer-health findings: ``dead_units``, ``saturation``, ``activation_growth``,
``update_ratio``, from the layer statistics a Recorder with ``layer_stats_every=N``
wrote (runs without them give none).

``config`` keys and defaults: :data:`debugkit.analysis.layer_health.DEFAULTS`
(docs/layers.md explains each).
"""

from __future__ import annotations

from ..analysis.findings import Finding
from ..analysis.layer_health import detect_layer_findings


def collect(run, config: dict, *, stats=None, scalars=None) -> list[Finding]:
    """The run's layer-health findings (``stats``, ``scalars``: the run's tables when the
    caller has read them already)."""
    stats = run.layer_stats() if stats is None else stats
    if not len(stats):
        return []
    return detect_layer_findings(stats, run.scalars() if scalars is None else scalars, config)
