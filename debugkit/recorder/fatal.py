"""Leave the Python stacks of a rank killed by a fatal signal in its rank folder.

A rank that dies by SIGABRT (NCCL's watchdog aborts a process whose collective timed
out), SIGSEGV, SIGBUS, SIGFPE or SIGILL writes no failure capture and no close record:
the Recorder's code never runs again. ``faulthandler`` still can: it is enabled here
with ``ranks/<r>/fatal-<segment>.txt`` as its file, so the signal leaves every thread's
stack there (innermost frame first). The file is removed on a normal close when it is
empty. When the training script enabled faulthandler itself, its choice is kept and
nothing is written here.
"""

from __future__ import annotations

import faulthandler
from pathlib import Path

from ..format import FATAL_FILE


class FatalStackFile:
    """Route faulthandler's fatal-signal dump into ``rank_dir`` for one writer segment."""

    def __init__(self, rank_dir: Path, segment: int):
        self.path = Path(rank_dir) / FATAL_FILE.format(segment=segment)
        self._file = None
        if faulthandler.is_enabled():
            return
        try:
            self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the signal handler
            faulthandler.enable(file=self._file, all_threads=True)
        except (OSError, ValueError, RuntimeError):
            self._close_file()

    def close(self) -> None:
        """Disable the handler (if this object enabled it) and drop the empty file."""
        if self._file is None:
            return
        faulthandler.disable()
        self._close_file()
        try:
            if self.path.stat().st_size == 0:
                self.path.unlink()
        except OSError:
            pass

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
