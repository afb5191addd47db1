"""Per-rank background writer: buffers rows from the training thread, appends them to
Arrow IPC streams every flush interval, and keeps the heartbeat fresh.

The training thread's per-step rows go into a preallocated :class:`StepBlock` written by
index, with no lock per row: slot ``n`` is filled and then published by one store of
``n + 1`` (atomic under the GIL); the writer reads the published slots of the blocks it
has not finished yet. Rare rows (a scalar logged outside a step) go through
:meth:`RankWriter.add` under a lock. Everything that costs time (building Arrow
batches, reading CUDA copies, file I/O) happens on the writer thread.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from .. import format as fmt
from .._fsutil import atomic_write_json, process_start_ticks


class PendingTensor:
    """A device->host copy in flight: a pinned CPU tensor and the CUDA event after it."""

    __slots__ = ("host", "event")

    def __init__(self, host, event):
        self.host = host
        self.event = event

    def resolve(self):
        self.event.synchronize()
        return self.host.numpy()


class RowLayout:
    """The constant columns of a recurring set of rows (a sampled step's layer statistics:
    order, module, module_type, stat), built once; their Arrow arrays are built by the
    writer thread the first time it writes them and kept."""

    __slots__ = ("columns", "arrays")

    def __init__(self, columns: tuple):
        self.columns = columns
        self.arrays: list | None = None


class ColumnRows:
    """The rows of one step given as columns: ``step``, a :class:`RowLayout` and the
    ``values`` (a numpy array or a :class:`PendingTensor`, one value per layout row),
    queued with :meth:`RankWriter.add` like one row and expanded by the writer thread."""

    __slots__ = ("step", "layout", "values")

    def __init__(self, step: int, layout: RowLayout, values):
        self.step = step
        self.layout = layout
        self.values = values


WRITE_ORDER = ("steps",) + tuple(t for t in fmt.TABLES if t != "steps")
BLOCK_STEPS = 256  # steps per StepBlock: one small allocation every 256 steps


class StepBlock:
    """Rows of up to :data:`BLOCK_STEPS` steps, one slot per step.

    The training thread writes slot ``n`` of ``rows`` with one tuple per step (one store,
    one object: the step's rows of every table are built from it by the writer thread) and
    then publishes the step with ``n += 1``::

        (step, wall_time, duration_s, gap_s, comm_s, ok,   # the steps row
         norms,    # the gradient norms (a list, a PendingTensor) or None
         memory,   # on CPU the RSS in bytes (or None); else the whole memory row
         scalars,  # the step's (step, key, value, wall_time) rows, or None
         lr)       # one parameter group's learning rate (a float), a list of
                   # (key, lr) of several groups, or None

    The writer thread reads slots ``taken .. n`` and advances ``taken``. A block is
    never reused, so slots need no reset.
    """

    __slots__ = ("n", "taken", "rows")

    def __init__(self):
        self.n = 0
        self.taken = 0
        self.rows = [None] * BLOCK_STEPS

    def take(self) -> dict[str, list]:
        """The rows of the slots published since the last take (writer thread)."""
        a, b = self.taken, self.n
        self.taken = b
        if a == b:
            return {}
        steps, memory, grads, scalars = [], [], [], []
        for r in self.rows[a:b]:
            step, wall, norms, mem, rows, lr = r[0], r[1], r[6], r[7], r[8], r[9]
            steps.append(r[:6])
            memory.append(mem if type(mem) is tuple else (step, wall, "cpu", None, None, None, mem))
            if norms is not None:
                grads.append((step, norms))
            if rows:
                scalars.extend(rows)
            if lr is not None:
                if type(lr) is float:
                    scalars.append((step, "lr", lr, wall))
                else:
                    scalars.extend((step, k, v, wall) for k, v in lr)
        return {"steps": steps, "memory": memory, "grads": grads, "scalars": scalars}


class RankWriter:
    """Writes one rank's tables, events and heartbeat under ``ranks/<rank>/``.

    Parameters
    ----------
    rank_dir : Path
        The rank's directory; created if missing.
    n_layers : int
        Number of entries in each gradient-norm row (parameters plus the total).
    flush_every_s : float
        Interval between flushes to disk (and heartbeats).
    """

    def __init__(self, rank_dir: Path, *, n_layers: int, flush_every_s: float = 2.0):
        # Import the writer's libraries here, not on the writer thread: a first import
        # there would hold the import lock and delay the first flush by its duration.
        import numpy  # noqa: F401
        import pyarrow.ipc  # noqa: F401

        self.rank_dir = Path(rank_dir)
        self.rank_dir.mkdir(parents=True, exist_ok=True)
        self.segment = fmt.next_segment(self.rank_dir)
        self.n_layers = n_layers
        self.flush_every_s = max(0.05, float(flush_every_s))
        self._flush_lock = threading.Lock()
        self._flush_owner: int | None = None  # the thread flushing now (under the lock)
        self._deferred: list = []  # (thread, fn): run by that thread once its flush ends
        # rows added one by one (deque.append is atomic under the GIL: no lock per row, which
        # matters to debugkit.serve's request threads); the writer pops what it finds
        self._bufs: dict[str, deque] = {t: deque() for t in fmt.TABLES}
        self.block = StepBlock()  # the block the training thread fills now
        self._full: deque[StepBlock] = deque()  # filled blocks not yet written
        self._writers: dict[str, Any] = {}
        self._sinks: dict[str, Any] = {}
        self._wake = threading.Event()
        self._stop = False
        self._state = fmt.STATE_RUNNING
        self._last_step: int | None = None
        self._error: BaseException | None = None
        self._pid = os.getpid()
        self._host = socket.gethostname()
        self._start_ticks = process_start_ticks(self._pid)
        self._events_path = self.rank_dir / fmt.segment_name(fmt.EVENTS_PREFIX, self.segment)
        self._write_heartbeat()
        self._thread = threading.Thread(target=self._loop, name="debugkit-writer", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- training thread
    def add(self, table: str, row: tuple) -> None:
        """Queue one row (a tuple in the table's column order; grads: ``(step, values)``)."""
        self._bufs[table].append(row)

    def appender(self, table: str):
        """``add`` bound to one table: a callable that queues one row (one C call, for a
        caller that adds a row per request)."""
        return self._bufs[table].append

    def next_block(self) -> StepBlock:
        """Hand the current (full) block to the writer and start a new one."""
        self._full.append(self.block)
        self.block = StepBlock()
        return self.block

    def set_step(self, step: int) -> None:
        self._last_step = step

    def event(self, kind: str, **fields: Any) -> None:
        """Append one event line to the rank's events file, immediately (events are rare)."""
        rec = {"time": time.time(), "kind": kind, **fields}
        line = json.dumps(rec, default=repr) + "\n"
        with open(self._events_path, "a", encoding="utf-8") as f:
            f.write(line)

    def flush(self, timeout: float | None = None) -> bool:
        """Write everything queued so far, now, from the calling thread.

        With ``timeout``, wait at most that long for a flush in progress (a signal
        handler that interrupted the training thread's own flush would wait forever);
        returns whether this flush ran.
        """
        if timeout is None:
            self._flush()
            return True
        if not self._flush_lock.acquire(timeout=timeout):
            return False
        self._flush_locked()
        return True

    def flushing_here(self) -> bool:
        """Whether the calling thread is inside a flush (a signal handler that interrupted
        it: waiting for the lock would wait for itself, and its rows are in that flush's
        hands)."""
        return self._flush_owner == threading.get_ident()

    def defer_until_flushed(self, fn) -> None:
        """Call ``fn()`` on this thread once the flush it interrupted has written its rows."""
        self._deferred.append((threading.get_ident(), fn))

    def close(self, state: str = fmt.STATE_FINISHED) -> None:
        """Flush, mark the rank's final state in its heartbeat and stop the thread."""
        self._state = state
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=60)
        self._flush()
        for w in self._writers.values():
            w.close()
        for s in self._sinks.values():
            s.close()
        self._writers.clear()
        self._sinks.clear()
        self._write_heartbeat()

    @property
    def error(self) -> BaseException | None:
        """The exception that stopped the writer thread, if any."""
        return self._error

    # ------------------------------------------------------------------- writer thread
    def _loop(self) -> None:
        while not self._stop:
            self._wake.wait(self.flush_every_s)
            if self._stop:
                break
            try:
                self._flush()
                self._write_heartbeat()
            except BaseException as exc:  # keep training alive; report at close
                self._error = exc

    def _write_heartbeat(self) -> None:
        atomic_write_json(
            self.rank_dir / fmt.HEARTBEAT,
            {
                "state": self._state,
                "pid": self._pid,
                "host": self._host,
                "process_start_ticks": self._start_ticks,
                "time": time.time(),
                "step": self._last_step,
                "flush_every_s": self.flush_every_s,
            },
        )

    def _flush(self) -> None:
        self._flush_lock.acquire()
        self._flush_locked()

    def _flush_locked(self) -> None:
        """Flush with the lock held, release it, then run what a signal handler deferred."""
        self._flush_owner = threading.get_ident()
        try:
            self._flush_unlocked()
        finally:
            self._flush_owner = None
            self._flush_lock.release()
        if self._deferred:  # only ever the thread that deferred runs it (a handler's thread)
            me = threading.get_ident()
            mine = [fn for t, fn in self._deferred if t == me]
            self._deferred = [(t, fn) for t, fn in self._deferred if t != me]
            for fn in mine:
                fn()

    def _flush_unlocked(self) -> None:
        # The current block first: every block handed over before it is in _full
        # by now (and it may be too, if it filled meanwhile), so rows stay in order.
        cur = self.block
        blocks = []
        while self._full:
            blocks.append(self._full.popleft())
        if not any(b is cur for b in blocks):
            blocks.append(cur)
        bufs = {t: [q.popleft() for _ in range(len(q))] for t, q in self._bufs.items()}
        rows: dict[str, list] = {t: [] for t in fmt.TABLES}
        for b in blocks:
            for table, part in b.take().items():
                rows[table] += part
        for table, extra in bufs.items():
            if extra:
                if rows[table]:  # rows added outside a step: keep the table in step order
                    extra = sorted(rows[table] + extra, key=_row_step)
                    rows[table] = []
                rows[table] += extra
        # The steps table first: a step row says "this step happened", the other
        # tables say what it measured. A process killed between two tables' writes
        # then leaves the steps table ahead (a step drawn without its gradients),
        # never gradients or scalars of steps the run does not list.
        for table in WRITE_ORDER:
            if rows[table]:
                self._write_rows(table, rows[table])

    def _stream(self, table: str):
        w = self._writers.get(table)
        if w is None:
            import pyarrow as pa

            path = self.rank_dir / fmt.segment_name(table, self.segment)
            sink = pa.OSFile(str(path), mode="w")
            w = pa.ipc.new_stream(sink, fmt.table_schema(table))
            self._sinks[table] = sink
            self._writers[table] = w
        return w

    def _write_rows(self, table: str, rows: list) -> None:
        import numpy as np
        import pyarrow as pa

        schema = fmt.table_schema(table)
        if any(isinstance(r, ColumnRows) for r in rows):
            plain = [r for r in rows if not isinstance(r, ColumnRows)]
            if plain:
                self._write_rows(table, plain)
            for r in rows:
                if isinstance(r, ColumnRows):
                    self._write_columns(table, schema, r)
            return
        if table == "grads":
            steps, values = [], []
            for step, vals in rows:
                if isinstance(vals, PendingTensor):
                    vals = vals.resolve()
                steps.append(step)
                values.append(np.asarray(vals, dtype=np.float64))
            n = self.n_layers
            cols = [np.repeat(np.asarray(steps, dtype=np.int64), n),
                    np.tile(np.arange(n, dtype=np.int32), len(steps)),
                    np.concatenate(values)]
            arrays = [_arrow_array(c, f.type) for c, f in zip(cols, schema)]
        else:
            cols = list(zip(*rows))
            if table == "scalars":
                cols[2] = [_to_float(v) for v in cols[2]]
            arrays = [_arrow_array(c, f.type) for c, f in zip(cols, schema)]
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self._stream(table).write_batch(batch)


    def _write_columns(self, table: str, schema, r: ColumnRows) -> None:
        import numpy as np
        import pyarrow as pa

        layout = r.layout
        if layout.arrays is None:
            layout.arrays = [_arrow_array(c, f.type) for c, f in zip(layout.columns, list(schema)[1:])]
        values = r.values.resolve() if isinstance(r.values, PendingTensor) else r.values
        n = len(layout.columns[0])
        arrays = [_arrow_array(np.full(n, r.step, dtype=np.int64), schema[0].type),
                  *layout.arrays,
                  _arrow_array(np.asarray(values, dtype=np.float64), schema[-1].type)]
        self._stream(table).write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))


