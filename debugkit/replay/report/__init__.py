"""Turn what the replay's child saw into the report: reproduced?, checks, culprit.

Pure functions over plain dicts (no torch), so each rule is tested on its own.

The report (``debugkit replay --json``)::

    {"failure", "device", "reproduced", "same_error",
     "original": {"type", "message", "step"},
     "replay": {"type", "message", "seconds"} | null,
     "culprit": {"module", "op", "input", "sample_index", "dataset_index", "detail"},
     "checks": [{"name", "ok", "detail"}, ...],
     "culprit_positions": [...], "ran": {"mode", "detail"}, "cross_check": {...} | null,
     "code": [...], "notes": [...]}

``culprit_positions`` are the offending positions within the culprit sample of
``culprit.input`` (its NaN features, the column an out-of-range index came from), for
display.

A check's ``ok`` is true (passed), false (found the problem) or null (could not be
judged, e.g. the replay stopped before reaching it, or it does not apply).

Modules (one per section; the names callers use are re-exported here):

- :mod:`.text` -- paths, sample phrases, error messages normalized and classified
- :mod:`.outcome` -- the original failure and what the replay did: ``is_request``,
  ``original_of``, ``replay_of``, ``judge``
- :mod:`.checks` -- ``CHECKS``, one ``check_*`` per rule, ``build_checks``, ``pick_culprit``
- :mod:`.assemble` -- ``build_report``, ``crash_of``, ``merge_partial``, ``summarize``
"""

from __future__ import annotations

from .assemble import (
    build_report,
    crash_of,
    last_frame,
    merge_partial,
    summarize,
)
from .checks import (
    CHECK_FUNCS,
    CHECKS,
    CULPRIT_ORDER,
    build_checks,
    check_backward,
    check_captured_state,
    check_dtype_device,
    check_embeddings,
    check_forward,
    check_inputs,
    check_labels,
    check_shapes,
    pick_culprit,
    public_checks,
)
from .outcome import (
    EXITED_TYPE,
    NONFINITE_TYPE,
    REQUEST_KIND,
    TIMEOUT_TYPE,
    is_request,
    judge,
    nonfinite_message,
    original_of,
    replay_of,
)
from .text import (
    DTYPE_DEVICE_PATTERNS,
    SHAPE_PATTERNS,
    dataset_index,
    fmt_path,
    is_dtype_device_error,
    is_shape_error,
    normalize_message,
    sample_phrase,
)
