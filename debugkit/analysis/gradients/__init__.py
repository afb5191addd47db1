"""Gradient and loss analyses: NaN/Inf, explosions, vanishing and dead layers, loss spikes,
and what the Gradients page shows around them.

Every function here is pure: it takes the DataFrames that :meth:`debugkit.Run.grad_norms`
and :meth:`debugkit.Run.scalars` return (or the :class:`~.matrix.GradMatrix` built from
them) and returns findings or arrays. Thresholds come from a ``config`` dict whose keys
and defaults are :data:`.config.DEFAULTS` (documented in ``docs/gradients.md``).

All windows count *logged* steps (rows), so a run recorded with ``log_every=10`` has a
20-step window spanning 200 training steps.

Modules (import from the one that owns the idea; this package re-exports nothing):

- :mod:`.config` -- ``DEFAULTS``, ``resolve_config``, the config messages
- :mod:`.matrix` -- ``GradMatrix``, ``pivot_grad_norms``, ``TOTAL`` (the total row's name)
- :mod:`._window` -- trailing-window helpers the detectors share
- :mod:`.losses` -- ``loss_keys``, ``detect_nonfinite_loss``, ``detect_loss_spikes``
- :mod:`.detectors` -- the gradient detectors and ``detect_gradient_findings`` (every
  gradient and loss finding of a run: the entry point :mod:`debugkit.diagnose` calls)
- :mod:`.heatmap` -- ``HeatmapBins``, ``compute_heatmap_bins``
- :mod:`.clipping` -- ``ClipWhatIf``, ``compute_clip_whatif``
- :mod:`.steps` -- ``compute_step_details``, ``scalars_at_step``, ``nearest_failure``
- :mod:`.layers` -- ``select_layers``, ``group_rows``, ``module_prefixes``, ``default_line_layers``
"""
