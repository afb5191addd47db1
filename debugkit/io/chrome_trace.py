"""Read torch.profiler chrome traces (``export_chrome_trace``, ``tensorboard_trace_handler``)
without holding every event as a Python object.

The file (plain or gzip) is read in chunks of a few MB. :func:`jsonscan.scan` finds where
each complete event object of ``traceEvents`` ends; the run of complete events in a chunk
is parsed by orjson as one batch, its fields are appended to typed columns (``array``
buffers; strings interned), and the batch is dropped. Peak memory is a chunk, a batch
and the columns (a few dozen bytes per event), whatever the file's size.

Both chrome-trace layouts are read: the JSON object format (``{"traceEvents": [...],
...}``; the other top-level fields become :attr:`ChromeTrace.meta`) and the bare JSON
array format (whose closing ``]`` may be missing, as the format allows).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ProfileFileError
from . import jsonscan
from .profiles import MSG_BAD_JSON, MSG_EMPTY_FILE, MSG_SCHEMA, open_binary

MSG_TRACE_TRUNCATED = ("{path}: the trace ends early at byte {offset}, inside traceEvents after "
                       "{events} complete event(s); the file was probably cut off while being "
                       "written (a killed process, a full disk)")
MSG_NO_EVENTS = "{path}: the trace holds no events (traceEvents is empty)"
MSG_NOT_TRACE = "{path}: no 'traceEvents' array at the top level (not a chrome trace?)"
MSG_BAD_EVENT = "{path}: traceEvents[{index}]: {detail}"
MSG_BETWEEN = "{path}: byte {offset}: unexpected {text!r} between events"

CHUNK = 4 << 20
# Kineto's categories of device-side events.
GPU_KERNEL_CATS = frozenset({"kernel", "Kernel"})
GPU_MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
GPU_CATS = GPU_KERNEL_CATS | GPU_MEMORY_CATS | {"gpu_user_annotation"}
# Integer arguments kept per event (Kineto names), -1 when absent.
INT_ARGS = {"External id": "external_id", "correlation": "correlation", "stream": "stream",
            "device": "device", "Sequence number": "sequence"}


@dataclass
class ChromeTrace:
    """The events of a chrome trace.

    Attributes
    ----------
    events : DataFrame
        One row per duration (``X``, and ``B``/``E`` paired into spans) or instant
        (``i``/``I``) event, in file order: ``ph`` (``X`` or ``i``), ``cat``, ``name``,
        ``pid``, ``tid`` (categorical strings), ``ts_us`` (float64, microseconds),
        ``dur_us`` (float64; 0 for instants), ``external_id``, ``correlation``,
        ``stream``, ``device``, ``sequence`` (int64, -1 when absent), ``input_dims``,
        ``input_types`` (JSON text of ``Input Dims`` / ``Input type`` when shapes were
        recorded, else ``""``).
    processes, threads : dict
        Names from ``M`` events: ``{pid: name}``, ``{(pid, tid): name}`` (string keys).
    n_events : int
        Every entry of ``traceEvents`` (metadata and flow events included).
    meta : dict
        The top-level fields other than ``traceEvents`` (``schemaVersion``,
        ``deviceProperties``, ``distributedInfo``, ``traceName`` ...).
    """

    events: Any
    processes: dict
    threads: dict
    n_events: int
    meta: dict = field(default_factory=dict)


class _Columns:
    """Typed, append-only columns for events; strings are interned to int codes."""

    STR = ("ph", "cat", "name", "pid", "tid", "input_dims", "input_types")

    def __init__(self):
        self.codes = {k: array("i") for k in self.STR}
        self.vocab = {k: {} for k in self.STR}
        self.ts = array("d")
        self.dur = array("d")
        self.ints = {v: array("q") for v in INT_ARGS.values()}

    def code(self, col: str, value: str) -> int:
        voc = self.vocab[col]
        c = voc.get(value)
        if c is None:
            c = voc[value] = len(voc)
        return c

    def __len__(self):
        return len(self.ts)


def _as_text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
    return str(v)


class _EventSink:
    """Takes parsed batches of event dicts and keeps only columns."""

    def __init__(self, path):
        self.path = path
        self.cols = _Columns()
        self.n = 0
        self.processes: dict[str, str] = {}
        self.threads: dict[tuple[str, str], str] = {}
        self.open_b: dict[tuple[str, str], list] = {}

    def add_batch(self, batch: list) -> None:
        """Append the fields of a batch of parsed events (dicts) to the columns."""
        import orjson

        cols = self.cols
        voc = cols.vocab
        v_ph, v_cat, v_name, v_pid, v_tid = (voc[k] for k in ("ph", "cat", "name", "pid", "tid"))
        v_dims, v_types = voc["input_dims"], voc["input_types"]
        a_ph, a_cat, a_name, a_pid, a_tid = (cols.codes[k].append for k in ("ph", "cat", "name", "pid", "tid"))
        a_dims, a_types = cols.codes["input_dims"].append, cols.codes["input_types"].append
        a_ts, a_dur = cols.ts.append, cols.dur.append
        int_cols = [(k, cols.ints[v].append) for k, v in INT_ARGS.items()]
        dumps = orjson.dumps
        timed = ("X", "i", "I", "B", "E")
        base = self.n
        for j, ev in enumerate(batch):
            if type(ev) is not dict:
                raise ProfileFileError(MSG_BAD_EVENT.format(path=self.path, index=base + j,
                                                        detail="not an object"))
            ph = ev.get("ph")
            if ph in timed:
                ts = ev.get("ts")
                if type(ts) is not float and type(ts) is not int:
                    raise ProfileFileError(MSG_BAD_EVENT.format(
                        path=self.path, index=base + j, detail=f"'ts' is {ts!r}, expected a number"))
                pid, tid = ev.get("pid"), ev.get("tid")
                if ph == "X":
                    dur = ev.get("dur", 0.0)
                    if type(dur) is not float and type(dur) is not int:
                        raise ProfileFileError(MSG_BAD_EVENT.format(
                            path=self.path, index=base + j,
                            detail=f"'dur' is {dur!r}, expected a number"))
                elif ph == "B":
                    self.open_b.setdefault((_key(pid), _key(tid)), []).append((ev, ts))
                    continue
                elif ph == "E":
                    stack = self.open_b.get((_key(pid), _key(tid)))
                    if not stack:
                        continue  # an end without a begin (the window cut the begin off)
                    ev, start = stack.pop()
                    dur = float(ts) - float(start)
                    ts = start
                    ph = "X"
                else:
                    ph = "i"
                    dur = 0.0
                # Interning, written out per column (this loop runs once per event).
                c = v_ph.get(ph)
                if c is None:
                    c = v_ph[ph] = len(v_ph)
                a_ph(c)
                x = ev.get("cat")
                c = v_cat.get(x)
                if c is None:
                    c = v_cat[x] = len(v_cat)
                a_cat(c)
                x = ev.get("name")
                c = v_name.get(x)
                if c is None:
                    c = v_name[x] = len(v_name)
                a_name(c)
                x = pid if type(pid) is int or type(pid) is str else _as_text(pid)
                c = v_pid.get(x)
                if c is None:
                    c = v_pid[x] = len(v_pid)
                a_pid(c)
                x = tid if type(tid) is int or type(tid) is str else _as_text(tid)
                c = v_tid.get(x)
                if c is None:
                    c = v_tid[x] = len(v_tid)
                a_tid(c)
                a_ts(ts)
                a_dur(dur)
                args = ev.get("args")
                if type(args) is dict:
                    for k, a in int_cols:
                        x = args.get(k)
                        a(x if type(x) is int else -1)
                    x = args.get("Input Dims")
                    if x is None:
                        a_dims(0)
                    else:
                        x = dumps(x)
                        c = v_dims.get(x)
                        if c is None:
                            c = v_dims[x] = len(v_dims)
                        a_dims(c)
                    x = args.get("Input type")
                    if x is None:
                        a_types(0)
                    else:
                        x = dumps(x)
                        c = v_types.get(x)
                        if c is None:
                            c = v_types[x] = len(v_types)
                        a_types(c)
                else:
                    for _, a in int_cols:
                        a(-1)
                    a_dims(0)
                    a_types(0)
            elif ph == "M":
                args = ev.get("args") if type(ev.get("args")) is dict else {}
                name = ev.get("name")
                if name == "process_name":
                    self.processes[_as_text(ev.get("pid"))] = _as_text(args.get("name"))
                elif name == "thread_name":
                    self.threads[(_as_text(ev.get("pid")), _as_text(ev.get("tid")))] = _as_text(args.get("name"))
            elif ph is None:
                raise ProfileFileError(MSG_BAD_EVENT.format(path=self.path, index=base + j,
                                                        detail="no 'ph' (event type)"))
        self.n += len(batch)

    def frame(self):
        """The columns as a DataFrame (see :class:`ChromeTrace`)."""
        import pandas as pd

        cols = self.cols
        data = {}
        for k in _Columns.STR:
            raw = np.frombuffer(cols.codes[k], dtype=np.int32) if len(cols.codes[k]) else np.zeros(0, np.int32)
            keys = list(cols.vocab[k])
            labels = [x.decode() if isinstance(x, bytes) else _as_text(x) for x in keys]
            # Different raw values may read the same as text (pid 0 and "0"): merge them.
            uniq = list(dict.fromkeys(labels))
            if len(uniq) != len(labels):
                pos = {lab: i for i, lab in enumerate(uniq)}
                remap = np.array([pos[lab] for lab in labels], dtype=np.int32)
                raw = remap[raw] if len(raw) else raw
            data[k] = pd.Categorical.from_codes(raw, categories=pd.Index(uniq, dtype=object))
        data["ts_us"] = np.frombuffer(cols.ts, dtype=np.float64) if len(cols.ts) else np.zeros(0)
        data["dur_us"] = np.frombuffer(cols.dur, dtype=np.float64) if len(cols.dur) else np.zeros(0)
        for v in INT_ARGS.values():
            data[v] = np.frombuffer(cols.ints[v], dtype=np.int64) if len(cols.ints[v]) else np.zeros(0, np.int64)
        order = ["ph", "cat", "name", "pid", "tid", "ts_us", "dur_us", *INT_ARGS.values(),
                 "input_dims", "input_types"]
        return pd.DataFrame({k: data[k] for k in order})


def _key(v):
    """A hashable interning key for a pid/tid (ints and strings as they are)."""
    return v if type(v) is int or type(v) is str else _as_text(v)


def _fix_absent_codes(sink: _EventSink) -> None:
    """Make code 0 of the shape columns the empty string before any value is interned."""
    for k in ("input_dims", "input_types"):
        sink.cols.vocab[k][b""] = 0


def read_chrome_trace(path: str | os.PathLike, chunk_size: int = CHUNK) -> ChromeTrace:
    """Stream a chrome trace (``.json`` or ``.json.gz``) into a :class:`ChromeTrace`.

    Raises
    ------
    ProfileFileError
        Truncated JSON, an event that is not an object or lacks ``ph``/``ts``, no
        ``traceEvents``, or no events at all.
    """
    import orjson

    sink = _EventSink(path)
    _fix_absent_codes(sink)
    with open_binary(path) as f:
        reader = _ChunkReader(f, path, chunk_size)
        prefix, level, array_root = reader.find_events()
        tail = reader.stream_events(level, sink, array_root)
    meta: dict = {}
    if not array_root:
        try:
            doc = orjson.loads(prefix + b"]" + tail)
        except orjson.JSONDecodeError as exc:
            raise ProfileFileError(MSG_BAD_JSON.format(path=path, detail=f"after traceEvents: {exc}")) from exc
        meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    if sink.n == 0:
        raise ProfileFileError(MSG_NO_EVENTS.format(path=path))
    events = sink.frame()
    return ChromeTrace(events, sink.processes, sink.threads, sink.n, meta)


class _ChunkReader:
    def __init__(self, f, path, chunk_size):
        self.f = f
        self.path = path
        self.chunk_size = chunk_size
        self.offset = 0  # file offset of self.buf[0]
        self.buf = b""
        self.eof = False

    def more(self, at_least: int | None = None) -> bool:
        if self.eof:
            return False
        try:
            data = self.f.read(max(self.chunk_size, at_least or 0))
        except (OSError, EOFError) as exc:
            raise ProfileFileError(MSG_TRACE_TRUNCATED.format(
                path=self.path, offset=self.offset + len(self.buf), events="?")
                + f" (gzip stream: {exc})") from exc
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def find_events(self) -> tuple[bytes, int, bool]:
        """Read until the ``[`` that opens the events; return (document prefix up to and
        including it, the events' level, whether the root is the array itself)."""
        while True:
            start = jsonscan.skip_ws(self.buf, 0)
            if self.buf[start:start + 3] == b"\xef\xbb\xbf":
                start = jsonscan.skip_ws(self.buf, start + 3)
            if start < len(self.buf):
                break
            if not self.more():
                raise ProfileFileError(MSG_EMPTY_FILE.format(path=self.path))
        first = self.buf[start:start + 1]
        if first == b"[":
            return self.take(start + 1), 1, True
        if first != b"{":
            raise ProfileFileError(MSG_NOT_TRACE.format(path=self.path))
        while True:
            s = jsonscan.scan(self.buf, start, len(self.buf))
            for c in np.flatnonzero((s.kind == jsonscan.COLON) & (s.level == 1)):
                if jsonscan.key_before(self.buf, s, int(c)) != "traceEvents":
                    continue
                v = jsonscan.skip_ws(self.buf, int(s.pos[c]) + 1)
                if v >= len(self.buf):
                    break  # need more bytes to see the value
                if self.buf[v:v + 1] != b"[":
                    raise ProfileFileError(MSG_SCHEMA.format(path=self.path, where="traceEvents",
                                                         detail="not an array"))
                return self.take(v + 1), 2, False
            if s.end_level <= 0 and len(s.pos) and not s.end_in_string:
                raise ProfileFileError(MSG_NOT_TRACE.format(path=self.path))
            if not self.more():
                raise ProfileFileError(MSG_TRACE_TRUNCATED.format(
                    path=self.path, offset=self.offset + len(self.buf), events=0))

    def take(self, n: int) -> bytes:
        head, self.buf = self.buf[:n], self.buf[n:]
        self.offset += n
        return head

    def stream_events(self, level: int, sink: _EventSink, array_root: bool) -> bytes:
        """Feed complete events to ``sink``; return the bytes after the closing ``]``."""
        import orjson

        while True:
            s = jsonscan.scan(self.buf, 0, len(self.buf), base_level=level)
            # The events array closes where a ']' drops below its level.
            closes = np.flatnonzero((s.kind == jsonscan.RBRACKET) & (s.level == level))
            end_arr = int(s.pos[closes[0]]) if len(closes) else None
            ends = (s.kind == jsonscan.RBRACE) & (s.level == level + 1)
            if end_arr is not None:
                ends &= s.pos < end_arr
            ev_end = np.flatnonzero(ends)
            if len(ev_end):
                last = int(s.pos[ev_end[-1]])
                first_open = np.flatnonzero((s.kind == jsonscan.LBRACE) & (s.level == level + 1))
                first = int(s.pos[first_open[0]])
                self._check_gap(0, first)
                try:
                    batch = orjson.loads(b"[" + self.buf[first:last + 1] + b"]")
                except orjson.JSONDecodeError as exc:
                    raise ProfileFileError(MSG_BAD_JSON.format(
                        path=self.path, detail=f"in traceEvents near byte {self.offset + first}: {exc}")) from exc
                sink.add_batch(batch)
                del batch
                self.take(last + 1)
                continue
            if end_arr is not None:
                self._check_gap(0, end_arr)
                self.take(end_arr + 1)
                while self.more():
                    pass
                return self.buf
            if s.min_level < level:
                raise ProfileFileError(MSG_BAD_JSON.format(
                    path=self.path, detail=f"unbalanced brackets in traceEvents near byte {self.offset}"))
            if not self.more(at_least=len(self.buf)):
                rest = self.buf.strip(b" \t\r\n,")
                if array_root and not rest:
                    return b""  # the array format may omit its closing bracket
                raise ProfileFileError(MSG_TRACE_TRUNCATED.format(
                    path=self.path, offset=self.offset + len(self.buf), events=sink.n))

    def _check_gap(self, a: int, b: int) -> None:
        gap = self.buf[a:b]
        if gap.strip(b" \t\r\n,"):
            raise ProfileFileError(MSG_BETWEEN.format(path=self.path, offset=self.offset + a,
                                                  text=gap.strip(b" \t\r\n,").decode("utf-8", "replace")[:40]))
