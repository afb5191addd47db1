"""Waiting on a condition instead of sleeping a guessed time.

``wait_for`` polls a predicate until it holds or a generous deadline passes (then fails
with what it waited for). ``ANNOUNCE_BLOCKED`` is source for a child script: it prints
``ready`` once the child's top level is inside a named call (``wait``, ``get``),
so a test that inspects a blocked process knows it is blocked rather than guessing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds to wait for a condition that normally holds within a second; long enough for a
#: loaded CI machine, and only ever reached when the behaviour under test is broken.
DEADLINE_S = 60.0


def wait_for(predicate: Callable[[], object], what: str, *, timeout_s: float = DEADLINE_S,
             interval_s: float = 0.05):
    """Call ``predicate`` until it returns something truthy; return that. Fails the test
    after ``timeout_s`` seconds, naming ``what`` it waited for."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s:g} s for {what}")
        time.sleep(interval_s)


def announce_blocked(function: str) -> str:
    """Source that starts a thread printing ``ready`` (followed by the script's global
    ``READY_EXTRA`` words, if it sets them) once the script's top level has called
    ``function`` (the main thread is inside it), and then ends. Put it at the top of a child script whose
    main thread then blocks."""
    return f"""
import sys as _sys, threading as _threading, time as _time
def _announce():
    main = _threading.main_thread().ident
    while True:
        chain, f = [], _sys._current_frames().get(main)
        while f is not None:
            chain.append(f.f_code)
            f = f.f_back
        # the call right below the script's own top level (not an import's) is the one named
        top = [i for i, c in enumerate(chain) if c.co_filename == chain[-1].co_filename]
        if len(top) == 1 and top[0] >= 1 and chain[top[0] - 1].co_name == {function!r}:
            break
        _time.sleep(0.01)
    print(" ".join(["ready", *map(str, globals().get("READY_EXTRA", []))]), flush=True)
_threading.Thread(target=_announce, name="announce-blocked").start()
"""
