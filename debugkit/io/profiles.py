"""Read sampled profiles (py-spy speedscope JSON, raw/collapsed stacks) and stack dumps.

A sampled profile is read into a :class:`SampledProfile`: a table of unique frames, the
unique stacks as flat arrays of frame ids, and the number of samples (and their time)
per (thread, stack). One million samples cost one int per sample while reading and a
row per unique stack afterwards; the speedscope ``samples`` arrays are cut into
per-sample byte slices found by :mod:`debugkit.io.jsonscan`, deduplicated as bytes and
only the distinct stacks are parsed.

py-spy's pseudo-frames are taken out of the stacks and kept as thread facts:
``process PID:"command"`` (``--subprocesses``) and ``thread (TID): name`` (raw output
with ``--threads``). Threads of debugkit's own launcher process (see
:mod:`debugkit.cli._pyspy`) are dropped.

Every reader accepts the file gzip-compressed (detected by its magic bytes).
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._fsutil import check_regular_file
from ..errors import ProfileFileError
from . import jsonscan

# Message templates (tests match on these).
MSG_EMPTY_FILE = "{path}: the file is empty"
MSG_TRUNCATED = ("{path}: the JSON ends early at byte {offset} (line {line}){detail}; "
                 "the file was probably cut off while being written")
MSG_BAD_JSON = "{path}: not valid JSON ({detail})"
MSG_SCHEMA = "{path}: {where}: {detail}"
MSG_UNKNOWN_FORMAT = ("{path}: not a profile debugkit can read: expected py-spy speedscope "
                      "JSON, raw/collapsed stacks (`py-spy record --format raw`), a torch.profiler "
                      "chrome trace (.json or .json.gz) or a py-spy dump")
MSG_NO_SAMPLES = ("{path}: the profile holds no samples (the program may have ended before "
                  "the first sample, or py-spy could not read it)")
MSG_RAW_LINE = "{path}: line {line}: expected 'frame;frame;... COUNT', got {text!r}"
MSG_EVENTED = ("{path}: profiles[{i}] is an 'evented' speedscope profile; debugkit reads "
               "'sampled' profiles (what py-spy writes)")

GZIP_MAGIC = b"\x1f\x8b"
SPEEDSCOPE_SCHEMA = "speedscope.app/file-format-schema"
# Frames py-spy adds itself (with --subprocesses / --threads in raw output).
_PROCESS_FRAME = re.compile(r'^process (?P<pid>\d+):"(?P<cmd>.*)"$', re.S)
# py-spy names each speedscope profile ``[Process PID ]Thread TID "name"``; TID is the OS
# thread id in decimal on Linux and Windows, and the pthread id in hex on macOS
# (``Thread 0x1FA08F100 "MainThread"``: py-spy's ``StackTrace::format_threadid``).
_SPEEDSCOPE_THREAD = re.compile(
    r'^(?:Process (?P<pid>\d+) )?Thread (?P<tid>0[xX][0-9a-fA-F]+|\d+)(?: "(?P<name>.*)")?$', re.S)
MAIN_THREAD_NAME = "MainThread"  # threading's name for the interpreter's main thread
# debugkit's launcher (debugkit profile RUN -- cmd): its own threads are not the user's.
#: The launcher `debugkit profile` runs under py-spy (its samples are not the program's):
#: where it lives now, and where profiles recorded before issue 21 name it.
LAUNCHER_MARKS = ("debugkit/cli/_pyspy_child.py", "debugkit/recorder/_pyspy_child.py")


def _is_launcher(text: str) -> bool:
    return any(mark in text for mark in LAUNCHER_MARKS)
# A DataLoader worker process runs this loop.
WORKER_LOOP_FILE = "torch/utils/data/_utils/worker.py"
WORKER_LOOP = "_worker_loop"
ROLES = ("main", "thread", "dataloader", "process")
_TIME_UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6, "nanoseconds": 1e-9}


# ---------------------------------------------------------------------------- files
def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when it is gzip-compressed."""
    p = Path(path)
    try:
        check_regular_file(p)  # a FIFO would block open() forever
        with open(p, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == GZIP_MAGIC:
                try:
                    return gzip.GzipFile(fileobj=f).read()
                except (OSError, EOFError) as exc:
                    raise ProfileFileError(MSG_TRUNCATED.format(
                        path=p, offset=f.tell(), line="?",
                        detail=f" (gzip stream: {exc})")) from exc
            return f.read()
    except FileNotFoundError as exc:
        raise ProfileFileError(f"{p}: no such file") from exc
    except IsADirectoryError as exc:
        raise ProfileFileError(f"{p}: is a directory, expected a profile file") from exc


def open_binary(path: str | os.PathLike):
    """A binary file object over the file's (gunzipped) bytes, for streaming readers."""
    p = Path(path)
    try:
        check_regular_file(p)  # a FIFO would block open() forever
        f = open(p, "rb")
    except FileNotFoundError as exc:
        raise ProfileFileError(f"{p}: no such file") from exc
    except IsADirectoryError as exc:
        raise ProfileFileError(f"{p}: is a directory, expected a profile file") from exc
    if f.read(2) == GZIP_MAGIC:
        f.seek(0)
        return gzip.GzipFile(fileobj=f, mode="rb")
    f.seek(0)
    return f


def sniff_format(path: str | os.PathLike) -> str:
    """``speedscope``, ``raw``, ``chrome-trace`` or ``pyspy-dump``, from the content.

    Raises
    ------
    ProfileFileError
        The file is empty or none of those.
    """
    with open_binary(path) as f:
        try:
            head = f.read(1 << 16)
        except (OSError, EOFError) as exc:
            raise ProfileFileError(MSG_TRUNCATED.format(path=path, offset=0, line=1,
                                                    detail=f" (gzip stream: {exc})")) from exc
    return sniff_bytes(head, path)


def sniff_bytes(head: bytes, path: Any = "<bytes>") -> str:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    if text[:1] == b"{":
        if SPEEDSCOPE_SCHEMA.encode() in head or (b'"shared"' in head and b'"profiles"' in head):
            return "speedscope"
        if b'"traceEvents"' in head:
            return "chrome-trace"
        if b'"debugkit-stacks"' in head:
            return "pyspy-dump"
        raise ProfileFileError(MSG_UNKNOWN_FORMAT.format(path=path))
    if text[:1] == b"[":
        body = text[1:].lstrip()
        if body[:1] in (b"{", b"]", b""):
            if b'"thread_id"' in head and b'"frames"' in head:
                return "pyspy-dump"
            if b'"ph"' in head or body[:1] in (b"]", b""):
                return "chrome-trace"
        raise ProfileFileError(MSG_UNKNOWN_FORMAT.format(path=path))
    first = text.split(b"\n", 1)[0].rstrip(b"\r")
    if re.match(rb"^.+ \d+$", first):
        return "raw"
    raise ProfileFileError(MSG_UNKNOWN_FORMAT.format(path=path))


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

    def build(self, fmt: str, meta: dict, path) -> SampledProfile:
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
        prof = SampledProfile(fmt, frames, flat, offsets, counts, threads, meta)
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


# ---------------------------------------------------------------------------- raw / collapsed
def read_collapsed(path: str | os.PathLike, data: bytes | None = None, *,
                   drop_pids=(), keep_pids=()) -> SampledProfile:
    """Read raw/collapsed stacks (``py-spy record --format raw``, Brendan Gregg's folded
    format): one ``frame;frame;...;leaf COUNT`` line per unique stack, root first.

    With py-spy's ``--subprocesses``/``--threads``, leading ``process PID:"cmd"`` and
    ``thread (TID): name`` frames give each stack's process and thread; without them the
    whole file is one thread. Counts are samples; time is samples / rate, unknown here,
    so ``weight_s`` holds samples.
    """
    data = read_bytes(path) if data is None else data
    if not data.strip():
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    b = _Builder()
    b.drop_pids = tuple(drop_pids)
    b.keep_pids = tuple(keep_pids)
    frame_cache: dict[str, int] = {}
    text = data.decode("utf-8", errors="replace")
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        stack_text, sep, count_text = line.rpartition(" ")
        if not sep or not count_text.isdigit() or not stack_text:
            raise ProfileFileError(MSG_RAW_LINE.format(path=path, line=lineno, text=line[:120]))
        count = int(count_text)
        chain, thread, rest = _split_pseudo(stack_text)
        real = rest.split(";") if rest else []
        pid = chain[-1][0] if chain else None
        tid = thread[0] if thread else None
        key = (tuple(p for p, _ in chain), tid)
        th = b.thread(key, pid=pid, tid=tid, name=thread[1] if thread else "",
                      process=chain[-1][1] if chain else "", chain=[p for p, _ in chain],
                      chain_cmds=chain)
        ids = []
        for ft in real:
            fid = frame_cache.get(ft)
            if fid is None:
                fid = frame_cache[ft] = b.frame(*_parse_frame_text(ft))
            ids.append(fid)
        b.add(th, b.stack(tuple(ids)), count, float(count))
    meta = {"exporter": "raw", "name": Path(str(path)).name, "unit": "samples",
            "duration_s": None, "rate_hz": None}
    return b.build("raw", meta, path)


# ---------------------------------------------------------------------------- speedscope
def read_speedscope(path: str | os.PathLike, data: bytes | None = None,
                    block: int = 200_000, *, drop_pids=(), keep_pids=()) -> SampledProfile:
    """Read a speedscope JSON file of ``sampled`` profiles (py-spy's ``--format speedscope``:
    one profile per thread).

    The ``samples`` and ``weights`` arrays are found without parsing them: in a compact
    file (py-spy's) by their keys, checked byte by byte; otherwise with
    :func:`jsonscan.scan`, which finds every structural character. Samples are then
    deduplicated as bytes in blocks of ``block``, and only the distinct stacks are parsed;
    the rest of the document (frames, names) is small and parsed with orjson.
    """
    import orjson

    data = read_bytes(path) if data is None else data
    if not data.strip():
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    places, doc = None, None
    found = _locate_compact(data)
    if found is not None:
        try:
            doc = orjson.loads(found.skeleton)
            places = _compact_places(doc, found, data)
        except orjson.JSONDecodeError:
            places = None
    if places is None:
        skeleton, samples_of, weights_of = _locate_scanned(data, path, block)
        try:
            doc = orjson.loads(skeleton)
        except orjson.JSONDecodeError as exc:
            raise ProfileFileError(MSG_BAD_JSON.format(path=path, detail=exc)) from exc
    else:
        samples_of, weights_of = places
    if not isinstance(doc, dict):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="(root)", detail="expected a JSON object"))
    frames_doc = (doc.get("shared") or {}).get("frames") if isinstance(doc.get("shared"), dict) else None
    if not isinstance(frames_doc, list):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="shared.frames",
                                             detail="missing or not a list"))
    profiles = doc.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        raise ProfileFileError(MSG_NO_SAMPLES.format(path=path))
    b = _Builder()
    b.drop_pids = tuple(drop_pids)
    b.keep_pids = tuple(keep_pids)
    # speedscope frame index -> our frame id; process pseudo-frames -> -1 - index.
    ss_map = np.empty(len(frames_doc), dtype=np.int64)
    pseudo: dict[int, tuple[int, str]] = {}
    for i, fr in enumerate(frames_doc):
        if not isinstance(fr, dict) or not isinstance(fr.get("name"), str):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=f"shared.frames[{i}]",
                                                 detail="expected an object with a string 'name'"))
        m = _PROCESS_FRAME.match(fr["name"])
        if m and not fr.get("file") and not fr.get("line"):
            pseudo[i] = (int(m.group("pid")), m.group("cmd"))
            ss_map[i] = -1
            continue
        line = fr.get("line")
        ss_map[i] = b.frame(fr["name"], str(fr.get("file") or ""),
                            int(line) if isinstance(line, (int, float)) and line > 0 else None)
    n_frames = len(frames_doc)
    durations, all_w = [], []
    unit = None
    for i, prof in enumerate(profiles):
        where = f"profiles[{i}]"
        if not isinstance(prof, dict):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where, detail="not an object"))
        if prof.get("type") == "evented":
            raise ProfileFileError(MSG_EVENTED.format(path=path, i=i))
        if prof.get("type") != "sampled":
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".type",
                                                 detail=f"{prof.get('type')!r}, expected 'sampled'"))
        punit = str(prof.get("unit") or "none")
        unit = unit or punit
        scale = _TIME_UNITS.get(punit)
        if i not in samples_of:
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="missing or not a list of stacks"))
        n, blocks = samples_of[i]
        if i in weights_of:
            wo, wc = weights_of[i]
            w = _read_numbers(data, wo, wc, path, where + ".weights")
            if w.ndim != 1 or len(w) != n:
                raise ProfileFileError(MSG_SCHEMA.format(
                    path=path, where=where,
                    detail=f"{n} samples but {len(w) if w.ndim == 1 else '?'} weights"))
        else:
            w = np.ones(n, dtype=np.float64)
            scale = None
        local: dict[bytes, int] = {}
        ids = np.empty(n, dtype=np.int64)
        a = 0
        for parts in blocks():
            z = a + len(parts)
            ids[a:z] = _dedup_block(parts, local)
            a = z
        if a != n:
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="expected a list of lists of frame indices"))
        cnt = np.bincount(ids, minlength=len(local))
        wsum = np.bincount(ids, weights=w * (scale if scale else 1.0), minlength=len(local))
        m = _SPEEDSCOPE_THREAD.match(str(prof.get("name") or ""))
        pid = int(m.group("pid")) if m and m.group("pid") else None
        tid = _parse_tid(m.group("tid")) if m else None
        tname = (m.group("name") if m else str(prof.get("name") or f"profile {i}")) or ""
        parsed, chain = _parse_stacks(list(local), ss_map, pseudo, n_frames, path, where)
        chain = chain or []
        if pid is None and chain:
            pid = chain[-1][0]
        th = b.thread(("profile", i), pid=pid, tid=tid, name=tname,
                      process=chain[-1][1] if chain else "", chain=[p for p, _ in chain],
                      chain_cmds=chain)
        for j, st in enumerate(parsed):
            b.add(th, b.stack(st), int(cnt[j]), float(wsum[j]))
        if scale:
            sv, ev = prof.get("startValue"), prof.get("endValue")
            if isinstance(sv, (int, float)) and isinstance(ev, (int, float)):
                durations.append((ev - sv) * scale)
            all_w.append(w * scale)
    rate = None
    if all_w:
        ws = np.concatenate(all_w)
        if len(ws) and np.median(ws) > 0:
            rate = float(round(1.0 / float(np.median(ws)), 3))
    meta = {"exporter": doc.get("exporter"), "name": doc.get("name"), "unit": unit,
            "duration_s": max(durations) if durations else None, "rate_hz": rate}
    return b.build("speedscope", meta, path)




