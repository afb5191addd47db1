"""Idle samples: a thread waiting in a blocking call (lock, queue, select, sleep) is not
working; its samples are told apart by their innermost frame.
"""

from __future__ import annotations

import re

import numpy as np

from .selection import Selection

# A sample is idle (the thread waits) when its innermost Python frame is one of these
# blocking calls: (name regex, file substring). py-spy with --idle samples waiting threads
# too; their leaves are the stdlib's waits, never the code doing work.
IDLE_LEAVES: list[tuple[str, str]] = [
    (r"^(Condition|Event|Semaphore|BoundedSemaphore|Barrier)\.(wait|acquire)$"
     r"|^(Thread\.)?(join|_wait_for_tstate_lock)$", "threading.py"),
    (r"(^|\.)(select|poll)$", "selectors.py"),
    (r"^socket\.(accept|recv\w*)$", "socket.py"),
    (r"^(Connection\.)?(_recv\w*|recv\w*|_poll|poll|wait)$", "multiprocessing/connection.py"),
    (r"(^|\.)(get|put)$", "queue.py"),
    (r"(^|\.)(get|put)$", "multiprocessing/queues.py"),
    (r"(^|\.)(wait|poll|_wait|_try_wait)$", "multiprocessing/popen_fork.py"),
    (r"(^|\.)(wait|poll|_wait|_try_wait|communicate)$", "subprocess.py"),
    (r"(^|\.)(serve_forever|accept)$", "multiprocessing/"),
]


def idle_keys(names, files) -> np.ndarray:
    """Which keys (by name and file) are idle leaves (:data:`IDLE_LEAVES`)."""
    rules = [(re.compile(rx), sub) for rx, sub in IDLE_LEAVES]
    return np.array([any(sub in f and rx.search(n) for rx, sub in rules) for n, f in zip(names, files)],
                    dtype=bool)


def idle_stacks(sel: Selection) -> np.ndarray:
    """Per stack of a selection: True when its innermost frame is an idle leaf."""
    n_stacks = len(sel.offsets) - 1
    out = np.zeros(n_stacks, dtype=bool)
    lengths = np.diff(sel.offsets)
    nonempty = np.flatnonzero(lengths > 0)
    if not len(nonempty):
        return out
    idle = idle_keys(sel.key_name, sel.key_file)
    out[nonempty] = idle[sel.keys_flat[sel.offsets[1:][nonempty] - 1]]
    return out
