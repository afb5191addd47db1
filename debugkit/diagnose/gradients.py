"""Gradient and loss findings: ``nonfinite_loss``, ``nonfinite_grad``, ``exploding_grad``,
``vanishing_grad``, ``dead_layer``, ``loss_spike``.

``config`` keys and defaults: :data:`debugkit.analysis.gradients.config.DEFAULTS`
(``docs/gradients.md`` explains each).
"""

from __future__ import annotations

from ..analysis.findings import Finding
from ..analysis.gradients.detectors import detect_gradient_findings


def collect(run, config: dict) -> list[Finding]:
    return detect_gradient_findings(run.grad_norms(), run.scalars(), config)