def _arrow_array(values, typ):
    """Build an Arrow array from buffers.

    ``pa.array`` would import pandas on first use (pyarrow's pandas shim checks its
    input type); a training process should not pay that, so arrays are assembled from
    numpy buffers directly. ``None`` entries become nulls.
    """
    import numpy as np
    import pyarrow as pa

    n = len(values)
    if isinstance(values, np.ndarray):
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(np.ascontiguousarray(values))])
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if pa.types.is_string(typ):
        enc = [v.encode("utf-8") if v is not None else b"" for v in values]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum([len(b) for b in enc], out=offsets[1:])
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets),
                                              pa.py_buffer(b"".join(enc))])
    if pa.types.is_boolean(typ):
        bits = np.packbits(np.fromiter((bool(v) for v in values), dtype=bool, count=n),
                           bitorder="little")
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(bits)])
    dtype = typ.to_pandas_dtype()
    data = np.fromiter((0 if v is None else v for v in values), dtype=dtype, count=n)
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(data)])


def _row_step(row) -> int:
    return row.step if isinstance(row, ColumnRows) else row[0]


def _to_float(v: Any) -> float:
    if isinstance(v, PendingTensor):
        return float(v.resolve().reshape(-1)[0])
    if hasattr(v, "item"):
        return float(v.item())
    return float(v)