def _dedup_block(parts: list, local: dict):
    """Ids of a block's samples (bytes), new distinct ones added to ``local``.

    pandas' hash table factorizes the block in C; its few distinct stacks then get ids
    that hold across blocks."""
    import pandas as pd

    arr = np.empty(len(parts), dtype=object)
    arr[:] = parts
    codes, uniq = pd.factorize(arr)
    gid = np.fromiter((local.setdefault(k, len(local)) for k in uniq.tolist()),
                      dtype=np.int64, count=len(uniq))
    return gid[codes]


_SAMPLES_KEY = b'"samples":['
_WEIGHTS_KEY = b'"weights":['
_STACK_BYTES = b"0123456789-,[]"
_CHUNK = 8 << 20


@dataclass
class _Compact:
    skeleton: bytes
    samples: list  # (o, c): data[o] is the array's '[', data[c - 1] its ']'
    counts: list   # samples per array
    weights: list  # (o, c) likewise


def _locate_compact(data: bytes) -> _Compact | None:
    """The ``samples``/``weights`` arrays of a compact speedscope file (no blanks in or
    around them, as py-spy writes it), found by their keys; None when the file is not
    like that (the caller then scans its whole structure).

    A key cannot occur inside a JSON string (its quotes would be escaped there). Every
    byte of a samples array is checked to be a digit, sign, comma or bracket, and its
    brackets to pair up as ``[[..],..,[..]]``, so an array is cut exactly where it ends;
    :func:`_compact_places` then checks that the arrays are the profiles' own.
    """
    regions = []  # (o, c, key)
    at = data.find(_SAMPLES_KEY)
    while at >= 0:
        o = at + len(_SAMPLES_KEY) - 1
        if data[o + 1:o + 2] == b"]":
            c = o + 2
        else:
            e = data.find(b"]]", o)
            if e < 0:
                return None
            c = e + 2
        regions.append((o, c, _SAMPLES_KEY))
        at = data.find(_SAMPLES_KEY, c)
    # Weights arrays lie between the samples arrays: search only there.
    gaps = [0] + [x for o, c, _ in regions for x in (o, c)] + [len(data)]
    for a, z in zip(gaps[::2], gaps[1::2]):
        at = data.find(_WEIGHTS_KEY, a, z)
        while at >= 0:
            o = at + len(_WEIGHTS_KEY) - 1
            e = data.find(b"]", o, z)
            if e < 0:
                return None
            regions.append((o, e + 1, _WEIGHTS_KEY))
            at = data.find(_WEIGHTS_KEY, e + 1, z)
    if not regions:
        return None
    regions.sort()
    if any(y[0] < x[1] for x, y in zip(regions, regions[1:])):
        return None
    pieces, last, samples, counts, weights = [], 0, [], [], []
    for o, c, key in regions:
        pieces.append(data[last:o])
        pieces.append(b"null")
        last = c
        if key is _WEIGHTS_KEY:
            weights.append((o, c))
            continue
        for a in range(o, c, _CHUNK):  # only digits, signs, commas, brackets (bounded copies)
            if data[a:min(c, a + _CHUNK)].translate(None, _STACK_BYTES):
                return None
        if c - o == 2:  # "[]"
            samples.append((o, c))
            counts.append(0)
            continue
        if data[o + 1:o + 2] != b"[":
            return None
        # One '[' and one ']' per sample: a nested list or a scalar between samples
        # then shows as a count of '],[' splits that differs (checked by the reader).
        n = data.count(b"[", o + 1, c - 1)
        if data.count(b"]", o + 1, c - 1) != n:
            return None
        samples.append((o, c))
        counts.append(n)
    pieces.append(data[last:])
    return _Compact(b"".join(pieces), samples, counts, weights)


