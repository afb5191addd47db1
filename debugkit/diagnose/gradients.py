"""Gradient and loss findings: ``nonfinite_loss``, ``nonfinite_grad``, ``exploding_grad``,
``vanishing_grad``, ``dead_layer``, ``loss_spike``.

``config`` keys and defaults: :data:`debugkit.analysis.gradients.config.DEFAULTS`
(``docs/gradients.md`` explains each).
"""

from __future__ import annotations

from ..analysis.findings import Finding
from ..analysis.gradients.detectors import detect_gradient_findings, link_loss_origins


def collect(run, config: dict, *, matrices: dict | None = None, scalars=None) -> list[Finding]:
    """The run's gradient and loss findings.

    Parameters
    ----------
    matrices, scalars : optional
        ``pivot_grad_norms(run.grad_norms())`` and ``run.scalars()`` when the caller has
        already read them (the dashboard's caches); read from ``run`` otherwise.
    """
    grads = run.grad_norms() if matrices is None else None
    found = detect_gradient_findings(grads, run.scalars() if scalars is None else scalars, config,
                                     matrices=matrices)
    if any(f.kind in ("nonfinite_loss", "nonfinite_grad") for f in found):
        found = link_loss_origins(found, run.failures())
    return found
