"""Time spent waiting on collectives, per step: ``rec.comm()`` blocks and DDP comm hooks.

What ``comm_s`` measures is the time the training thread was held up by communication
inside a step, not the time bytes were on the wire: a bucket all-reduce that runs
while backward is still computing other gradients costs the step nothing and is not
counted. Two sources feed it:

- ``with rec.comm(): dist.all_reduce(t)``: the block's whole duration (the training
  thread is blocked in it).
- :meth:`CommTimer.wrap_ddp_hook`, installed by ``rec.watch_ddp(ddp_model)``: DDP calls
  the hook once per gradient bucket as backward produces it; the hook's future
  completes when every rank has contributed. Backward has finished computing once
  the last bucket is launched, so the step waits on communication from the last
  launch to the last completion. On a rank that the others wait for, that is short;
  on the others it holds the wait for the slow rank.

The union of those intervals, clipped to the step, is ``comm_s``. With NCCL the hook
future completes when the collective has been queued on its CUDA stream, so the host
sees launch times only: use torch.profiler traces of the ranks (the trace analysis)
for device-side communication time.
"""

from __future__ import annotations

import threading
import time


def union_length(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Total length of the union of ``intervals`` clipped to ``[lo, hi]``."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    total, cur_a, cur_b = 0.0, None, None
    for a, b in clipped:
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


class _CommBlock:
    __slots__ = ("timer", "t0")

    def __init__(self, timer: CommTimer):
        self.timer = timer
        self.t0 = 0.0

    def __enter__(self):
        self.timer.calls += 1  # one collective entered (counted also when it never returns)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.timer._add_block(self.t0, time.perf_counter())
        return False


class CommTimer:
    """Collects communication intervals of the current step (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._blocks: list[tuple[float, float]] = []
        self._launches: list[float] = []
        self._dones: list[float] = []
        self.measuring = False
        # Collectives entered in the current step (rec.comm() blocks and DDP buckets): a
        # rank whose count differs from its usual one skipped or added a collective.
        self.calls = 0

    # ------------------------------------------------------------------ step bounds
    def begin_step(self) -> None:
        if not self.measuring:  # nothing appends before a source switches measuring on
            return
        with self._lock:
            self._blocks, self._launches, self._dones = [], [], []
        self.calls = 0

    def end_step(self, t0: float, t1: float) -> float | None:
        """``comm_s`` of the step that ran from ``t0`` to ``t1`` (None: nothing measures)."""
        if not self.measuring:
            return None
        with self._lock:
            intervals = list(self._blocks)
            if self._launches and self._dones:
                intervals.append((max(self._launches), max(self._dones)))
            self._blocks, self._launches, self._dones = [], [], []
        if not self.measuring:
            return None
        return union_length(intervals, t0, t1)

    # ------------------------------------------------------------------ sources
    def block(self) -> _CommBlock:
        """Context manager timing one blocking collective."""
        self.measuring = True
        return _CommBlock(self)

    def _add_block(self, a: float, b: float) -> None:
        with self._lock:
            self._blocks.append((a, b))

    def wrap_ddp_hook(self, hook):
        """A DDP comm hook that runs ``hook`` and times its bucket's collective."""
        self.measuring = True

        def timed_hook(state, bucket):
            self.calls += 1
            launched = time.perf_counter()
            with self._lock:
                self._launches.append(launched)
            fut = hook(state, bucket)

            def _done(f):
                with self._lock:
                    self._dones.append(time.perf_counter())
                return f.value()

            return fut.then(_done)

        timed_hook.__name__ = f"debugkit_timed_{getattr(hook, '__name__', 'hook')}"
        timed_hook.__wrapped__ = hook
        return timed_hook
