"""Write a rank's queued rows when SIGTERM arrives, then let the signal go on as before.

torchrun stops the surviving ranks of a job with SIGTERM when one rank fails, and so do
schedulers (SLURM, Kubernetes) at a time limit or a pre-emption. Python's default for
SIGTERM ends the process at once, without ``atexit``: the rows of the last flush
interval (``flush_every_s``) would be lost with it. The handler flushes them, notes the
signal in the events file, and then does what was there before it: calls the program's
own handler, ignores the signal if it was ignored, or ends the process by the same
signal (so the exit status a launcher sees is unchanged).

A signal that comes while the Recorder closes waits until its last flush and final state
are written (``hold``), and one that interrupts another flush of the training thread
waits for that flush: either way the rows a flush has taken reach the disk.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any


class TermFlush:
    """SIGTERM handler for one Recorder's writer, chained to the handler it replaced."""

    def __init__(self, writer, step) -> None:
        self._writer = writer
        self._step = step  # callable: the last step begun
        self._prev: Any = None
        self._installed = False
        self._held = False  # the Recorder is closing: a signal waits for it (hold)
        self._pending: int | None = None
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; a rank thread leaves it be
        try:
            prev = signal.getsignal(signal.SIGTERM)
            if prev is None:
                return  # a handler installed from C: not ours to wrap
            signal.signal(signal.SIGTERM, self._handle)
        except (ValueError, OSError):  # pragma: no cover - platforms without SIGTERM
            return
        self._prev = prev
        self._installed = True

    def _handle(self, signum, frame) -> None:
        if self._held:
            self._pending = signum  # close() is writing the rows: acted on when it has
            return
        writer = self._writer
        if writer is not None and writer.flushing_here():
            # the signal interrupted this thread's own flush, which holds the rows it took:
            # let it write them, then handle the signal (waiting here would give up after
            # the timeout and end the process with those rows lost)
            writer.defer_until_flushed(lambda: self._handle(signum, frame))
            return
        if writer is not None:
            try:
                if writer.flush(timeout=2.0):
                    writer.event("signal", signal="SIGTERM", step=self._step())
            except Exception:  # noqa: BLE001, S110 - the signal must go on whatever the disk does
                pass
        prev = self._prev
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_IGN:
            return
        else:  # SIG_DFL: die of the signal, as the process would have without us
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def hold(self) -> None:
        """The Recorder is closing (its last flush, its final state): a SIGTERM from now
        on waits until :meth:`close`, so that the rows are written whole. Restoring the
        default first let a signal end the process in the middle of that last flush (the
        elastic test's rank 0, stopped by torchrun as it closed, lost its rows)."""
        self._held = True

    def close(self) -> None:
        """Put the replaced handler back (if ours is still the one installed), then act
        on a SIGTERM that came while held, as the process would have without us."""
        writer, self._writer = self._writer, None
        self._held = False
        pending, self._pending = self._pending, None
        if self._installed:
            self._installed = False
            try:
                if signal.getsignal(signal.SIGTERM) == self._handle:
                    signal.signal(signal.SIGTERM, self._prev)
            except ValueError:  # closed from another thread: the handler stays, now a no-op
                pass
        if pending is not None:
            if writer is not None:
                try:
                    writer.event("signal", signal="SIGTERM", step=self._step(), while_closing=True)
                except Exception:  # noqa: BLE001, S110 - the signal must go on whatever the disk does
                    pass
            # again: the handler put back acts on it (death by the signal, the program's
            # own handler, or nothing if it was ignored); ours, if it stayed, chains to it
            os.kill(os.getpid(), pending)
