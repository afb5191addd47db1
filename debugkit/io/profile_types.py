"""What the profile readers return: :class:`SampledProfile` (with the builder that
:mod:`debugkit.io.collapsed` and :mod:`debugkit.io.speedscope` fill) and
:class:`StackDump` (read by :mod:`debugkit.io.stackdump`).

A sampled profile is a table of unique frames, the unique stacks as flat arrays of frame
ids, and the number of samples (and their time) per (thread, stack). One million samples
cost one int per sample while reading and a row per unique stack afterwards.

py-spy's pseudo-frames are taken out of the stacks and kept as thread facts:
``process PID:"command"`` (``--subprocesses``) and ``thread (TID): name`` (raw output
with ``--threads``). Threads of debugkit's own launcher process (see
:mod:`debugkit.cli._pyspy`) are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ProfileFileError

MSG_NO_SAMPLES = ("{path}: the profile holds no samples (the program may have ended before "
                  "the first sample, or py-spy could not read it)")
# Frames py-spy adds itself (with --subprocesses / --threads in raw output).
_PROCESS_FRAME = re.compile(r'^process (?P<pid>\d+):"(?P<cmd>.*)"$', re.S)
MAIN_THREAD_NAME = "MainThread"  # threading's name for the interpreter's main thread
#: The launcher `debugkit profile` runs under py-spy (its own threads are not the user's):
#: where it lives now, and where profiles recorded before issue 21 name it.
LAUNCHER_MARKS = ("debugkit/cli/_pyspy_child.py", "debugkit/recorder/_pyspy_child.py")
# A DataLoader worker process runs this loop.
WORKER_LOOP_FILE = "torch/utils/data/_utils/worker.py"
WORKER_LOOP = "_worker_loop"
ROLES = ("main", "thread", "dataloader", "process")


def _is_launcher(text: str) -> bool:
    return any(mark in text for mark in LAUNCHER_MARKS)


# ---------------------------------------------------------------------------- the model
@dataclass
class SampledProfile:
    """Samples of stacks, per thread.

    Attributes
    ----------
    format : str
        ``speedscope`` or ``raw``.
    frames : DataFrame
        ``frame_id`` (int32), ``name``, ``file`` (str, ``""`` when unknown), ``line``
        (Int64, null when unknown).
    stack_frames, stack_offsets : ndarray
        Unique stacks: stack ``i`` is ``stack_frames[stack_offsets[i]:stack_offsets[i+1]]``,
        frame ids from the root (outermost call) to the leaf (where the sample was taken).
    counts : DataFrame
        One row per (thread, stack): ``thread_id`` (int32), ``stack_id`` (int32),
        ``samples`` (int64), ``weight_s`` (float64: seconds, or samples when the profile
        has no time unit).
    threads : DataFrame
        ``thread_id``, ``name``, ``pid``, ``tid`` (Int64), ``process`` (the command line,
        when known), ``role`` (``main``: the main thread of the profiled program;
        ``thread``: another thread of it; ``dataloader``: a thread of a DataLoader worker
        process; ``process``: a thread of another subprocess), ``samples``, ``weight_s``.
    meta : dict
        ``exporter``, ``name``, ``unit``, ``duration_s``, ``rate_hz`` (when known);
        ``samples_in_file`` (every sample the file held) and ``launcher_samples`` (those
        of debugkit's own launcher process, left out of ``counts``).
    """

    format: str
    frames: Any
    stack_frames: np.ndarray
    stack_offsets: np.ndarray
    counts: Any
    threads: Any
    meta: dict = field(default_factory=dict)
    #: The profile's entry in the cache folder (:mod:`debugkit.io.profile_cache`), where
    #: results computed from it are kept too; None when it is not cached.
    cache_key: str | None = None

    @property
    def total_samples(self) -> int:
        return int(self.counts["samples"].sum())

    @property
    def n_stacks(self) -> int:
        return len(self.stack_offsets) - 1

    def stack(self, stack_id: int) -> np.ndarray:
        return self.stack_frames[self.stack_offsets[stack_id]:self.stack_offsets[stack_id + 1]]

    def thread_ids(self, role: str | None = None) -> list[int]:
        t = self.threads
        return [int(x) for x in (t["thread_id"] if role is None else t.loc[t["role"] == role, "thread_id"])]


class _Builder:
    """Interns frames, stacks and threads while a reader walks a file."""

    def __init__(self):
        self.frame_ids: dict[tuple, int] = {}
        self.frames: list[tuple] = []
        self.stack_ids: dict[tuple, int] = {}
        self.stacks: list[tuple] = []
        self.threads: list[dict] = []
        self.thread_keys: dict[Any, int] = {}
        self.cells: dict[tuple[int, int], list] = {}

    def frame(self, name: str, file: str, line: int | None) -> int:
        key = (name, file, line)
        fid = self.frame_ids.get(key)
        if fid is None:
            fid = self.frame_ids[key] = len(self.frames)
            self.frames.append(key)
        return fid

    def stack(self, frames: tuple) -> int:
        sid = self.stack_ids.get(frames)
        if sid is None:
            sid = self.stack_ids[frames] = len(self.stacks)
            self.stacks.append(frames)
        return sid

    def thread(self, key, **facts) -> int:
        tid = self.thread_keys.get(key)
        if tid is None:
            tid = self.thread_keys[key] = len(self.threads)
            self.threads.append({"thread_id": tid, **facts})
        else:
            cur = self.threads[tid]
            for k, v in facts.items():
                if v and not cur.get(k):
                    cur[k] = v
        return tid

    def add(self, thread_id: int, stack_id: int, samples: int, weight: float) -> None:
        cell = self.cells.get((thread_id, stack_id))
        if cell is None:
            self.cells[(thread_id, stack_id)] = [samples, weight]
        else:
            cell[0] += samples
            cell[1] += weight

    def build(self, format_name: str, meta: dict, path) -> SampledProfile:
        import pandas as pd

        frames = pd.DataFrame({
            "frame_id": np.arange(len(self.frames), dtype=np.int32),
            "name": [f[0] for f in self.frames],
            "file": [f[1] for f in self.frames],
            "line": pd.array([f[2] for f in self.frames], dtype="Int64"),
        })
        lengths = np.fromiter((len(s) for s in self.stacks), dtype=np.int64, count=len(self.stacks))
        offsets = np.zeros(len(self.stacks) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((f for s in self.stacks for f in s), dtype=np.int32, count=int(offsets[-1]))
        keys = sorted(self.cells)
        counts = pd.DataFrame({
            "thread_id": np.array([k[0] for k in keys], dtype=np.int32),
            "stack_id": np.array([k[1] for k in keys], dtype=np.int32),
            "samples": np.array([self.cells[k][0] for k in keys], dtype=np.int64),
            "weight_s": np.array([self.cells[k][1] for k in keys], dtype=np.float64),
        })
        threads = _finish_threads(self.threads, counts, frames, flat, offsets,
                                  getattr(self, "drop_pids", ()), getattr(self, "keep_pids", ()))
        keep = threads["thread_id"].to_numpy()
        in_file = int(counts["samples"].sum())
        counts = counts[counts["thread_id"].isin(keep)].reset_index(drop=True)
        # What the file held and what was left out as debugkit's own launcher, so that a
        # count py-spy printed can be reconciled with the one shown.
        meta = {**meta, "samples_in_file": in_file,
                "launcher_samples": in_file - int(counts["samples"].sum())}
        prof = SampledProfile(format_name, frames, flat, offsets, counts, threads, meta)
        if prof.total_samples == 0:
            raise ProfileFileError(MSG_NO_SAMPLES.format(path=path))
        return prof


def _finish_threads(threads: list[dict], counts, frames, flat, offsets, drop_pids=(), keep_pids=()):
    """Drop the launcher's threads, then name roles (main / thread / dataloader / process).

    The launcher is known by its command line, or by its pid (``drop_pids``: recorded by
    ``debugkit profile``, for samples taken before py-spy knew the command line); the
    program's own pid (``keep_pids``) is kept whatever its command line reads."""
    import pandas as pd

    rows = []
    launcher = {t.get("pid") for t in threads if _is_launcher(t.get("process") or "")}
    launcher |= {p for p in drop_pids if p is not None}
    # ...and from the process chains (the launcher has no threads left when py-spy did
    # not sample it, but it still heads every chain).
    for t in threads:
        for pid, cmd in t.get("chain_cmds") or []:
            if _is_launcher(cmd):
                launcher.add(pid)
    # The profiled program itself (``keep_pids``: its pid, recorded by ``debugkit profile``)
    # is never the launcher, even when py-spy read its command line between the
    # launcher's fork and its exec (it then shows the launcher's command line).
    keep = {p for p in keep_pids if p is not None}
    launcher -= keep
    for t in threads:
        if t.get("pid") in keep and _is_launcher(t.get("process") or ""):
            t = {**t, "process": ""}
        if t.get("pid") in launcher and t.get("pid") is not None:
            continue
        chain = [p for p in t.get("chain") or [] if p not in launcher]
        rows.append({k: v for k, v in t.items() if k != "chain_cmds"} | {"chain": chain})
    # The profiled program's process: the outermost process left in the chains, or the
    # single pid seen.
    # The profiled program's process: of the processes with threads in the profile, the
    # outermost one (shortest process chain; a shell or launcher above it has none).
    with_pid = [r for r in rows if r.get("pid") is not None]
    root_pid = min(with_pid, key=lambda r: (len(r["chain"]), r["pid"]))["pid"] if with_pid else None
    # The main thread: the one Python names MainThread, when py-spy recorded names (on
    # macOS thread ids are pthread ids, never the process id); else the thread whose id is
    # the process id (Linux gives the main thread the process's id); else the lowest id.
    root_rows = [r for r in rows if r.get("pid") is None or r.get("pid") == root_pid]
    tids = [r.get("tid") for r in root_rows if r.get("tid") is not None]
    named = [r.get("tid") for r in root_rows if r.get("name") == MAIN_THREAD_NAME and r.get("tid") is not None]
    if len(named) == 1:
        main_tid = named[0]
    elif root_pid is not None and root_pid in tids:
        main_tid = root_pid
    else:
        main_tid = min(tids) if tids else root_pid
    # DataLoader worker processes: a thread of theirs ran the worker loop.
    is_worker_frame = (frames["file"].str.endswith(WORKER_LOOP_FILE)
                       & (frames["name"] == WORKER_LOOP)).to_numpy()
    worker_stacks = np.zeros(len(offsets) - 1, dtype=bool)
    if is_worker_frame.any() and len(flat):
        hit = is_worker_frame[flat]
        stack_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
        worker_stacks[stack_of[hit]] = True
    worker_threads = set(counts.loc[worker_stacks[counts["stack_id"].to_numpy()], "thread_id"].tolist()) \
        if len(counts) else set()
    worker_pids = {r.get("pid") for r in rows if r["thread_id"] in worker_threads and r.get("pid") is not None}
    per_thread = counts.groupby("thread_id")[["samples", "weight_s"]].sum()
    out = []
    for r in rows:
        pid, tid = r.get("pid"), r.get("tid")
        if r["thread_id"] in worker_threads or (pid is not None and pid in worker_pids):
            role = "dataloader"
        elif pid is None or pid == root_pid:
            role = "main" if (tid is None or tid == main_tid) else "thread"
        else:
            role = "process"
        name = r.get("name") or ("MainThread" if role == "main" else "")
        s = per_thread.loc[r["thread_id"]] if r["thread_id"] in per_thread.index else None
        out.append({"thread_id": r["thread_id"], "name": name, "pid": pid, "tid": tid,
                    "process": r.get("process") or "", "role": role,
                    "samples": int(s["samples"]) if s is not None else 0,
                    "weight_s": float(s["weight_s"]) if s is not None else 0.0})
    df = pd.DataFrame(out, columns=["thread_id", "name", "pid", "tid", "process", "role",
                                    "samples", "weight_s"])
    df["thread_id"] = df["thread_id"].astype(np.int32)
    df["pid"] = df["pid"].astype("Int64")
    df["tid"] = df["tid"].astype("Int64")
    df["samples"] = df["samples"].astype(np.int64)
    df["weight_s"] = df["weight_s"].astype(np.float64)
    order = {r: i for i, r in enumerate(ROLES)}
    df = df.sort_values(["role", "samples"], key=lambda c: c.map(order) if c.name == "role" else -c,
                        kind="stable").reset_index(drop=True)
    return df


def _parse_tid(text: str) -> int:
    """A thread id as py-spy writes it: decimal, or ``0x``-prefixed hex (macOS)."""
    return int(text, 16) if text[:2] in ("0x", "0X") else int(text)


_PROCESS_HEAD = re.compile(r'process (\d+):"')
_THREAD_HEAD = re.compile(r"thread \((\d+|0x[0-9a-fA-F]+)\)(?:: ([^;]*))?(?:;|$)")


def _split_pseudo(stack_text: str) -> tuple[list[tuple[int, str]], tuple[int, str] | None, str]:
    """Leading ``process PID:"cmd"`` and ``thread (TID): name`` pseudo-frames of a raw
    stack line, and the rest of the line.

    A command line may itself hold ``;`` and ``"``, so a process frame ends at the first
    ``";`` after which the text reads as the next pseudo-frame or a ``name (file:line)``
    frame (or the line ends).
    """
    chain: list[tuple[int, str]] = []
    thread = None
    rest = stack_text
    while True:
        m = _PROCESS_HEAD.match(rest)
        if not m:
            break
        body = rest[m.end():]
        cut = None
        j = body.find('"')
        while j >= 0:
            after = body[j + 1:]
            if after == "":
                cut = (j, "")
                break
            if after.startswith(";"):
                nxt = after[1:]
                head = nxt.split(";", 1)[0]
                if _PROCESS_HEAD.match(nxt) or _THREAD_HEAD.match(nxt) or _looks_like_frame(head):
                    cut = (j, nxt)
                    break
            j = body.find('"', j + 1)
        if cut is None:
            break
        chain.append((int(m.group(1)), body[:cut[0]]))
        rest = cut[1]
    m = _THREAD_HEAD.match(rest)
    if m:
        tid = m.group(1)
        thread = (_parse_tid(tid), m.group(2) or "")
        rest = rest[m.end():]
    return chain, thread, rest


def _looks_like_frame(text: str) -> bool:
    return text.endswith(")") and " (" in text


def _parse_frame_text(text: str) -> tuple[str, str, int | None]:
    """``name (file:line)`` -> (name, file, line); ``name (file)``; ``name``."""
    if text.endswith(")"):
        i = text.rfind(" (")
        if i > 0:
            inner = text[i + 2:-1]
            name = text[:i]
            j = inner.rfind(":")
            if j > 0 and inner[j + 1:].isdigit():
                return name, inner[:j], int(inner[j + 1:])
            return name, inner, None
    return text, "", None


# ---------------------------------------------------------------------------- stack dumps
@dataclass
class StackDump:
    """A snapshot of every thread's stack (``py-spy dump``).

    Attributes
    ----------
    threads : DataFrame
        ``thread`` (int, row key), ``pid``, ``tid`` (OS thread id), ``name``, ``process``
        (command line), ``active`` (bool: running, not waiting), ``owns_gil`` (bool),
        ``depth`` (frames), ``leaf`` (``name (file:line)`` of the innermost frame),
        ``waiting_in`` (what the thread waits on, from its frames: ``lock``, ``queue``,
        ``dataloader``, ``collective``, ``socket``, ``sleep``, ``io`` or ``""``).
    frames : DataFrame
        ``thread``, ``level`` (0 = innermost), ``name``, ``file``, ``line`` (Int64),
        ``locals`` (JSON text or null).
    meta : dict
        ``created_at``, ``host``, ``errors`` (per pid that could not be dumped).
    """

    threads: Any
    frames: Any
    meta: dict = field(default_factory=dict)
