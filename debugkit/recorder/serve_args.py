"""The arguments of :func:`debugkit.serve` checked (:mod:`debugkit.recorder.serve`), with
their defaults: the capture budget and the memory-reading interval."""

from __future__ import annotations

import math
import os

from ..errors import InvalidInputError

#: Default capture budget: the first ``per_kind`` failing requests of each (outcome,
#: error type) are captured, and at most ``per_minute`` captures are written in any
#: 60 seconds; the rest are counted in ``capture_dropped`` events.
DEFAULT_CAPTURE_BUDGET = {"per_kind": 10, "per_minute": 30}
#: Memory is read before and after a request when at least this long has passed since the
#: last reading: 20 readings a second (every request of a service slower than 50 ms, about
#: one in fifty of a 1 ms one; the training Recorder samples RSS every 100 ms). Each reading
#: is a system call (``/proc/self/statm``) or a walk of the CUDA allocator's statistics,
#: ~9 us with the caches a model leaves behind: at 5 ms (before) every ~20 ms request paid
#: two (~0.4 % of it) and a ~1 ms one read in one request of five (~1.3 %). A leak over
#: hours still gets 72,000 readings an hour; the leak findings work on the readings there
#: are (docs/serving.md#request_memory_leak).
DEFAULT_MEMORY_EVERY_S = 0.05
#: The environment variable that sets ``memory_every_s`` where the code does not pass it
#: (a deployment choosing its own interval without a code change; a test's short service)
MEMORY_EVERY_ENV = "DEBUGKIT_SERVE_MEMORY_EVERY_S"
MSG_MEMORY_EVERY = "{where}={value!r}: expected a number of seconds >= 0 (0: every request)"

MSG_THRESHOLD = "{name}={value!r}: expected a share of memory in (0, 1]"
MSG_BUDGET = ("capture_budget={value!r}: expected a dict with 'per_kind' and/or 'per_minute' "
              "(integers >= 0)")


def check_threshold(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise InvalidInputError(MSG_THRESHOLD.format(name=name, value=value))
    return float(value)


def memory_every(value) -> float:
    """``memory_every_s`` checked; None: the environment's :data:`MEMORY_EVERY_ENV`, else
    :data:`DEFAULT_MEMORY_EVERY_S`."""
    where = "memory_every_s"
    if value is None:
        text = os.environ.get(MEMORY_EVERY_ENV, "").strip()
        if not text:
            return DEFAULT_MEMORY_EVERY_S
        where = MEMORY_EVERY_ENV
        try:
            value = float(text)
        except ValueError:
            raise InvalidInputError(MSG_MEMORY_EVERY.format(where=where, value=text)) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise InvalidInputError(MSG_MEMORY_EVERY.format(where=where, value=value))
    return float(value)


def check_budget(value) -> dict[str, int]:
    if value is None:
        return dict(DEFAULT_CAPTURE_BUDGET)
    if not isinstance(value, dict) or not set(value) <= set(DEFAULT_CAPTURE_BUDGET) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value.values()):
        raise InvalidInputError(MSG_BUDGET.format(value=value))
    return {**DEFAULT_CAPTURE_BUDGET, **value}