def _compact_places(doc, found: _Compact, data: bytes):
    """``(samples_of, weights_of)`` when the arrays ``found`` are, in order, the profiles'
    ``samples``/``weights`` of the parsed skeleton ``doc``; None otherwise."""
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    if not isinstance(profiles, list):
        return None
    if any(isinstance(p, dict) and any(k in p and p[k] is not None for k in ("samples", "weights"))
           for p in profiles):
        return None  # an array the key search did not find (blanks around it): scan
    s_idx = [i for i, p in enumerate(profiles) if isinstance(p, dict) and "samples" in p
             and p["samples"] is None]
    w_idx = [i for i, p in enumerate(profiles) if isinstance(p, dict) and "weights" in p
             and p["weights"] is None]
    sk = found.skeleton
    if len(s_idx) != len(found.samples) or len(w_idx) != len(found.weights) or \
            sk.count(b'"samples":null') != len(s_idx) or sk.count(b'"weights":null') != len(w_idx):
        return None  # an array elsewhere in the document, or a null of the user's own
    samples_of = {}
    for i, (o, c), n in zip(s_idx, found.samples, found.counts):
        def blocks(start=o + 2, end=c - 2, n=n):
            """Blocks of samples' bytes (between '[' and ']'), cut at '],[' about every
            _CHUNK bytes."""
            a = start
            while n and a <= end:
                z = min(end, a + _CHUNK)
                if z < end:
                    cut = data.rfind(b"],[", a, z)
                    if cut <= a:
                        cut = data.find(b"],[", z, end)
                    z = end if cut < 0 else cut
                yield data[a:z].split(b"],[")
                a = z + 3
        samples_of[i] = (n, blocks)
    weights_of = {i: (o, c - 1) for i, (o, c) in zip(w_idx, found.weights)}
    return samples_of, weights_of


