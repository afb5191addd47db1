"""Inference-side recording: ``debugkit.serve(model, run_dir)`` (an ``inference`` run).

A served model gets one row per request in ``ranks/<rank>/requests-<seg>.arrows``
(latency, outcome, input signature, memory before/after; columns in
:func:`debugkit.format.table_schema`) and a failure capture of each failing request
(``failures/<id>/``, the inputs in safetensors, no pickle) within a bounded capture
budget. See docs/serving.md.

The request thread does only what must happen there: two ``perf_counter`` reads (the
wall time is derived from them), a copy of the model device's RNG state, the input
signature and the output's finiteness; memory
(``/proc/self/statm`` on CPU, the CUDA allocator's counter on GPU) is read before and
after a request only when ``memory_every_s`` has passed since the last reading. The row
is appended to the per-rank background writer's queue
(:class:`debugkit.recorder.writer.RankWriter`, which wakes on its own timer, never per
request) and a capture goes to a capture thread, so Arrow, safetensors and file I/O never
run on it. Next to a real model this code runs with cold caches (the model's weights and
kernels evict it), where each part costs several times what it costs in a tight loop:
``bench/serve_overhead.py`` measures it end to end, and this path is kept short for that
reason (docs/serving.md#what-it-costs).
"""

from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import queue
import threading
import time
import uuid
import warnings
import weakref
from collections import deque
from typing import Any

from .. import format as fmt
from .._fsutil import atomic_write_json
from ..errors import DebugkitWarning, InvalidInputError
from ..location import as_path, is_url
from .blas import INT32_MAX as _INT32_MAX
from .blas import LEN_MAX as _LEN_MAX
from .blas import LENGTHS as _LENGTHS
from .blas import ONE_P as _ONE_P
from .blas import blas_sdot as _blas_sdot
from .blas import tensor_guards as _tensor_guards
from .capture import describe_callable, state_dict_sha256, take_rng_state, write_capture
from .env import collect_env
from .memhistory import memory_capacity
from .recorder import _PAGE, _RSS, _resumed, _unwrap
from .serve_args import DEFAULT_CAPTURE_BUDGET as DEFAULT_CAPTURE_BUDGET
from .serve_args import DEFAULT_MEMORY_EVERY_S as DEFAULT_MEMORY_EVERY_S
from .serve_args import MEMORY_EVERY_ENV as MEMORY_EVERY_ENV
from .serve_args import MSG_BUDGET as MSG_BUDGET
from .serve_args import MSG_MEMORY_EVERY as MSG_MEMORY_EVERY
from .serve_args import MSG_THRESHOLD as MSG_THRESHOLD
from .serve_args import check_budget, check_threshold, memory_every
from .serve_inputs import _INPUTS_CACHE, _call_of, _float_dtypes, _nonfinite_outputs, describe_inputs
from .writer import RankWriter

#: A ``capture_dropped`` event is written at most this often (and at close).
DROPPED_EVENT_EVERY_S = 60.0
#: Captures waiting for the capture thread; beyond this a failure storm's captures are
#: dropped (and counted) rather than held in memory.
MAX_PENDING_CAPTURES = 64

MSG_CLOSED = "debugkit.serve: the recorder is closed; no more requests can be recorded"
MSG_CALL = "call={value!r}: expected one of 'kwargs', 'args', 'single'"
MSG_ROUTE = "route={value!r}: expected a string or None"
CALLS = ("kwargs", "args", "single", "args_kwargs")
_pread = os.pread
_c_int64 = ctypes.c_int64
_new = object.__new__
#: Request.out before output() is called (an output of None is an output)
_NO_OUTPUT: Any = object()
_F32: Any = None  # torch.float32 (set by the first recorder: torch is imported lazily)



