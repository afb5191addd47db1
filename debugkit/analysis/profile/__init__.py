"""Aggregate sampled profiles: self/total time per function, the flame tree with small
frames folded, the step breakdown (data / forward / backward / optimizer) and the
difference between two profiles.

Everything here is a pure function of a :class:`~debugkit.io.profiles.SampledProfile`
and works on its unique stacks with numpy (a row per distinct stack, never per sample).

Vocabulary: a *sample* is one stack taken by the profiler; a frame's *self* samples are
those where it is the innermost frame (the code running), its *total* samples those
where it is anywhere on the stack (a recursive function counts once per sample).
Fractions are of all samples of the selected threads, idle samples included.


Modules (each section of what was one module; the names callers use are re-exported here,
so ``from debugkit.analysis.profile import compute_flame_tree`` keeps working):

- :mod:`.selection` -- ``Selection``, ``select``: per-stack totals of the chosen threads
- :mod:`.idle` -- ``IDLE_LEAVES``, ``idle_keys``, ``idle_stacks``: samples of waiting threads
- :mod:`.functions` -- ``compute_function_table``: self/total samples per frame or function
- :mod:`.flame` -- ``compute_flame_tree`` (small frames folded), ``frame_package``, search
- :mod:`.steps` -- ``STEP_RULES``, ``compute_step_breakdown``, ``compute_step_phases``,
  ``compute_loop_flame_tree``
- :mod:`.workers` -- ``compute_worker_hotspots``: what DataLoader workers spend time in
- :mod:`.paths` -- ``display_path``: file paths as a reader wants them shown
- :mod:`.data_wait` -- ``describe_breakdown``, ``detect_data_wait`` (the data_wait finding)
- :mod:`.diff` -- ``compute_profile_diff``, ``compute_diff_tree``: two profiles compared
- :mod:`.summary` -- ``summarize_profile`` (``debugkit profile --summary``), sample counts
"""

from __future__ import annotations

from .data_wait import (
    describe_breakdown,
    detect_data_wait,
)
from .diff import (
    compute_diff_tree,
    compute_profile_diff,
)
from .flame import (
    DEFAULT_FOLD,
    FOLDED_LABEL,
    compute_flame_tree,
    frame_package,
    match_frames,
    search_summary,
)
from .functions import (
    compute_function_table,
)
from .idle import (
    IDLE_LEAVES,
    idle_keys,
    idle_stacks,
)
from .paths import (
    display_path,
    display_paths_in,
    frame_package_path,
)
from .selection import (
    Selection,
    select,
)
from .steps import (
    OTHER,
    STEP_PHASES,
    STEP_RULES,
    compute_loop_flame_tree,
    compute_step_breakdown,
    compute_step_phases,
)
from .summary import (
    MSG_COUNT_AGREES,
    MSG_COUNT_LAUNCHER,
    MSG_COUNT_UNEXPLAINED,
    MSG_COUNT_UNEXPLAINED_EXTRA,
    compute_idle_summary,
    explain_sample_count,
    summarize_profile,
    thread_rows,
)
from .workers import (
    FEW_SAMPLES,
    MSG_FEW_SAMPLES,
    MSG_WORKER_TOP,
    MSG_WORKERS_VIEW,
    compute_worker_hotspots,
    describe_worker_top,
)
