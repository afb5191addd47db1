"""Read stack dumps (``py-spy dump --json`` output, or debugkit's own ``debugkit-stacks``
file) into a :class:`~debugkit.io.profile_types.StackDump`, with what each waiting
thread waits on.

The wait classification (:data:`WAIT_PATTERNS`, :func:`classify_wait`) stays with the
reader because :attr:`StackDump.threads` documents its ``waiting_in`` column.
"""

from __future__ import annotations

import os
import re

from ..errors import ProfileFileError
from . import jsonscan
from .profile_types import StackDump
from .profiles import MSG_BAD_JSON, MSG_EMPTY_FILE, MSG_SCHEMA, read_bytes
from .speedscope import _check_complete

# ---------------------------------------------------------------------------- stack dumps
# (label, patterns on "name file") of what a waiting thread waits on; first match wins,
# from the innermost frame outwards.
WAIT_PATTERNS: list[tuple[str, tuple[str, ...]]] = [
    ("collective", ("torch/distributed/", "all_reduce", "all_gather", "barrier", "broadcast",
                    "reduce_scatter", "ProcessGroup", "nccl", "gloo")),
    ("dataloader", ("torch/utils/data/dataloader.py",)),
    ("queue", ("queue.py", "queues.py", "Queue.get", "Queue.put")),
    ("lock", ("Condition.wait", "Event.wait", "Lock.acquire", "Semaphore.acquire", "Thread.join",
              "_wait_for_tstate_lock", "Barrier.wait")),
    ("socket", ("socket.py", "selectors.py", "connection.py", "ssl.py", "select")),
    ("sleep", ("time.sleep", "sleep")),
    ("io", ("read", "write", "recv", "send")),
]


def classify_wait(frames: list[tuple[str, str]]) -> str:
    """What a stack (innermost frame first, as ``(name, file)``) waits on, or ``""``."""
    for label, pats in WAIT_PATTERNS:
        for name, file in frames:
            text = f"{name} {file}"
            if any(p in text for p in pats):
                return label
    return ""


def read_stack_dump(path: str | os.PathLike) -> StackDump:
    """Read ``py-spy dump --json`` output (a list of threads) or debugkit's stack dump
    (``{"format": "debugkit-stacks", "processes": [{"pid", "cmdline", "threads"}...]}``)."""
    import orjson
    import pandas as pd

    data = read_bytes(path)
    if not data.strip():
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        s = jsonscan.scan(data)
        if s.end_in_string or s.end_level > 0:
            _check_complete(data, s, path)
        raise ProfileFileError(MSG_BAD_JSON.format(path=path, detail=exc)) from exc
    if isinstance(doc, list):
        procs = [{"pid": None, "cmdline": "", "threads": doc}]
        meta = {}
    elif isinstance(doc, dict) and doc.get("format") == "debugkit-stacks":
        procs = doc.get("processes")
        if not isinstance(procs, list):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where="processes", detail="not a list"))
        meta = {k: doc.get(k) for k in ("created_at", "host", "pid", "errors")}
    else:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="(root)",
                                             detail="expected py-spy dump JSON (a list of threads)"))
    trows, frows = [], []
    for pi, proc in enumerate(procs):
        threads = proc.get("threads") if isinstance(proc, dict) else None
        if not isinstance(threads, list):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=f"processes[{pi}].threads",
                                                 detail="not a list"))
        for ti, t in enumerate(threads):
            where = f"threads[{ti}]" if proc.get("pid") is None else f"processes[{pi}].threads[{ti}]"
            if not isinstance(t, dict) or not isinstance(t.get("frames"), list):
                raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where,
                                                     detail="expected an object with 'frames'"))
            k = len(trows)
            fr = []
            for level, f in enumerate(t["frames"]):
                if not isinstance(f, dict):
                    raise ProfileFileError(MSG_SCHEMA.format(path=path, where=f"{where}.frames[{level}]",
                                                         detail="not an object"))
                name = str(f.get("name") or "?")
                file = str(f.get("filename") or f.get("short_filename") or "")
                line = f.get("line") if isinstance(f.get("line"), int) else None
                loc = f.get("locals")
                frows.append({"thread": k, "level": level, "name": name, "file": file, "line": line,
                              "locals": orjson.dumps(loc).decode() if loc else None})
                fr.append((name, file, line))
            leaf = f"{fr[0][0]} ({fr[0][1].rsplit('/', 1)[-1]}:{fr[0][2]})" if fr else "(no Python frames)"
            active = bool(t.get("active"))
            trows.append({"thread": k, "pid": t.get("pid", proc.get("pid")),
                          "tid": t.get("os_thread_id"), "name": str(t.get("thread_name") or ""),
                          "process": str(proc.get("cmdline") or ""), "active": active,
                          "owns_gil": bool(t.get("owns_gil")), "depth": len(fr), "leaf": leaf,
                          "waiting_in": "" if active else classify_wait([(a, b) for a, b, _ in fr])})
    if not trows:
        raise ProfileFileError(f"{path}: the stack dump holds no threads")
    threads = pd.DataFrame(trows)
    for c in ("pid", "tid"):
        threads[c] = threads[c].astype("Int64")
    frames = pd.DataFrame(frows, columns=["thread", "level", "name", "file", "line", "locals"])
    frames["line"] = frames["line"].astype("Int64")
    return StackDump(threads, frames, meta)


def stack_dump_text(dump: StackDump) -> str:
    """The dump as text, like ``py-spy dump`` prints it."""
    out = []
    for t in dump.threads.itertuples():
        state = "active" if t.active else "idle"
        gil = ", holds the GIL" if t.owns_gil else ""
        out.append(f"Thread {t.tid} ({state}{gil}): \"{t.name}\"  pid {t.pid}"
                   + (f"  waiting in: {t.waiting_in}" if t.waiting_in else ""))
        fr = dump.frames[dump.frames["thread"] == t.thread]
        for f in fr.itertuples():
            line = "" if _isna(f.line) else f":{f.line}"
            out.append(f"    {f.name} ({short_path(f.file)}{line})")
    return "\n".join(out) + "\n"


_LIB = re.compile(r"^.*?/(?:site-packages|dist-packages|lib/python3\.\d+)/")


def short_path(file: str) -> str:
    """A path as py-spy shows it: from the package (``torch/nn/functional.py``) or the
    standard library module (``threading.py``); other paths unchanged."""
    return _LIB.sub("", file)


def _isna(v) -> bool:
    import pandas as pd

    return v is None or bool(pd.isna(v))