# ---------------------------------------------------------------------------- request
class Request:
    """One request being recorded (returned by :meth:`ServeRecorder.request`).

    Inside the ``with`` block call :meth:`output` with the model's output (checked for
    NaN/Inf) and :meth:`fallback` when the service answers some other way. After the
    block, ``outcome`` (``ok | error | nonfinite | fallback``), ``failure_id`` (the
    capture's id, or None) and ``latency_ms`` say what was recorded.
    """

    # the defaults are class attributes: a request sets only what it changes (each
    # attribute written costs on the request thread); rec.request() and wrap() build it
    # without calling __init__ (one Python frame less per request)
    call: str | None = None
    route: str | None = None
    inputs: Any = None
    request = -1
    wall_time = 0.0
    t0 = 0.0
    mem_before: int | None = None
    #: a clone of the CPU generator (a CPU model; its state tensor before torch 2.4) or
    #: take_rng_state()'s dict; the capture thread turns a clone into the state tensor
    rng: Any = None
    fallback_name: str | None = None
    fallback_error: BaseException | None = None
    #: the output given to output() (the class's _NO_OUTPUT: none given)
    out: Any = _NO_OUTPUT
    outcome: str | None = None
    failure_id: str | None = None
    latency_ms: float | None = None
    #: (input signature, input element count), taken at the request's start
    signature: tuple[str, int] = ("", 0)

    def __init__(self, rec: ServeRecorder, inputs, call: str | None, route: str | None):
        self.rec = rec
        self.inputs = inputs
        self.call = call
        self.route = route

    def output(self, out):
        """Record the model's output (its floating tensors are checked for NaN/Inf);
        returns it unchanged."""
        self.out = out
        return out

    def fallback(self, name: str, error: BaseException | None = None) -> None:
        """Mark the request as answered by a fallback (``"cache"``, ``"cpu_model"`` ...).

        ``error``: the exception that made the service fall back, if any; its type is
        recorded, and the request is captured like a failing one (within the budget).
        """
        if not isinstance(name, str) or not name:
            raise InvalidInputError(f"r.fallback({name!r}): expected a non-empty name")
        self.fallback_name = name
        self.fallback_error = error

    # The request thread's whole path is these two methods (further Python frames only for a
    # memory reading on CUDA, an input signature not seen before, an output that is
    # not one tensor, or a failure): next to a model, each call and object touched costs
    # several times its tight-loop cost (docs/serving.md#what-it-costs).
    def __enter__(self):
        rec = self.rec
        if rec._closed:
            raise InvalidInputError(MSG_CLOSED)
        self.request = next(rec._seq)
        # the input signature here, before the model: the lookup then finds the caches the
        # previous request's own lookup left, not the model's (after a model it measured ~9 us
        # against ~1 us in a loop; end to end the move is within the bench's noise:
        # docs/serving.md#fifth-round-the-20-ms-figure-and-the-cold-path), and it describes
        # the inputs as the request got them
        inputs = self.inputs
        try:
            # one tensor (wrap(model)(x)) or a dict of one tensor (most services): one
            # cache lookup by its (key,) dtype and shape, without describe_inputs' frames
            # (see describe_inputs; a first sighting goes there and fills the cache)
            T = rec._Tensor
            t = type(inputs)
            if t is T:
                hit = _INPUTS_CACHE.get((inputs.dtype, inputs.shape))
            elif t is dict and len(inputs) == 1:
                for k, v in inputs.items():
                    hit = _INPUTS_CACHE.get((k, v.dtype, v.shape)) if type(v) is T else None
            else:
                hit = None
            self.signature = hit if hit is not None else describe_inputs(inputs, T)
        except Exception:  # noqa: BLE001 - an odd input never breaks the request
            self.signature = (f"input:{type(inputs).__name__}", 0)
        if rec.capture:  # a CPU model: a clone of the CPU generator (a dict at capture)
            clone = rec._cpu_rng
            self.rng = clone() if clone is not None else take_rng_state()
        now = time.perf_counter()
        if now >= rec._mem_next:  # a reading is due (a race between threads: both read)
            rec._mem_next = now + rec._mem_every
            # the wall clock is perf_counter() plus this offset, refreshed with each memory
            # reading (a time.time() call per request costs more with cold caches)
            rec._wall_offset = time.time() - now
            # on CPU the RSS read inline from the kept /proc/self/statm descriptor (the
            # two calls of rec._mem() cost ~1.3 us more per reading after a model)
            fd = rec._rss_fd
            self.mem_before = int(_pread(fd, 64, 0).split()[1]) * _PAGE if fd is not None else rec._mem()
            now = time.perf_counter()
        self.t0 = now
        return self

    def __exit__(self, exc_type, exc, tb):
        t1 = time.perf_counter()
        rec = self.rec
        T = rec._Tensor
        # the finiteness check first, right after the model: its torch call then finds the
        # caches the model's own last operation left (measured: docs/serving.md#benchmark)
        etype = None
        bad: list[str] = []
        out = self.out
        if exc is not None:
            outcome, etype = "error", type(exc).__name__
        elif self.fallback_name is not None:
            outcome = "fallback"
            if self.fallback_error is not None:
                etype = type(self.fallback_error).__name__
        else:
            outcome = "ok"
            if out is not _NO_OUTPUT and rec.check_finite:
                try:
                    fast = rec._fin_fast
                    if fast is not None and fast[0](out):
                        # one C call (see tensor_guards): the type, dispatch keys, dtype,
                        # sizes and strides of an output judged below a contiguous float32
                        # CPU tensor with memory, so one too, of fast[1]'s length
                        p = out.data_ptr()
                        total = rec._sdot(fast[1], p, _ONE_P, p, _ONE_P)
                        if total - total != 0 and not bool(rec._torch.isfinite(out).all()):
                            bad = ["output"]
                    elif type(out) is T and not out.requires_grad:
                        # one tensor (the usual case): its sum is finite iff every element
                        # is, confirmed element-wise only when it is not (see _nonfinite_outputs)
                        dtype = out.dtype
                        if dtype is _F32 and rec._sdot is not None and out.is_cpu and out.is_contiguous() \
                                and (n := out.numel()) <= _INT32_MAX and (p := out.data_ptr()):
                            # a contiguous float32 CPU tensor with memory (not an empty one
                            # nor a ZeroTensor, whose data pointer is 0): torch's BLAS dot of
                            # it with itself, without torch's dispatcher (see _blas_sdot); the
                            # length and stride by the addresses of c_int64s that are never
                            # written (threads share them; see _LENGTHS)
                            entry = _LENGTHS.get(n)
                            if entry is None:  # a length not seen before (entry keeps it alive)
                                c = _c_int64(n)
                                entry = (c, ctypes.addressof(c))
                                if len(_LENGTHS) < _LEN_MAX:
                                    _LENGTHS[n] = entry
                            total = rec._sdot(entry[1], p, _ONE_P, p, _ONE_P)
                            if total - total != 0 and not bool(rec._torch.isfinite(out).all()):
                                bad = ["output"]
                            if t1 >= rec._fin_next and rec._guards is not None:
                                # this output's form, for the next requests' one-call test
                                # (built at most once a second: a service whose output form
                                # changes would pay a construction per request)
                                rec._fin_next = t1 + 1.0
                                try:
                                    rec._fin_fast = (rec._guards(out, dynamic_dims_sizes=None,
                                                                 dynamic_dims_strides=None).check, entry[1], entry)
                                except Exception:  # noqa: BLE001 - no test: the calls above judge
                                    rec._guards = None
                            elif fast is not None:  # the form changed: no test until then
                                rec._fin_fast = None
                        elif dtype in rec._float_dtypes:
                            # tolist() of the 0-dim sum reads its value without a second
                            # dispatched op (item() is one: ~4 us more after a model)
                            total = out.sum().tolist()
                            if total - total != 0 and not bool(rec._torch.isfinite(out).all()):
                                bad = ["output"]
                    else:
                        bad = _nonfinite_outputs(out, rec._torch)
                except Exception:  # noqa: BLE001 - an odd output is not a failure of ours
                    bad = []
                if bad:
                    outcome = "nonfinite"
        if out is not _NO_OUTPUT:
            self.out = None  # the output is not kept past the request
        mem_before = self.mem_before
        if mem_before is None:
            mem_after = None
        else:
            fd = rec._rss_fd
            mem_after = int(_pread(fd, 64, 0).split()[1]) * _PAGE if fd is not None else rec._mem()
        t0 = self.t0
        self.latency_ms = latency_ms = (t1 - t0) * 1e3
        sig, numel = self.signature
        self.outcome = outcome
        self.wall_time = wall_time = t0 + rec._wall_offset
        if outcome != "ok" and rec.capture and (outcome != "fallback" or self.fallback_error is not None):
            self.failure_id = rec._reserve_capture(self, outcome, etype, exc or self.fallback_error, sig, bad)
        rec._add_row((self.request, wall_time, latency_ms, outcome, self.fallback_name, etype, sig, numel,
                      mem_before, mem_after, rec._mem_kind, rec._dev_str, self.failure_id, self.route))
        return False


