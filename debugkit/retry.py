"""Retry a call that fails with a transient (distributed) error, with backoff and jitter.

The usual use is around process-group initialisation, which happens before a
:class:`debugkit.Recorder` exists, so attempts are written straight into the run
directory::

    import debugkit, torch.distributed as dist

    debugkit.retry(lambda: dist.init_process_group("nccl"), run_dir="runs/exp1")
    rec = debugkit.Recorder("runs/exp1", model, opt)

Every attempt is one ``retry`` event of the rank (``Run.events()``), with fields
``name, attempt, attempts, ok, error_type, message, delay_s``; see
``docs/checkpoints.md``. ``import debugkit`` does not import this module's torch
dependency: the default ``on`` is resolved when :func:`retry` is called.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import format as fmt
from .errors import InvalidInputError

logger = logging.getLogger("debugkit.retry")

EVENT_KIND = "retry"
# ranks/<rank>/events-retry.jsonl: matches the reader's events-*.jsonl glob, and not the
# writer's segment pattern (events-<digits>.jsonl), so it never shifts segment numbers.
RETRY_EVENTS_FILE = f"{fmt.EVENTS_PREFIX}-retry{fmt.EVENTS_SUFFIX}"
MESSAGE_LIMIT = 2000

MSG_ATTEMPTS = "retry: attempts={value!r}: expected an integer >= 1"
MSG_DELAY = "retry: {field}={value!r}: expected a finite number >= 0"
MSG_JITTER = "retry: jitter={value!r}: expected a number in [0, 1]"
MSG_ON = "retry: on={value!r}: expected an exception class or a tuple of exception classes"
MSG_NOT_CALLABLE = "retry: fn={value!r}: expected a callable"
MSG_BOTH_SINKS = "retry: give run_dir= or recorder=, not both"
MSG_RNG = "retry: rng={value!r}: expected a random.Random (or None)"
MSG_RECORDER = "retry: recorder={value!r}: expected a debugkit.Recorder"
MSG_SLEEP = "retry: sleep={value!r}: expected a callable taking seconds"


def transient_errors() -> tuple[type[BaseException], ...]:
    """The default ``on`` of :func:`retry`: errors that a later attempt may not meet.

    ``RuntimeError, TimeoutError, ConnectionError, OSError`` plus, where this torch has
    them, ``torch.distributed.DistNetworkError``, ``DistStoreError`` and ``DistError``
    (already RuntimeErrors; listed so the intent is explicit). Without torch installed
    the built-in classes alone.
    """
    out: list[type[BaseException]] = [RuntimeError, TimeoutError, ConnectionError, OSError]
    try:
        import torch.distributed as dist
    except ImportError:  # torch missing or built without distributed
        return tuple(out)
    for name in ("DistNetworkError", "DistStoreError", "DistError"):
        cls = getattr(dist, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            out.append(cls)
    return tuple(out)


def backoff_delay(k: int, base_delay_s: float, max_delay_s: float, jitter: float,
                  rng: random.Random) -> float:
    """Seconds to wait after the ``k``-th failure (``k = 0`` for the first).

    ``d = min(max_delay_s, base_delay_s * 2**k)``, then scaled by a factor drawn
    uniformly from ``[1 - jitter, 1 + jitter]``; ``jitter=0`` gives ``d`` exactly.
    """
    try:
        d = min(max_delay_s, base_delay_s * 2.0 ** k)
    except OverflowError:
        d = max_delay_s
    if jitter:
        d *= 1.0 + rng.uniform(-jitter, jitter)
    return max(0.0, d)


def _check_number(field: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise InvalidInputError(MSG_DELAY.format(field=field, value=value))
    return float(value)


def _coerce_on(on) -> tuple[type[BaseException], ...]:
    if on is None:
        return transient_errors()
    if isinstance(on, type):
        on = (on,)
    if not isinstance(on, (tuple, list)) or not on or not all(
            isinstance(c, type) and issubclass(c, BaseException) for c in on):
        raise InvalidInputError(MSG_ON.format(value=on))
    return tuple(on)


def _rank_from_env() -> int:
    raw = os.environ.get("RANK", "")
    return int(raw) if raw.strip().isdigit() else 0


class _RunDirSink:
    """Appends ``retry`` events to ``run_dir/ranks/<rank>/events-retry.jsonl``.

    One ``write`` of a whole line per event, then a flush, so a reader never sees a
    half line except after a crash mid-write (which the reader skips).
    """

    def __init__(self, run_dir, rank: int):
        self.path = Path(run_dir) / fmt.RANKS_DIR / str(rank) / RETRY_EVENTS_FILE

    def __call__(self, kind: str, **fields: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"time": time.time(), "kind": kind, **fields}, default=repr) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()


def retry(fn: Callable, attempts: int = 3, base_delay_s: float = 2.0, on=None, *,
          args: tuple = (), kwargs: dict | None = None, max_delay_s: float = 60.0,
          jitter: float = 0.5, run_dir=None, recorder=None, name: str | None = None,
          sleep: Callable[[float], Any] = time.sleep, rng: random.Random | None = None):
    """Call ``fn(*args, **kwargs)``, retrying on transient errors; return its result.

    Parameters
    ----------
    fn : callable
        What to call; ``retry(lambda: dist.init_process_group(...))`` or pass
        ``args=`` / ``kwargs=``.
    attempts : int
        Calls at most (>= 1); ``attempts=1`` calls once and never sleeps.
    base_delay_s : float
        Wait after the first failure; it doubles after each further one.
    on : exception class or tuple of them, optional
        What is retried; default :func:`transient_errors` (``RuntimeError``,
        ``TimeoutError``, ``ConnectionError``, ``OSError`` and torch's ``DistError``
        family). Any other exception propagates at once.
    max_delay_s : float
        Cap of the un-jittered delay: after failure ``k`` (0-based) the wait is
        ``min(max_delay_s, base_delay_s * 2**k) * (1 + U(-jitter, jitter))``.
    jitter : float
        In ``[0, 1]``; ``0`` waits exactly the capped exponential delay.
    run_dir : path, optional
        Write each attempt as a ``retry`` event into
        ``run_dir/ranks/<RANK>/events-retry.jsonl`` (rank from the ``RANK`` environment
        variable, default 0). For use before a Recorder exists.
    recorder : debugkit.Recorder, optional
        Write each attempt through ``recorder.event`` instead.
    name : str, optional
        Label of the events and log lines; default ``fn.__qualname__`` (for a callable
        object, its class's).
    sleep : callable
        ``sleep(seconds)``; injectable for tests.
    rng : random.Random, optional
        Source of the jitter; default a fresh ``random.Random()``.

    Returns
    -------
    Whatever ``fn`` returns on the first attempt that succeeds.

    Raises
    ------
    InvalidInputError
        For bad arguments, before ``fn`` is called.
    Exception
        The original exception of the last attempt (not wrapped), or at once any
        exception whose type is not in ``on``.

    Events
    ------
    One per attempt, kind ``"retry"``: ``name, attempt`` (1-based), ``attempts, ok,
    error_type`` (None when ok), ``message`` (``str(exc)``, at most 2000 characters),
    ``delay_s`` (the sleep before the next attempt, None when there is none).
    """
    if not callable(fn):
        raise InvalidInputError(MSG_NOT_CALLABLE.format(value=fn))
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise InvalidInputError(MSG_ATTEMPTS.format(value=attempts))
    base_delay_s = _check_number("base_delay_s", base_delay_s)
    max_delay_s = _check_number("max_delay_s", max_delay_s)
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) \
            or not (0 <= jitter <= 1):
        raise InvalidInputError(MSG_JITTER.format(value=jitter))
    if not callable(sleep):
        raise InvalidInputError(MSG_SLEEP.format(value=sleep))
    if rng is not None and not callable(getattr(rng, "uniform", None)):
        raise InvalidInputError(MSG_RNG.format(value=rng))
    if recorder is not None and not callable(getattr(recorder, "event", None)):
        raise InvalidInputError(MSG_RECORDER.format(value=recorder))
    if run_dir is not None and recorder is not None:
        raise InvalidInputError(MSG_BOTH_SINKS)
    on = _coerce_on(on)
    kwargs = dict(kwargs or {})
    rng = rng if rng is not None else random.Random()
    label = name or getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if recorder is not None:
        emit = recorder.event
    elif run_dir is not None:
        emit = _RunDirSink(run_dir, _rank_from_env())
    else:
        emit = None

    def record(attempt, ok, exc=None, delay=None):
        if emit is None:
            return
        try:
            emit(EVENT_KIND, name=label, attempt=attempt, attempts=attempts, ok=ok,
                 error_type=None if exc is None else type(exc).__name__,
                 message=None if exc is None else str(exc)[:MESSAGE_LIMIT], delay_s=delay)
        except Exception as write_err:  # recording must not change what the call does
            logger.warning("%s: could not record attempt %d as an event: %s", label, attempt,
                           write_err)

    for attempt in range(1, attempts + 1):
        try:
            result = fn(*args, **kwargs)
        except on as exc:
            last = attempt == attempts
            delay = None if last else backoff_delay(attempt - 1, base_delay_s, max_delay_s,
                                                   float(jitter), rng)
            record(attempt, False, exc, delay)
            if last:
                logger.warning("%s: attempt %d/%d failed with %s: %s; giving up", label,
                               attempt, attempts, type(exc).__name__, exc)
                raise
            logger.warning("%s: attempt %d/%d failed with %s: %s; retrying in %.2f s", label,
                           attempt, attempts, type(exc).__name__, exc, delay)
        except Exception as exc:
            record(attempt, False, exc, None)
            logger.warning("%s: attempt %d/%d failed with %s (not retried): %s", label,
                           attempt, attempts, type(exc).__name__, exc)
            raise
        else:
            record(attempt, True)
            return result
        sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["retry", "transient_errors", "backoff_delay", "RETRY_EVENTS_FILE"]
