"""Compare two runs: what differs before step 0, where they diverge, findings in one only.

Every function here is pure: it takes what :func:`debugkit.io.compare_facts.read_compare_facts`
reads from each run (dicts and DataFrames) and returns rows, DataFrames and
:class:`~debugkit.analysis.findings.Finding` objects. ``run`` is the run under
suspicion (A), ``base`` the run that worked (B); bands are learned from the base.

A fact that one of the runs did not record (an older run without ``data.json``, a run
recorded before every installed distribution was listed) is ``unknown``, never
``equal``. Row ``status`` values are :data:`STATUSES`.

The divergence band
-------------------
For each series (a loss key, a layer's gradient norm) the base's step-to-step noise is
``sigma = 1.4826 * MAD(diff(x)) / sqrt(2)``: the median absolute deviation of its first
differences, scaled to a standard deviation and divided by sqrt 2 because a difference
of two noisy points has twice the variance of one. The band at step ``t`` is
``base[t] +- band_sigmas * sigma`` (never narrower than ``rel_floor * |base[t]|``).
Gradient norms are compared in log space (their noise is multiplicative); losses as they
are. The run diverges at the first common step where it is outside the band and stays
outside for ``persist`` consecutive common steps (or until one of the runs ends).

Modules (one per section of the comparison; the names callers use are re-exported here):

- :mod:`.rows` -- ``STATUSES`` and the row every section builds
- :mod:`.config` -- ``flatten_config``, ``diff_config``
- :mod:`.environment` -- ``ENV_FIELDS``, ``diff_environment`` (hardware, packages, pip check)
- :mod:`.code` -- ``diff_code``: the model factory's source
- :mod:`.data` -- ``diff_batch_spec``, ``diff_datasets``, ``diff_topology``
- :mod:`.divergence` -- ``DEFAULTS``, ``compute_band``, ``series_band``, ``compute_divergence``,
  ``divergence_finding``, ``following_event``
- :mod:`.only_in` -- ``findings_only_in``: findings one run has and the other does not
- :mod:`.overall` -- ``compare_runs``: every section of two runs, the entry point
"""

from __future__ import annotations

from .code import (
    diff_code,
)
from .config import (
    diff_config,
    flatten_config,
)
from .data import (
    diff_batch_spec,
    diff_datasets,
    diff_topology,
)
from .divergence import (
    DEFAULTS,
    compute_band,
    compute_divergence,
    divergence_finding,
    following_event,
    noise_sigma,
    series_band,
)
from .environment import (
    ENV_FIELDS,
    diff_environment,
)
from .only_in import (
    findings_only_in,
)
from .overall import (
    compare_runs,
)
from .rows import (
    DIFFERS,
    EQUAL,
    ONLY_BASE,
    ONLY_RUN,
    STATUSES,
    UNKNOWN,
)