class _Wrapped:
    """``rec.wrap(model)``: calls the model inside ``rec.request`` (other attributes are
    the model's)."""

    def __init__(self, rec: ServeRecorder, fn, route: str | None):
        self._rec = rec
        self._fn = fn
        self._route = route

    def __call__(self, *args, **kwargs):
        if kwargs and not args:
            inputs, call = kwargs, "kwargs"
        elif len(args) == 1 and not kwargs:
            inputs, call = args[0], "single"
        elif not kwargs:
            inputs, call = tuple(args), "args"
        else:
            inputs, call = {"args": tuple(args), "kwargs": kwargs}, "args_kwargs"
        r = _new(Request)  # no __init__ frame (see Request)
        r.rec = self._rec
        r.inputs = inputs
        r.call = call
        if self._route is not None:
            r.route = self._route
        with r:
            out = r.out = self._fn(*args, **kwargs)
        return out

    def __getattr__(self, name):
        return getattr(self._fn, name)


# ---------------------------------------------------------------------------- recorder
def _rng_state(rng, tensor_type) -> dict | None:
    """A request's start RNG state as :func:`take_rng_state` gives it: the request thread
    keeps a clone of the CPU generator (or its state tensor), turned into the tensor here,
    on the capture thread."""
    if rng is None or type(rng) is dict:
        return rng
    return {"torch_cpu": rng if isinstance(rng, tensor_type) else rng.get_state()}