def _locate_scanned(data: bytes, path, block: int):
    """(skeleton, samples_of, weights_of) found with :func:`jsonscan.scan`."""
    s = jsonscan.scan(data)
    _check_complete(data, s, path)
    partner = jsonscan.match_pairs(s)
    root = _root_keys(data, s, partner, path)
    if "profiles" not in root or s.kind[root["profiles"]] != jsonscan.LBRACKET:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="(root)",
                                             detail="no 'profiles' array (not a speedscope file?)"))
    p_open = root["profiles"]
    p_close = partner[p_open]
    lo, hi = s.pos[p_open], s.pos[p_close]
    # Profile objects: '{' at level 3 inside the profiles array.
    in_range = (s.pos > lo) & (s.pos < hi)
    prof_open = np.flatnonzero(in_range & (s.kind == jsonscan.LBRACE) & (s.level == 3))
    colons = np.flatnonzero(in_range & (s.kind == jsonscan.COLON) & (s.level == 3))
    big: dict[tuple[int, str], tuple[int, int]] = {}
    for c in colons:
        key = jsonscan.key_before(data, s, int(c))
        if key not in ("samples", "weights") or c + 1 >= len(s.pos):
            continue
        nxt = c + 1
        if s.kind[nxt] != jsonscan.LBRACKET or s.pos[nxt] != jsonscan.skip_ws(data, int(s.pos[c]) + 1):
            continue
        k = int(np.searchsorted(s.pos[prof_open], s.pos[c])) - 1
        big[(k, key)] = (int(nxt), int(partner[nxt]))
    # The skeleton: the document with those arrays replaced by null.
    pieces, last = [], 0
    for (_, _), (o, c) in sorted(big.items(), key=lambda kv: s.pos[kv[1][0]]):
        pieces.append(data[last:s.pos[o]])
        pieces.append(b"null")
        last = int(s.pos[c]) + 1
    pieces.append(data[last:])
    # Every sample's '[': level 5 (root 1, profiles 2, a profile 3, its samples 4).
    inner_all = np.flatnonzero((s.kind == jsonscan.LBRACKET) & (s.level == 5))
    inner_pos = s.pos[inner_all]
    samples_of, weights_of = {}, {}
    for (i, key), (so, sc) in big.items():
        if key == "weights":
            weights_of[i] = (int(s.pos[so]), int(s.pos[sc]))
            continue
        where = f"profiles[{i}]"
        lo_i, hi_i = np.searchsorted(inner_pos, [s.pos[so], s.pos[sc]])
        inner_open = inner_all[lo_i:hi_i]
        inner_close = partner[inner_open]
        if (inner_close < 0).any():
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="a sample is not a list of frame indices"))
        if _has_scalars(data, s, so, sc, inner_open, inner_close):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="expected a list of lists of frame indices"))
        starts = s.pos[inner_open] + 1
        ends = s.pos[inner_close]
        n = len(inner_open)

        def blocks(starts=starts, ends=ends, n=n):
            for a in range(0, n, block):
                z = min(n, a + block)
                # C-level loops only. Compact JSON ('],[' between samples) splits in one
                # call; otherwise slice at the scanned positions.
                parts = data[starts[a]:ends[z - 1]].split(b"],[")
                if len(parts) != z - a:
                    parts = list(map(data.__getitem__, map(slice, starts[a:z].tolist(), ends[a:z].tolist())))
                yield parts
        samples_of[i] = (n, blocks)
    return b"".join(pieces), samples_of, weights_of


def _read_numbers(data: bytes, o: int, c: int, path, where: str) -> np.ndarray:
    """The JSON array of numbers at ``data[o:c+1]`` as float64."""
    import orjson

    try:
        w = np.asarray(orjson.loads(data[o:c + 1]), dtype=np.float64)
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where,
                                             detail=f"not a list of numbers ({exc})")) from exc
    if w.ndim != 1:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where, detail="not a flat list of numbers"))
    return w


def _parse_stacks(raw_stacks: list[bytes], ss_map, pseudo, n_frames, path, where):
    """Parse distinct sample byte strings into tuples of our frame ids (pseudo-frames
    removed), and the process chain the first stack carries."""
    import orjson

    import itertools

    try:  # one parse for all distinct stacks
        lists = orjson.loads(b"[[" + b"],[".join(raw_stacks) + b"]]") if raw_stacks else []
    except orjson.JSONDecodeError as exc:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail=f"unreadable stack ({exc})")) from exc
    if len(lists) != len(raw_stacks):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail="a sample is not a flat list of frame indices"))
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    # Only digits, signs, commas and blanks in the raw stacks means only integers (a
    # float, a string, true/false/null all bring another byte); the per-value check runs
    # only when that fails, to name the bad value.
    ints = not b"".join(raw_stacks).translate(None, b"0123456789-, \t\r\n") or \
        all(type(v) is int for v in itertools.chain.from_iterable(lists))
    if not ints:
        bad = next(v for v in itertools.chain.from_iterable(lists) if type(v) is not int)
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail=f"frame index {bad!r} is not an integer"))
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))
    if len(flat) and (flat.min() < 0 or flat.max() >= n_frames):
        bad = int(flat[(flat < 0) | (flat >= n_frames)][0])
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail=f"frame index {bad} outside 0..{n_frames - 1}"))
    mapped = ss_map[flat] if len(flat) else flat
    chain = None
    if pseudo and len(flat):
        first = np.flatnonzero(mapped < 0)
        if len(first):
            k = int(np.searchsorted(np.cumsum(lens), first[0], side="right"))
            a = int(lens[:k].sum())
            chain = [pseudo[int(v)] for v in flat[a:a + lens[k]] if int(v) in pseudo]
    keep = mapped >= 0
    ends = np.cumsum(lens)
    cs = np.zeros(len(flat) + 1, dtype=np.int64)
    np.cumsum(keep, out=cs[1:])
    kept_lens = cs[ends] - cs[ends - lens]
    vals = mapped[keep].tolist()
    out, a = [], 0
    for n in kept_lens.tolist():
        out.append(tuple(vals[a:a + n]))
        a += n
    return out, chain or []