def _count_value(counter: itertools.count) -> int:
    """The next number of an ``itertools.count`` (how many it gave), without taking it."""
    return int(repr(counter)[6:-1])


def _close_ref(ref) -> None:
    rec = ref()
    if rec is not None:
        rec.close()


class ServeRecorder:
    """Record a served model's requests into an inference run (create with
    :func:`debugkit.serve`)."""

    def __init__(self, model, run_dir, *, model_factory: str | None = None,
                 factory_kwargs: dict | None = None, name: str | None = None,
                 config: dict | None = None, capture_budget: dict | None = None,
                 gpu_mem_threshold: float = 0.8, host_mem_threshold: float = 0.75,
                 check_finite: bool = True, capture: bool = True,
                 hash_weights: bool | None = None, device=None, rank: int = 0,
                 flush_every_s: float = 2.0, memory_every_s: float | None = None,
                 tags=None):
        import torch

        if is_url(run_dir) and not str(run_dir).lower().startswith("file://"):
            raise InvalidInputError(f"debugkit.serve: run_dir={str(run_dir)!r}: record to a local "
                                    "folder (upload it with `debugkit sync`)")
        gpu_mem_threshold = check_threshold("gpu_mem_threshold", gpu_mem_threshold)
        host_mem_threshold = check_threshold("host_mem_threshold", host_mem_threshold)
        budget = check_budget(capture_budget)
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise InvalidInputError(f"rank={rank!r}: expected an integer >= 0")
        memory_every_s = memory_every(memory_every_s)
        tags = fmt.check_tags(tags) if tags is not None else None
        self.model = model
        self._module = _unwrap(model) if isinstance(model, torch.nn.Module) else model
        self.run_dir = as_path(run_dir)
        self.rank = rank
        self.check_finite = bool(check_finite)
        self.capture = bool(capture)
        self.budget = budget
        if device is None:
            params = getattr(self._module, "parameters", None)
            first = next(iter(params()), None) if callable(params) else None
            device = first.device if first is not None else torch.device("cpu")
        self.device = torch.device(device)
        self._cuda = self.device.type == "cuda"
        self._dev_str = str(self.device)
        self._mem_kind = "cuda_allocated" if self._cuda else "rss"
        self._code = {"model_factory": describe_callable(model_factory)} if model_factory else {}
        self._factory_kwargs = dict(factory_kwargs or {})
        if hash_weights is None:
            hash_weights = model_factory is None
        self.weights_sha256 = state_dict_sha256(self._module) if hash_weights else None

        self.run_dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        manifest = {
            "schema_version": fmt.SCHEMA_VERSION,
            "kind": fmt.KIND_INFERENCE,
            "run_id": uuid.uuid4().hex[:12],
            "name": name or self.run_dir.name,
            "created_at": now,
            "config": dict(config or {}),
            "model_factory": model_factory,
            "factory_kwargs": self._factory_kwargs,
            "model_class": f"{type(self._module).__module__}.{type(self._module).__qualname__}",
            "code": self._code,
            "weights_sha256": self.weights_sha256,
            "world_size": 1,
            "flush_every_s": flush_every_s,
            "serve": {"gpu_mem_threshold": gpu_mem_threshold,
                      "host_mem_threshold": host_mem_threshold,
                      "capture_budget": dict(budget),
                      "memory_every_s": float(memory_every_s)},
            "env": collect_env(),
        }
        if tags is not None:
            manifest["tags"] = tags
        manifest = fmt.update_manifest(self.run_dir, lambda old: _resumed(manifest, old, now),
                                       unreadable="replace")
        self.run_id = manifest["run_id"]
        rank_dir = self.run_dir / fmt.RANKS_DIR / str(rank)
        self._writer = RankWriter(rank_dir, n_layers=1, flush_every_s=flush_every_s)
        self.segment = self._writer.segment
        atomic_write_json(rank_dir / fmt.RANK_META.format(segment=self.segment), {
            "rank": rank, "world_size": 1, "host": manifest["env"].get("host"), "pid": os.getpid(),
            "device": self._dev_str, "layers": [], "started_at": now, "segment": self.segment,
            **memory_capacity(self.device)})
        self._writer.event("start", segment=self.segment, pid=os.getpid())

        self._torch = torch
        self._Tensor = torch.Tensor
        self._float_dtypes = _float_dtypes(torch)
        global _F32
        _F32 = torch.float32
        # the finiteness check's BLAS dot for float32 CPU outputs (None: the torch sum)
        self._sdot = None if self._cuda or not self.check_finite else _blas_sdot(torch)
        self._rss = _RSS()
        # the descriptor the request thread reads the RSS from (None: CUDA, or no /proc)
        self._rss_fd = None if self._cuda else self._rss._fd
        self._mem_every = float(memory_every_s)
        self._mem_next = 0.0  # perf_counter() from which the next request reads memory
        self._wall_offset = time.time() - time.perf_counter()  # wall clock - perf_counter()
        self._add_row = self._writer.appender("requests")
        # a CPU model draws only from the CPU generator: its state alone is copied, as a
        # clone of the generator (``Generator.clone_state``, torch >= 2.4; before, its state
        # tensor), as the training Recorder does: the clone skips the 5 KB state tensor and
        # its allocations (after the ~20 ms model 2.1 us less [1.8, 2.5]; after the ~1 ms
        # one the same: docs/serving.md#sixth-round-the-rng-clone-the-inline-rss-read-the-20-ms-verdict)
        gen = torch.default_generator
        self._cpu_rng = None if self._cuda else getattr(gen, "clone_state", gen.get_state)
        # 0-based request numbers in the order requests start, over all threads: next() on
        # itertools.count is one C call under the GIL (no lock to take per request)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._captured: dict[tuple[str, str | None], int] = {}
        self._recent: deque[float] = deque()
        self._dropped: dict[str, int] = {}
        self._dropped_emitted = 0
        self._dropped_last_emit = 0.0
        self._captures: queue.Queue = queue.Queue(maxsize=MAX_PENDING_CAPTURES)
        self._capture_thread: threading.Thread | None = None
        self._closed = False
        # last (the attributes the request path reads before keep their places):
        # (TensorGuards(out).check, the address of out's length, its c_int64) of the last
        # float32 output form judged by BLAS, or None; rebuilt from perf_counter() _fin_next on
        self._guards = None if self._sdot is None else _tensor_guards(torch)
        self._fin_fast: tuple | None = None
        self._fin_next = 0.0
        ref = weakref.ref(self)
        self._atexit = lambda: _close_ref(ref)
        atexit.register(self._atexit)

    # ------------------------------------------------------------------ public API
    def request(self, inputs=None, *, call: str | None = None, route: str | None = None) -> Request:
        """Context manager around one request.

        Parameters
        ----------
        inputs : any
            What the model is called with: a dict (``model(**inputs)``), a tuple or list
            (``model(*inputs)``) or one object (``model(inputs)``). Its signature and
            element count are recorded, and a failing request's capture stores it.
        call : {"kwargs", "args", "single"}, optional
            How the model is called with ``inputs`` when it is not what the type says
            (a dict passed as one argument: ``"single"``); stored in the capture for replay.
        route : str, optional
            The handler or endpoint serving it (``"/v1/generate"``): stored in the row,
            so findings can name the handler that leaks or fails.
        """
        r = _new(Request)  # no __init__ frame: the defaults are Request's class attributes
        r.rec = self
        r.inputs = inputs
        if call is not None:
            if call not in CALLS:
                raise InvalidInputError(MSG_CALL.format(value=call))
            r.call = call
        if route is not None:
            if not isinstance(route, str):
                raise InvalidInputError(MSG_ROUTE.format(value=route))
            r.route = route
        return r

    def wrap(self, fn=None, *, route: str | None = None):
        """A callable that records every call of ``fn`` (default: the model) as a request:
        ``wrapped = rec.wrap(model); y = wrapped(x)``. Its output is checked for NaN/Inf;
        an exception is recorded, captured and raised on. ``route`` as for :meth:`request`
        (checked here, once: each call builds its request directly)."""
        if route is not None and not isinstance(route, str):
            raise InvalidInputError(MSG_ROUTE.format(value=route))
        return _Wrapped(self, self.model if fn is None else fn, route)

    @property
    def requests(self) -> int:
        """How many requests were started so far."""
        return _count_value(self._seq)

    def flush(self) -> None:
        """Write the rows queued so far and the captures in progress now (readers see them)."""
        if self._capture_thread is not None:
            self._captures.join()
        self._writer.flush()

    def close(self, *, failed: bool = False) -> None:
        """Write everything, mark the run finished (or failed). Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._atexit)
        if self._capture_thread is not None:
            self._captures.put(None)
            self._capture_thread.join(timeout=60)
        self._emit_dropped(force=True)
        state = fmt.STATE_FAILED if failed else fmt.STATE_FINISHED
        self._writer.event("close", state=state, requests=_count_value(self._seq))
        self._writer.close(state)
        self._rss_fd = None
        self._rss.close()
        if self._writer.error is not None:
            warnings.warn(f"debugkit.serve: the writer stopped: {self._writer.error!r}",
                          DebugkitWarning, stacklevel=2)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(failed=exc is not None)
        return False

    # ------------------------------------------------------------------ request thread
    def _mem(self) -> int | None:
        if self._cuda:
            try:
                return int(self._torch.cuda.memory_allocated(self.device))
            except RuntimeError:  # a broken CUDA context: the request's own error propagates
                return None
        return self._rss.read()

    # ------------------------------------------------------------------ captures
    def _reserve_capture(self, r: Request, outcome: str, etype: str | None,
                         exc: BaseException | None, sig: str, bad: list[str]) -> str | None:
        """The id of the capture of ``r`` handed to the capture thread, or None when the
        budget (first N per kind, M per minute) or the queue refuses it (counted)."""
        key = (outcome, etype)
        now = time.monotonic()
        with self._lock:
            recent = self._recent
            while recent and now - recent[0] >= 60.0:
                recent.popleft()
            n = self._captured.get(key, 0)
            ok = n < self.budget["per_kind"] and len(recent) < self.budget["per_minute"]
            if ok:
                fid = f"r{self.rank}-{self.segment:03d}-req{r.request:07d}-{outcome}"
                try:
                    self._captures.put_nowait((fid, r, outcome, etype, exc, sig, bad))
                except queue.Full:
                    ok = False
            if not ok:
                label = f"{outcome}:{etype}" if etype else outcome
                self._dropped[label] = self._dropped.get(label, 0) + 1
            else:
                self._captured[key] = n + 1
                recent.append(now)
                if self._capture_thread is None:
                    self._capture_thread = threading.Thread(
                        target=self._capture_loop, name="debugkit-serve-capture", daemon=True)
                    self._capture_thread.start()
        if not ok:
            self._emit_dropped()
            return None
        return fid

    def _emit_dropped(self, force: bool = False) -> None:
        total = sum(self._dropped.values())
        if total == self._dropped_emitted:
            return
        now = time.monotonic()
        if not force and now - self._dropped_last_emit < DROPPED_EVENT_EVERY_S:
            return
        self._dropped_last_emit = now
        self._dropped_emitted = total
        self._writer.event("capture_dropped", dropped=total, counts=dict(self._dropped),
                           budget=dict(self.budget))

    def _capture_loop(self) -> None:
        while True:
            job = self._captures.get()
            try:
                if job is None:
                    return
                self._write_capture(*job)
            finally:
                self._captures.task_done()

    def _write_capture(self, fid, r: Request, outcome, etype, exc, sig, bad) -> None:
        try:
            if outcome == "nonfinite":
                message = "the model's output holds NaN or Inf values" + (
                    f" ({', '.join(bad[:8])})" if bad != ["output"] else "")
            else:
                message = None
            write_capture(
                self.run_dir, kind="request", step=r.request, rank=self.rank, world_size=1,
                device=self._dev_str, exc=exc, batch=r.inputs, model=None,
                rng_state=_rng_state(r.rng, self._Tensor),
                code=self._code, message=message, fid=fid,
                extra={"request": r.request, "outcome": outcome, "signature": sig, "route": r.route,
                       "fallback": r.fallback_name, "call": r.call or _call_of(r.inputs),
                       "nonfinite_outputs": bad or None, "latency_ms": r.latency_ms,
                       "factory_kwargs": self._factory_kwargs,
                       "weights_sha256": self.weights_sha256,
                       "model_training": bool(getattr(self._module, "training", False))})
            self._writer.event("failure", failure=fid, request=r.request, outcome=outcome,
                               error_type=etype)
        except Exception as err:  # noqa: BLE001 - a capture must never break the service
            self._writer.event("capture_error", failure=fid, message=str(err)[:2000])
        finally:
            r.inputs = None


def serve(model, run_dir, **kwargs) -> ServeRecorder:
    """Record a served model's requests into an inference run.

    Parameters
    ----------
    model : torch.nn.Module or callable
        The model being served (DDP / ``torch.compile`` wrappers are looked through).
    run_dir : str or Path
        Where the run is written (created if missing; an existing run gets a new segment).
    model_factory : str, optional
        ``"module:callable"`` that rebuilds the model (``model_factory(**factory_kwargs)``)
        for replay; its file's SHA-256 is recorded. Without it the model's identity is
        the SHA-256 of its state dict's tensors (``weights_sha256``).
    factory_kwargs : dict, optional
        Keyword arguments of ``model_factory`` (JSON-able).
    name, config, tags : optional
        The run's display name, a JSON-able dict of settings, labels for Home.
    capture_budget : dict, optional
        ``{"per_kind": 10, "per_minute": 30}`` by default: the first ``per_kind``
        failing requests of each (outcome, error type) are captured, at most
        ``per_minute`` in any minute; the others are counted in ``capture_dropped``
        events, so a failure storm never fills the disk.
    gpu_mem_threshold, host_mem_threshold : float
        Shares of GPU / host memory the service must stay under (0.8 and 0.75, as
        common service dashboards): ``diagnose`` projects how many requests a leak
        takes to reach them.
    check_finite : bool
        Check the floating tensors of ``r.output(...)`` for NaN/Inf (a request with one
        is ``nonfinite`` and captured). On CUDA this reads one number per output tensor
        back to the host (a synchronisation).
    capture : bool
        Capture failing requests (inputs, RNG, error) under ``failures/``.
    hash_weights : bool, optional
        Record ``weights_sha256`` (default: only when no ``model_factory`` is given;
        hashing a large model takes time at start).
    device : str or torch.device, optional
        Where the model runs (default: its first parameter's device): CUDA reads the
        allocator's ``memory_allocated``, CPU the process RSS.
    rank : int
        The writer's folder under ``ranks/``: give each worker process of one service
        its own (one run, several processes).
    flush_every_s : float
        How often the background writer appends to disk.
    memory_every_s : float
        Read memory before and after a request when at least this long has passed since
        the last reading (0.05 s, 20 readings a second: every request of a service slower
        than 50 ms, about one in fifty of a 1 ms one; 0: every request). Not given: the
        environment variable ``DEBUGKIT_SERVE_MEMORY_EVERY_S`` if set, else 0.05. The other requests' ``mem_before_bytes``
        and ``mem_after_bytes`` are null: a reading is a system call or, on CUDA, a walk
        of the allocator's statistics.

    Returns
    -------
    ServeRecorder
        ``with rec.request(inputs) as r: r.output(model(**inputs))``, ``rec.wrap(model)``,
        ``rec.close()`` (or use it as a context manager).
    """
    return ServeRecorder(model, run_dir, **kwargs)