def _has_scalars(data, s, so, sc, inner_open, inner_close) -> bool:
    """True when the samples array holds anything but lists separated by single commas."""
    gaps_start = np.concatenate([[s.pos[so] + 1], s.pos[inner_close] + 1]).astype(np.int64)
    gaps_end = np.concatenate([s.pos[inner_open], [s.pos[sc]]]).astype(np.int64)
    lengths = gaps_end - gaps_start
    total = int(lengths.sum())
    if total == 0:
        return len(inner_open) > 1  # two lists with no comma between them
    arr = np.frombuffer(data, dtype=np.uint8)
    first = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    idx = np.repeat(gaps_start - first, lengths) + np.arange(total)
    g = arr[idx]
    comma = g == ord(",")
    ws = (g == 32) | (g == 9) | (g == 10) | (g == 13)
    if not (comma | ws).all():
        return True
    cs = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(comma, out=cs[1:])
    commas = cs[first + lengths] - cs[first]
    want = np.ones(len(lengths), dtype=np.int64)
    want[0] = want[-1] = 0
    return not np.array_equal(commas, want)


def _check_complete(data, s: jsonscan.Structure, path) -> None:
    first = jsonscan.skip_ws(data, 0)
    if first >= len(data):
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    if s.end_in_string or s.end_level > 0:
        line, _ = jsonscan.line_col(data, len(data))
        detail = " inside a string" if s.end_in_string else f" with {s.end_level} bracket(s) still open"
        raise ProfileFileError(MSG_TRUNCATED.format(path=path, offset=len(data), line=line, detail=detail))
    if s.min_level < 0:
        raise ProfileFileError(MSG_BAD_JSON.format(path=path, detail="more closing than opening brackets"))


def _root_keys(data, s: jsonscan.Structure, partner, path) -> dict[str, int]:
    """Key -> index of the value's opening bracket (or -1 for a scalar) of the root object."""
    if not len(s.pos) or s.kind[0] != jsonscan.LBRACE or s.pos[0] != jsonscan.skip_ws(data, 0):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="(root)", detail="expected a JSON object"))
    out = {}
    for c in np.flatnonzero((s.kind == jsonscan.COLON) & (s.level == 1)):
        key = jsonscan.key_before(data, s, int(c))
        if key is None:
            continue
        nxt = int(c) + 1
        opens = nxt < len(s.pos) and s.kind[nxt] in (jsonscan.LBRACE, jsonscan.LBRACKET) \
            and s.pos[nxt] == jsonscan.skip_ws(data, int(s.pos[c]) + 1)
        out[key] = nxt if opens else -1
    return out


# ---------------------------------------------------------------------------- any sampled file
def read_sampled(path: str | os.PathLike) -> SampledProfile:
    """Read a speedscope or raw profile, whichever the file is."""
    data = read_bytes(path)
    fmt = sniff_bytes(data[: 1 << 16], path)
    if fmt == "speedscope":
        return read_speedscope(path, data)
    if fmt == "raw":
        return read_collapsed(path, data)
    raise ProfileFileError(f"{path}: a {fmt} file, not a sampled profile (speedscope or raw)")


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
