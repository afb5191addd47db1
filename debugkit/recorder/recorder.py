"""The training-side Recorder: gradient norms, scalars, memory, step times, failures."""

# Why this module is over the 700 lines CONTRIBUTING asks for: the Recorder class is ~880 of
# its ~1,090 (and _Step, which runs a default step's begin and end inline on the Recorder's
# state so the step enters its code fewer times, ~80). It is the one object a training loop holds; its constructor checks every option
# and starts the writer, watchdog, pip check, memory history and uploader, and its step path
# (begin/end step, gradients, non-finite checks, captures) shares that state on the hot
# path. What stands alone already has its own module (writer, capture, norms, nonfinite,
# spec_sampler, comm, memhistory, spool, tracking); splitting the class into mixins would
# spread one object's state over several files without making a part testable alone.

from __future__ import annotations

import atexit
import math
import os
import time
import uuid
import warnings
import weakref
from time import perf_counter as _perf_counter
from time import time as _time
from typing import Any

from .. import format as fmt
from .._fsutil import atomic_write_json
from ..errors import DebugkitWarning, InvalidInputError, NonFiniteError
from ..location import as_path, is_url
from .batchspec import coerce_spec, format_violations
from .capture import describe_callable, take_rng_state, write_capture
from .comm import CommTimer
from .dist import process_group_info
from .env import collect_env
from .fatal import FatalStackFile
from .keep_output import can_keep, keep_outputs, release
from .memhistory import MemoryHistory, memory_capacity
from .memhistory import parse_option as parse_memory_option
from .nonfinite import NonFiniteMonitor, describe_outputs, is_loss_key
from .norms import GradNormComputer
from .pipcheck import AFTER_STEPS as PIP_CHECK_AFTER_STEPS
from .pipcheck import PipCheck
from .sigterm import TermFlush
from .spec_sampler import SpecSampler
from .spool import Uploader, check_url, refuse_multi_node, spool_dir
from .tracking import track_loader
from .writer import BLOCK_STEPS, PendingTensor, RankWriter

MSG_GUARD_ACTION = "guard_action={value!r}: expected 'raise' or 'skip'"
MSG_SKIPPED_BODY_RAN = (
    "debugkit: the body of a step whose batch the guard skipped ran an optimizer step; "
    "with guard_action='skip' write `with rec.step(batch) as s:` then `if s.skipped: continue`")
MSG_LAYER_STATS = ("layer_stats_every={value!r}: expected an integer >= 1 (steps), or None or 0 "
                   "(off)")
#: ``Recorder(layer_stats_every=...)``'s default: on an unsampled step the layer statistics
#: cost a few us (the trigger's band check, inline on the lean path), and a sampled step's
#: few ms spread over 500 steps: ~1 % of the small CPU bench step, quietly, under issue 33's
#: 2 % (docs/benchmarks.md, "Layer statistics on the lean path, then on by default").
LAYER_STATS_EVERY = 500
MSG_SHARDED_LAYER_STATS = (
    "layer statistics are not taken for DTensor (FSDP2) parameters: each rank holds a shard, "
    "and a shard's quantiles are not its layer's; the gradient norms are recorded per shard "
    "and added up across ranks by the reader (pass layer_stats_every=None to silence this)")
MSG_HANG_TIMEOUT = "hang_timeout_s={value!r}: expected a number of seconds > 0"
MSG_NOT_DDP = ("rec.watch_ddp(): expected a torch.nn.parallel.DistributedDataParallel model, "
               "got {type}")
# Process-group facts kept in the manifest's "distributed" object.
DIST_FIELDS = ("backend", "world_size", "local_world_size", "local_rank", "node_rank", "host",
               "master_addr", "master_port", "torchelastic_run_id")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# The resident set size is read at most this often (and at every failed step); steps in
# between carry the latest reading. A /proc read per step cost ~5 us, 0.2 % of a 2 ms step.
RSS_EVERY_S = 0.1


class _RSS:
    """Current resident set size, read from /proc/self/statm (no psutil needed)."""

    def __init__(self):
        try:
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._fd = None

    def read(self) -> int | None:
        if self._fd is None:
            try:
                import resource

                return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            except (ImportError, OSError):
                return None
        return int(os.pread(self._fd, 64, 0).split()[1]) * _PAGE

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _all_finite(rows, start: int) -> bool:
    """Whether the values of the scalar rows ``rows[start:]`` are all finite floats (a GPU
    copy in flight is not a float: it is judged by the full check; ``x - x`` is NaN for
    NaN and inf)."""
    for i in range(start, len(rows)):
        v = rows[i][2]
        if type(v) is not float or v - v != 0.0:
            return False
    return True


def _inner_optimizer(optimizer):
    """The torch optimizer under wrappers that do not run its step hooks on their own.

    Accelerate's ``AcceleratedOptimizer`` (and Lightning's ``LightningOptimizer``) hold the
    real optimizer in ``.optimizer`` / ``._optimizer`` and call its ``step`` (after the
    grad scaler unscaled the gradients, and only at gradient-accumulation boundaries);
    hooks registered on the wrapper itself would never fire.
    """
    import torch

    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer) or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def _unwrap(model):
    """The module under DDP/FSDP/DataParallel or torch.compile wrappers."""
    for _ in range(4):
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None or inner is model:
            break
        model = inner
    return model


_dist_info = process_group_info  # rank, world size, local rank, host, backend...
_new_step = object.__new__  # Recorder.step: a _Step without its __init__ frame


class _Step:
    """Context manager around one training step (returned by :meth:`Recorder.step`).

    ``skipped`` is True when the Recorder's guard rejected the batch with
    ``guard_action="skip"``; a ``with`` block cannot skip its own body, so the body
    checks it (``if s.skipped: continue``). The object is falsy when skipped.
    """

    __slots__ = ("rec", "batch", "indices", "step", "skipped", "violations")

    def __init__(self, rec: Recorder, batch, indices, step):
        # Recorder.step sets these same fields without this call: keep the two alike
        self.rec = rec
        self.batch = batch
        self.indices = indices
        self.step = step
        self.skipped = False
        self.violations = ()

    def __bool__(self):
        return not self.skipped

    def __enter__(self):
        rec = self.rec
        if not rec._lean_ok:
            rec._begin_step_full(self)
            return self
        ls = rec._layer_stats
        if ls is not None:  # LayerStats.sampled(), inline: most steps are not sampled
            if not self.step % ls.every or self.step in ls._forced:
                rec._lean = False  # a sampled step takes the full path, to its end
                rec._begin_step_full(self)
                return self
            rec._lean = True
        # Recorder._begin_step of the lean path (see Recorder.__init__), inline: the step
        # enters Recorder code once here, not through three helpers.
        now = _perf_counter()
        if rec._closed:
            raise InvalidInputError("Recorder.step(): the recorder is closed")
        if self.indices is None:
            self.indices = rec._next_indices
        rec._next_indices = None
        rec._cur = self
        rec._step_scalars = []
        rec._step_grads = None
        rec._losses_checked = 0
        rec._grads_taken = rec._opt_stepped = False
        rec._rng = rec._get_cpu_rng()  # take_rng_state() without CUDA: see _rng_state
        rec._t0 = now
        rec._wall0 = _time()
        rec._writer._last_step = self.step  # RankWriter.set_step
        if rec._comm.measuring:
            rec._comm.begin_step()
        every = rec._specs.every  # spec learning: most steps are not observed
        if every and not self.step % every:
            rec._specs.observe(self.step, self.batch)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.skipped:
            self.rec._skipping = False
            return False
        rec = self.rec
        if (exc is None and rec._lean and rec._grads_taken and rec._cur is self
                and len(rec._step_scalars) == rec._losses_checked):
            # Recorder._end_step of a healthy lean step whose values were all judged
            # finite when the norms were taken, inline
            rec._finish_step_rows(self, _perf_counter(), True)
            specs = rec._specs
            if specs.obs is not None:
                specs.commit(self.step)
            return False
        rec._end_step(self, exc)
        return False



def _resumed(manifest: dict, old: dict | None, now: float) -> dict:
    """The manifest a starting Recorder writes over ``old`` (None for a new run): a
    resumed run keeps its identity and whatever other writers added (profiles, ...)."""
    if old is None:
        return manifest
    manifest["run_id"] = old.get("run_id", manifest["run_id"])
    manifest["created_at"] = old.get("created_at", now)
    manifest["resumed_at"] = old.get("resumed_at", []) + [now]
    for k, v in old.items():
        manifest.setdefault(k, v)
    return manifest

class _CopiedHooks:
    """What a Recorder's hooks are bound to in a copy of the object they hang on:
    ``copy.deepcopy(model)`` (an EMA or SWA copy, ``torch.optim.swa_utils.AveragedModel``)
    and ``torch.save(model)`` / pickle of a whole model copy its hooks, and a bound
    method copies its Recorder, whose locks and open files cannot be copied
    (``TypeError: cannot pickle '_thread.lock' object``). The copy's hooks are bound to
    this instead: they record nothing (the copy's forwards and optimizer steps are not the
    recorded run's) and accept every attribute the hooks set."""

    __slots__ = ()
    _cur = None
    _closed = True

    def __setattr__(self, name, value):
        pass

    def __reduce__(self):
        return (_CopiedHooks, ())

    def _check_skipped_body(self):
        pass

    def _hook(self, *args, **kwargs):
        return None

    # an unpickled copy's hooks are looked up by name (a copy.deepcopy's keep the
    # Recorder's functions, which read _cur and set attributes: both nothing here)
    _keep_output = _pre_optimizer_step = _post_optimizer_step = _hook


class Recorder:
    """Record a training run into a debugkit run directory.

    Parameters
    ----------
    run_dir : str or Path
        Where the run is written (created if missing; an existing run gets a new segment).
        A URL (``s3://bucket/runs/x``: any fsspec URL) records to a local spool and
        uploads every flush in the background, finishing on :meth:`close`
        (:mod:`debugkit.recorder.spool`; ``rec.url`` is the URL, ``rec.run_dir`` the spool).
    model : torch.nn.Module
        The model being trained (DDP/FSDP/compile wrappers are looked through).
    optimizer : torch.optim.Optimizer, optional
        When given, gradient norms are taken in an optimizer step pre-hook (after
        backward, before the update), and its learning rates and state are recorded.
    name : str, optional
        A display name (default: the directory's name).
    config : dict, optional
        Hyper-parameters, stored in the manifest.
    model_factory, step_fn : str, optional
        ``"module:callable"`` specs that rebuild the model (``model_factory(**factory_kwargs)``)
        and run one step (``step_fn(model, batch)``) for replay.
    factory_kwargs : dict, optional
        Keyword arguments of ``model_factory`` (JSON-able).
    num_classes : int, optional
        Number of classes of a classification target, for replay's label check.
    log_every : int
        Take gradient norms every ``log_every`` steps (step times, scalars and memory are
        recorded every step).
    flush_every_s : float
        How often the background writer appends to disk and refreshes the heartbeat.
    halt_on_nonfinite : bool
        Raise :class:`debugkit.NonFiniteError` inside the first step whose loss or a
        gradient norm is NaN/Inf (after capturing it) instead of letting training go on.
    hang_timeout_s : float, optional
        Opt-in hang watchdog: when a step runs longer than this, the rank writes a stack
        dump of all its threads and a ``hang`` event (and asks the other ranks to dump
        theirs), without stopping the job. See :mod:`debugkit.recorder.watchdog`.
    record_memory_history : bool or dict
        On CUDA, record the caching allocator's history
        (``torch.cuda.memory._record_memory_history``) and write PyTorch memory
        snapshots into ``memory_snapshots/`` when a step fails (taken at the moment of
        an out-of-memory error) and at close. A dict sets ``max_entries`` (default
        100,000), ``stacks`` (``"python"`` or ``"all"``) and ``dump_at_close``. Without
        CUDA it is a no-op that warns once. See docs/memory.md.
    guard : debugkit.BatchSpec, dict or path, optional
        Check every ``rec.step(batch)``'s batch against this spec before the step body
        (see :mod:`debugkit.recorder.batchspec`).
    guard_action : {"raise", "skip"}
        On a violation, ``"raise"`` raises :class:`debugkit.InvalidInputError` from
        ``rec.step`` (captured as a failure with its batch, like any step exception);
        ``"skip"`` records a ``batch_skipped`` event and returns a step whose
        ``skipped`` is True: the loop must then skip it itself::

            with rec.step(batch) as s:
                if s.skipped:
                    continue
                ...

        Skipped steps write no ``steps`` row; their count is ``skipped_batches`` of the
        ``close`` event (and :attr:`batches_skipped`).
    tags : sequence of str, optional
        Labels for the run list (``["baseline", "lr-sweep"]``): stored in the manifest,
        shown and filterable on the dashboard's Home. Each tag is 1-64 printable
        characters; duplicates are dropped. A resumed run keeps its tags unless new ones
        are given. The framework callbacks pass it through (``**recorder_kwargs``).
    grads_hook : bool
        Take gradient norms in ``optimizer``'s step pre-hook (the default). Frameworks
        that call ``optimizer.step(closure)`` with a closure that runs the backward pass
        (Lightning) fire that hook *before* backward: they pass False and call
        :meth:`record_grads` after backward (see :mod:`debugkit.integrations`).
    layer_stats_every : int, optional
        Every this many steps (and the step after a layer's gradient norm leaves its
        recent band, and the step of a failure capture), record what is inside the
        layers: each leaf module's output mean/std/max-abs and its shares of zeros,
        saturated and non-finite values, each trained parameter's weight and gradient
        quantiles and its update-to-weight ratio (see :mod:`debugkit.recorder.layerstats`
        and docs/layers.md). On by default, every :data:`LAYER_STATS_EVERY` (500) steps;
        None or 0 turns them off. Unsampled steps carry no hooks.
    """

    def __init__(self, run_dir, model, optimizer=None, *, name=None, config=None,
                 model_factory=None, factory_kwargs=None, step_fn=None, num_classes=None,
                 log_every=1, flush_every_s=2.0, halt_on_nonfinite=False, hang_timeout_s=None,
                 record_memory_history=False, guard=None, guard_action="raise",
                 grads_hook=True, tags=None, layer_stats_every=LAYER_STATS_EVERY):
        import torch

        if layer_stats_every == 0 and not isinstance(layer_stats_every, bool):
            layer_stats_every = None  # off, as None
        if layer_stats_every is not None and not (
                isinstance(layer_stats_every, int) and not isinstance(layer_stats_every, bool)
                and layer_stats_every >= 1):
            raise InvalidInputError(MSG_LAYER_STATS.format(value=layer_stats_every))
        if int(log_every) < 1:
            raise InvalidInputError(f"log_every={log_every!r}: expected an integer >= 1")
        if hang_timeout_s is not None and not (isinstance(hang_timeout_s, (int, float))
                                               and math.isfinite(hang_timeout_s) and hang_timeout_s > 0):
            raise InvalidInputError(MSG_HANG_TIMEOUT.format(value=hang_timeout_s))
        parse_memory_option(record_memory_history)  # bad options fail before any file is written
        tags = fmt.check_tags(tags) if tags is not None else None
        if guard_action not in ("raise", "skip"):
            raise InvalidInputError(MSG_GUARD_ACTION.format(value=guard_action))
        self._guard = coerce_spec(guard)
        self._guard_action = guard_action
        self._skipped = 0
        self._skipping = False
        self._warned_skipped_body = False
        dist = _dist_info()
        #: The URL the run is recorded to (``s3://...``), or None for a local folder. A URL
        #: run is written to a local spool (``run_dir``) and uploaded by a helper process
        #: after every flush (debugkit.recorder.spool). Never Path("s3://b/r"): that would
        #: silently record into a local folder named "s3:".
        self.url = str(run_dir) if is_url(run_dir) and not str(run_dir).lower().startswith(
            "file://") else None
        self._uploader = None
        if self.url is not None:
            check_url(self.url)
            refuse_multi_node(self.url, dist.get("node_rank"))
            run_dir = spool_dir(self.url)
        self.run_dir = as_path(run_dir)
        self.model = model
        self._module = _unwrap(model)
        self.optimizer = optimizer
        self.log_every = int(log_every)
        self.halt_on_nonfinite = bool(halt_on_nonfinite)
        self.num_classes = num_classes
        self.rank, self.world_size = dist["rank"], dist["world_size"]

        named = [(n, p) for n, p in self._module.named_parameters() if p.requires_grad]
        self.layers = [n for n, _ in named]
        self._norms = GradNormComputer([p for _, p in named])
        first = next(iter(self._module.parameters()), None)
        self.device = first.device if first is not None else torch.device("cpu")
        self._cuda = self.device.type == "cuda"
        self._code = {k: describe_callable(v) for k, v in
                      (("model_factory", model_factory), ("step_fn", step_fn)) if v}

        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_id = uuid.uuid4().hex[:12]
        now = time.time()
        if self.rank == 0:
            env = collect_env()
            manifest = {
                "schema_version": fmt.SCHEMA_VERSION,
                "run_id": self.run_id,
                "name": name or self.run_dir.name,
                "created_at": now,
                "config": dict(config or {}),
                "model_factory": model_factory,
                "factory_kwargs": dict(factory_kwargs or {}),
                "step_fn": step_fn,
                "num_classes": num_classes,
                "log_every": self.log_every,
                "layer_stats_every": layer_stats_every,
                "flush_every_s": flush_every_s,
                "world_size": self.world_size,
                "distributed": {k: dist[k] for k in DIST_FIELDS},
                "model_class": f"{type(self._module).__module__}.{type(self._module).__qualname__}",
                "optimizer_class": type(optimizer).__qualname__ if optimizer is not None else None,
                "code": self._code,
                "env": env,
                "guard": None if self._guard is None else
                {"action": guard_action, "spec": self._guard.to_dict()},
            }
            if tags is not None:
                manifest["tags"] = tags
            manifest = fmt.update_manifest(self.run_dir, lambda old: _resumed(manifest, old, now),
                                           unreadable="replace")
            self.run_id = manifest["run_id"]
            if self.url is not None:
                self._uploader = Uploader(self.run_dir, self.url, float(flush_every_s))
                self._uploader.first_pass()  # a bucket that cannot be written fails here
            # From the cache now, or started after the first steps (see .pipcheck).
            self._pip_check = PipCheck(self.run_dir, env.get("distributions") or {})

        else:
            self._pip_check = None
        rank_dir = self.run_dir / fmt.RANKS_DIR / str(self.rank)
        rank_dir.mkdir(parents=True, exist_ok=True)
        self._writer = RankWriter(rank_dir, n_layers=len(self.layers) + 1,
                                  flush_every_s=flush_every_s)
        atomic_write_json(rank_dir / fmt.RANK_META.format(segment=self._writer.segment), {
            "rank": self.rank, "world_size": self.world_size, "local_rank": dist["local_rank"],
            "host": dist["host"], "pid": os.getpid(), "device": str(self.device),
            "local_world_size": dist["local_world_size"], "node_rank": dist["node_rank"],
            "backend": dist["backend"], "layers": self.layers, "started_at": now,
            "segment": self._writer.segment, **memory_capacity(self.device),
            # the grads table holds the norms of this rank's shards of DTensor parameters
            # (FSDP2): the reader adds the ranks' squares up (format 1.3)
            **({"grad_shards": True} if self._norms.sharded else {}),
        })
        self._writer.event("start", segment=self._writer.segment, pid=os.getpid())
        if self._uploader is not None:
            self._uploader.start()  # after the heartbeat: it uploads until the run ends
        self._fatal = FatalStackFile(rank_dir, self._writer.segment)
        # SIGTERM (torchrun stopping the other ranks, a scheduler's time limit) writes
        # the queued rows before the process ends (sigterm.py)
        me = weakref.ref(self)
        self._term = TermFlush(self._writer, lambda: getattr(me(), "_last_step", None))
        self._comm = CommTimer()
        self._comm_calls = None
        self._watchdog = None
        if hang_timeout_s is not None:
            from .watchdog import HangWatchdog

            self._watchdog = HangWatchdog(self.run_dir, rank_dir, rank=self.rank,
                                          segment=self._writer.segment,
                                          timeout_s=float(hang_timeout_s), event=self._writer.event)

        self._rss = _RSS()
        self._rss_value = None
        self._rss_next = 0.0  # perf_counter time of the next RSS reading
        self._dev_str = str(self.device)
        self._Tensor = torch.Tensor
        self._loss_keys: dict[str, bool] = {}
        self._memhist = MemoryHistory(record_memory_history, self.device, self.run_dir,
                                      self.rank, self._writer.event)
        self._step_no = 0
        self._cur: _Step | None = None
        self._begun: _Step | None = None  # the step begin_step() opened (also when skipped)
        self._last_exit: float | None = None
        self._last_step: int | None = None
        self._step_scalars: list[tuple] = []  # (step, key, value, wall_time) rows of the open step
        self._step_grads = None  # the open step's gradient norms, once taken
        self._losses_checked = 0  # how many of its scalars the norms' check has seen
        self._grads_taken = False
        self._opt_stepped = False
        self._rng = None
        self._nonfinite = NonFiniteMonitor(self.layers, defer=self._cuda and not self.halt_on_nonfinite,
                                           halt=self.halt_on_nonfinite, on_found=self._nonfinite_found)
        self._next_indices = None
        self._last_failed = False
        self._closed = False
        # The spec of the healthy batches seen so far: a failure capture stores it, so
        # the Replay page can say which guard would have stopped the failing batch.
        self._specs = SpecSampler()
        self._datasets_seen: dict = {}
        self._dataset_code: dict = {}  # id(dataset) -> (dataset, its factory's identity)
        self._data_record = {"datasets": []}
        self._writer_dir = rank_dir
        self._hooks = []
        if optimizer is not None:
            hooked = _inner_optimizer(optimizer)
            if grads_hook:
                # The pre-hook also marks the step as optimizer-stepped when it returns
                # (the optimizer steps next), and warns about a skipped step's body: no
                # post-hook, so torch's loop after the update calls nothing of ours (one
                # Python call less per step, cold after the update).
                self._hooks.append(hooked.register_step_pre_hook(self._pre_optimizer_step))
            else:  # no pre-hook (Lightning, HF): a post-hook marks the step
                self._hooks.append(hooked.register_step_post_hook(self._post_optimizer_step))
        # torch's hook wrapper around the optimizer's step() (Optimizer.profile_hook_step):
        # an exception raised out of it before its update returned leaves the step
        # un-stepped although the pre-hook marked it (_end_step_full reads the wrapper's
        # frame: its local ``out`` is bound once the update returned)
        self._opt_step_code = None
        self._opt_before: tuple = (None, False)  # (step, marked) at a second optimizer step
        if optimizer is not None and grads_hook:
            code = getattr(getattr(type(hooked), "step", None), "__code__", None)
            if code is not None and {"out", "post_hook"} <= set(code.co_varnames):
                self._opt_step_code = code
        # The model's last output, held until the step ends, so that a non-finite loss can
        # be told apart from a non-finite model output (one attribute store per forward;
        # not on compiled models, whose graphs a Python hook would break). A plain model
        # given as it is keeps it through a class of its own (.keep_output: no forward
        # hook, so its forward does not take nn.Module's hook path); the others (wrapped,
        # FSDP, a framework's module) through a forward hook.
        self._last_output = None
        self._keep_class = None
        if (not self._cuda or self.halt_on_nonfinite) and getattr(model, "_orig_mod", None) is None:
            if model is self._module and grads_hook and can_keep(model):
                self._keep_class = keep_outputs(model, self)
            else:
                self._hooks.append(self._module.register_forward_hook(self._keep_output))
        self._layer_stats = None
        if layer_stats_every is not None and self._norms.sharded:
            # a rank holds a shard of each DTensor parameter (FSDP2): quantiles of a shard
            # are not the layer's, and shards can be empty; the norms are taken per shard
            warnings.warn(MSG_SHARDED_LAYER_STATS, DebugkitWarning, stacklevel=2)
        elif layer_stats_every is not None:
            from .layerstats import LayerStats

            self._layer_stats = LayerStats(
                self._module, named, _inner_optimizer(optimizer) if optimizer is not None else None,
                layer_stats_every, self._writer.add, self._cuda)
        # The step path of the default recording (CPU, no guard, hang watchdog or layer
        # statistics) is "lean": begin, log, the optimizer hooks and the end of a healthy
        # step run without the branches and helper calls of the options (see
        # docs/benchmarks.md, "Where the Recorder's in-loop cost goes"). Any other step,
        # and any step that fails or sees a non-finite value, takes the full path.
        # The CPU generator's state at a lean step's start, as a clone of the generator
        # (``Generator.clone_state``, torch >= 2.4): it copies the generator without the
        # 5 KB state tensor and its allocations that ``get_state`` builds (~10 us less in
        # place, after backward); a capture turns it into that tensor (_rng_state).
        gen = torch.default_generator
        self._get_cpu_rng = getattr(gen, "clone_state", gen.get_state)
        # With layer statistics, the steps they do not sample are lean too: _Step.__enter__
        # sends a sampled step down the full path (``_lean`` is then False until the next
        # step begins), and the lean optimizer pre-hook checks the grad-norm trigger's band
        # inline, leaving the lean path for the step only when the norms left it.
        self._lean_ok = (self._guard is None and self._watchdog is None and not self._cuda
                         and not torch.cuda.is_available())  # no CUDA RNG state to take
        self._lean = self._lean_ok  # whether the open step is on the lean path
        # rec.log reads a tensor of this exact type with one .item() (a CPU model only)
        self._item_type = None if self._cuda else torch.Tensor
        ref = weakref.ref(self)
        self._atexit = lambda: (r := ref()) is not None and r._close_at_exit()
        atexit.register(self._atexit)

    # ------------------------------------------------------------------ public API
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None:
            self._writer.event("error", error_type=type(exc).__name__, message=str(exc)[:2000],
                               step=self._last_step)
        self.close(failed=exc is not None)
        return False

    def step(self, batch=None, *, step: int | None = None, indices=None) -> _Step:
        """Context manager around one training step.

        Parameters
        ----------
        batch : any, optional
            The batch this step trains on (captured if the step fails).
        step : int, optional
            The step number (default: one more than the previous step, from 0).
        indices : list of int, optional
            The batch's dataset indices (known automatically for :meth:`track`-ed loaders).
        """
        # _Step(self, batch, indices, step) without its __init__ frame: one Python call
        # per step less (the step path's cost follows its number of calls, cold after the
        # optimizer step); the fields are _Step.__init__'s
        st = _new_step(_Step)
        st.rec = self
        st.batch = batch
        st.indices = indices
        st.step = self._step_no if step is None else int(step)
        st.skipped = False
        st.violations = ()
        return st

    def begin_step(self, batch=None, *, step: int | None = None, indices=None) -> _Step:
        """Start a step without a ``with`` block (for framework callbacks).

        The same as entering ``rec.step(batch, ...)``: pair it with :meth:`end_step`.
        Returns the step; its ``batch`` may be replaced until the step ends (the batch a
        capture stores is the step's ``batch`` at that time).
        """
        st = self.step(batch, step=step, indices=indices)
        self._begun = st
        st.__enter__()
        return st

    def end_step(self, error: BaseException | None = None) -> None:
        """End the step :meth:`begin_step` started; with ``error``, capture it as a failure.

        The same as leaving the ``with rec.step(...)`` block (normally, or with ``error``).
        A :class:`debugkit.NonFiniteError` of ``halt_on_nonfinite`` propagates. Does
        nothing when no step is open.
        """
        st, self._begun = self._cur or self._begun, None
        if st is None or (st is not self._cur and not st.skipped):
            return
        st.__exit__(type(error) if error is not None else None, error, None)

    @property
    def current_step(self) -> _Step | None:
        """The open step (between ``begin_step``/``end_step`` or inside ``rec.step``), or None."""
        return self._cur

    def record_grads(self) -> None:
        """Take the gradient norms of the open step now (once per step; later calls do nothing).

        For frameworks whose optimizer hook fires before backward (``grads_hook=False``):
        call it after backward and after any gradient unscaling, before clipping.
        """
        if self._cur is not None and not self._grads_taken:
            self._take_grads("after backward (record_grads)")

    def log(self, **scalars) -> None:
        """Record scalars (Python numbers or 0-d tensors) for the current step.

        Outside a step they belong to the last completed step.
        """
        wall = _time()
        cur = self._cur
        if cur is None:  # rare: through the writer's locked queue
            step = self._last_step or 0
            for key, value in scalars.items():
                self._writer.add("scalars", (step, key, self._scalar_value(key, value), wall))
            return
        rows, step = self._step_scalars, cur.step  # the step's rows, handed over at its end
        for key, value in scalars.items():
            # inline for a float and a CPU model's plain floating-point 0-d tensor: one
            # torch call, .tolist(), which reads the value without a dispatched op
            # (.item() dispatches aten::_local_scalar_dense: ~1.6 us more in place, cold
            # after backward); anything else (an int, a 1-element 1-d tensor, a tensor
            # that is not one element): _scalar_value
            if type(value) is not float:
                if type(value) is self._item_type:
                    v = value.tolist()
                    value = v if type(v) is float else self._scalar_value(key, value)
                else:
                    value = self._scalar_value(key, value)
            rows.append((step, key, value, wall))

    def event(self, kind: str, **fields) -> None:
        """Append one event (``{"time", "kind", **fields}``) to this rank's events file now.

        Fields must be JSON-serialisable (others are written as their ``repr``); they
        come back from :meth:`debugkit.Run.events`. Used by :func:`debugkit.retry`.
        """
        if not isinstance(kind, str) or not kind:
            raise InvalidInputError(f"event kind={kind!r}: expected a non-empty string")
        self._writer.event(kind, **fields)

    def track(self, loader, *, dataset_factory=None, dataset_kwargs=None):
        """Wrap a DataLoader so that captures know each batch's dataset indices.

        The first time a dataset is seen, rank 0 also writes its length and a fingerprint
        of a few sampled items into ``data.json`` (see :mod:`debugkit.recorder.datafp`).

        Parameters
        ----------
        loader : torch.utils.data.DataLoader
        dataset_factory : str, optional
            ``"module:callable"`` that rebuilds ``loader.dataset`` as
            ``dataset_factory(**dataset_kwargs)``, the way ``model_factory`` rebuilds the
            model. A failure raised while the loader fetched or collated a batch then
            records it (with its file's SHA-256), and ``debugkit replay`` re-fetches the
            batch's dataset indices from the rebuilt dataset, compares them with the
            captured samples and collates them again (see :meth:`set_dataset_factory`).
        dataset_kwargs : dict, optional
            Its keyword arguments (plain JSON data).
        """
        dataset = getattr(loader, "dataset", None)
        if dataset_factory is not None:
            self.set_dataset_factory(dataset, dataset_factory, dataset_kwargs)
        self._record_dataset(dataset)
        return track_loader(loader, self._set_next_indices, self.capture_data_failure)

    def set_dataset_factory(self, dataset, dataset_factory, dataset_kwargs=None) -> None:
        """Record how to rebuild ``dataset`` for replay: ``dataset_factory(**dataset_kwargs)``.

        :meth:`track` calls it; framework callbacks (``dataset_factory=`` of the Lightning
        and Hugging Face callbacks) call it for the loader the framework iterates. The
        spec is located (not imported) and its file's SHA-256 recorded; replay runs it
        only when the file is unchanged and lies in a folder the viewer allows
        (:mod:`debugkit.replay.policy`), in a child process.
        """
        from .dataload import dataset_code

        if dataset is None:
            raise InvalidInputError("set_dataset_factory(): the loader has no dataset to rebuild")
        self._dataset_code[id(dataset)] = (dataset, dataset_code(dataset_factory, dataset_kwargs))

    def checkpoint(self, step=None, extra=None, *, keep_last=None) -> dict | None:
        """Write the model's (and optimizer's) state into ``checkpoints/`` atomically.

        ``step`` defaults to the number of steps done so far; ``extra`` is any
        JSON-serialisable dict stored beside it; ``keep_last=N`` prunes all but the newest
        N. Under torch.distributed only rank 0 writes (replicas hold the same state) and
        the other ranks return None. Returns the index entry (step, wall_time, files with
        bytes and SHA-256). Resume with :func:`debugkit.resume_latest`.
        """
        from ..checkpoints import write_checkpoint

        if self.rank != 0:
            return None
        step = self._step_no if step is None else step
        entry = write_checkpoint(self.run_dir, self._module, self.optimizer, step=step,
                                 extra=extra, keep_last=keep_last)
        self._writer.event("checkpoint", step=step, dir=entry["dir"],
                           bytes=sum(m["bytes"] for m in entry["files"].values()))
        return entry

    def __deepcopy__(self, memo):
        # a copy of a recorded model or optimizer (its hooks are this Recorder's bound
        # methods): the copy's hooks do nothing (see _CopiedHooks)
        return _CopiedHooks()

    def __reduce__(self):
        return (_CopiedHooks, ())

    def close(self, *, failed: bool = False) -> None:
        """Flush everything and mark the run finished (or failed). Idempotent."""
        if self._closed:
            return
        self._closed = True
        # a SIGTERM while closing waits until the rows and the final state are written
        self._term.hold()
        try:
            self._close_writing(failed)
        finally:
            self._term.close()  # the replaced handler back; a held SIGTERM acted on now
        self._rss.close()
        self._fatal.close()
        if self._uploader is not None:
            problem = self._uploader.finish()  # the last pass: the bucket holds the whole run
            if problem:
                warnings.warn(problem, DebugkitWarning, stacklevel=2)

    def _close_writing(self, failed: bool) -> None:
        """close()'s part that writes the run: the open step's rows, the batch spec, the
        last flush and the final state."""
        self._nonfinite.resolve_pending(block=True)
        st = self._cur
        if st is not None:
            # A step left open: an error raised from a hook (halt_on_nonfinite in the
            # optimizer's pre-step hook under the HF Trainer) that no end_step followed.
            # Its rows, the failing step's gradient norms among them, are written as a
            # failed step instead of being dropped with the unpublished block slot.
            try:
                self._finish_step_rows(st, time.perf_counter(), False)
            except Exception as err:  # noqa: BLE001 - closing must go on
                self._writer.event("capture_error", step=st.step, message=str(err)[:2000])
        for h in self._hooks:
            h.remove()
        if self._keep_class is not None:
            release(self._module, self._keep_class)
        if self._layer_stats is not None:
            self._layer_stats.close()
        if self._watchdog is not None:
            self._watchdog.stop()
        atexit.unregister(self._atexit)
        self._memhist.close(self._last_step)
        if self._pip_check is not None:
            self._pip_check.start()  # a run shorter than its first steps: now
        self._write_batch_spec()
        state = fmt.STATE_FAILED if failed else fmt.STATE_FINISHED
        self._writer.event("close", state=state, steps=self._step_no,
                           skipped_batches=self._skipped)
        self._writer.close(state)

    def comm(self):
        """Context manager around a blocking collective; its time counts as ``comm_s``.

        ``with rec.comm(): dist.all_reduce(loss)`` inside ``rec.step``: the step's
        ``comm_s`` is the time spent in such blocks (plus DDP buckets, see
        :meth:`watch_ddp`) and its compute time is the rest.
        """
        return self._comm.block()

    def watch_ddp(self, ddp_model, hook=None, state=None):
        """Time DDP's gradient all-reduce: registers a comm hook that wraps ``hook``.

        Parameters
        ----------
        ddp_model : torch.nn.parallel.DistributedDataParallel
            The wrapped model (call before its first backward; DDP takes one hook).
        hook : callable, optional
            Your own comm hook (default: DDP's ``allreduce_hook``, the same averaging
            DDP does without a hook).
        state : optional
            The hook's state (default: the DDP model's process group).
        """
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(ddp_model, DistributedDataParallel):
            raise InvalidInputError(MSG_NOT_DDP.format(type=type(ddp_model).__name__))
        if hook is None:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            hook = default_hooks.allreduce_hook
        if state is None:
            state = getattr(ddp_model, "process_group", None)
        ddp_model.register_comm_hook(state, self._comm.wrap_ddp_hook(hook))

    @property
    def batches_skipped(self) -> int:
        """Number of steps whose batch the guard skipped (``guard_action="skip"``)."""
        return self._skipped

    # ------------------------------------------------------------------ internals
    def _set_next_indices(self, idx):
        self._next_indices = idx

    def capture_data_failure(self, exc, indices, loader) -> str | None:
        """Capture a failure raised while ``loader`` fetched or collated the batch of the
        next step (``indices``: its dataset indices) as a ``data_loading`` capture: the
        samples re-read one by one from ``loader.dataset``. :meth:`track` does it on its
        own; framework callbacks call it. Returns the capture's id (None when it was
        already captured, or the capture failed)."""
        if getattr(exc, "_debugkit_captured", False) or self._closed:
            return None
        step = self._step_no
        try:
            from .dataload import TORCH_COLLATE, collate_code, describe_failed_batch

            collate = collate_code(getattr(loader, "collate_fn", None))
            info = describe_failed_batch(getattr(loader, "dataset", None), indices, exc,
                                         stacks=collate["spec"] in TORCH_COLLATE) \
                if getattr(loader, "dataset", None) is not None else {"phase": "unknown", "samples": []}
            items = info.pop("items", None)
            code = dict(self._code)
            info["collate_fn"] = collate["spec"]
            if collate["spec"] not in TORCH_COLLATE:  # torch's own needs no identity
                if collate["code"] is not None:
                    code["collate_fn"] = collate["code"]
                else:
                    info["collate_fn_not_replayable"] = collate["why_not"]
            held = self._dataset_code.get(id(getattr(loader, "dataset", None)))
            if held is not None and held[1]["code"] is not None:
                code["dataset_factory"] = held[1]["code"]
                info["dataset_kwargs"] = held[1]["kwargs"]
            info["num_workers"] = int(getattr(loader, "num_workers", 0) or 0)
            st = _Step(self, items, indices, step)
            text = str(exc)
            if text.startswith("Caught ") and "Original Traceback" in text:  # a worker's error
                last = [ln for ln in text.strip().splitlines() if ln.strip()][-1]
                info["worker_error"] = text.splitlines()[0]
                text = last.split(": ", 1)[1] if last.startswith(type(exc).__name__ + ":") else last
            fid = write_capture(
                self.run_dir, kind="data_loading", step=step, rank=self.rank,
                world_size=self.world_size, device=str(self.device), exc=exc, batch=items,
                code=code, dataset_indices=indices, message=text,
                extra={"num_classes": self.num_classes, "data_loading": info})
            self._writer.event("failure", step=st.step, failure=fid, error_type=type(exc).__name__,
                               message=str(exc)[:2000], phase=info.get("phase"))
            exc._debugkit_captured = True
            return fid
        except Exception as cap_err:  # never mask the user's exception
            self._writer.event("capture_error", step=step, message=str(cap_err))
            return None

    def _record_dataset(self, dataset):
        if self.rank != 0 or dataset is None or id(dataset) in self._datasets_seen:
            return
        self._datasets_seen[id(dataset)] = dataset  # held, so its id is not reused
        try:
            from .datafp import describe_dataset

            entry = describe_dataset(dataset)
            entry["first_step"] = self._step_no
            self._data_record["datasets"].append(entry)
            atomic_write_json(self.run_dir / fmt.DATA_FILE, self._data_record)
        except Exception:  # dataset facts are best effort, never break training
            pass

    def _write_batch_spec(self):
        spec = self._specs.spec(self.num_classes)
        if spec is None:
            return
        try:
            atomic_write_json(self._writer_dir / fmt.RANK_BATCH_SPEC.format(
                segment=self._writer.segment), spec)
        except OSError:
            pass

    def _close_at_exit(self):
        if not self._closed:
            self.close(failed=self._last_failed)

    def _scalar_value(self, key: str, value):
        """A logged value as the writer stores it: a float, or on CUDA a device->host copy
        in flight that the writer thread reads (no sync on the training thread). A CPU
        tensor is read here: the non-finite check needs the loss now, and ``.item()`` of
        a CPU scalar (~0.15 us) costs less than keeping it (``.detach()``, ~0.7 us)."""
        if type(value) is float:
            return value
        if isinstance(value, self._Tensor):
            # On a CPU run one torch call: .item() (it needs neither detach nor reshape, and
            # refuses a tensor that is not one element). Each torch entry point the step
            # touches costs ~1 us here, where the code runs cold after backward.
            if not self._cuda or not value.is_cuda:
                try:
                    return float(value.item())
                except RuntimeError:
                    if value.numel() == 1:
                        raise
            if value.numel() != 1:
                raise InvalidInputError(
                    f"rec.log({key}=...): expected a Python number or a 0-d tensor, "
                    f"got a tensor of shape {tuple(value.shape)}") from None
            import torch

            v = value.detach()
            host = torch.empty((1,), dtype=torch.float64, pin_memory=True)
            host.copy_(v.reshape(1).double(), non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            return PendingTensor(host, ev)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidInputError(
                f"rec.log({key}={value!r}): expected a Python number or a 0-d tensor") from None

    def _begin_step(self, st: _Step):
        st.__enter__()

    def _begin_step_full(self, st: _Step):
        if self._closed:
            raise InvalidInputError("Recorder.step(): the recorder is closed")
        now = time.perf_counter()
        if self._nonfinite.pending:
            self._nonfinite.resolve_pending(block=False)
        st.indices = st.indices if st.indices is not None else self._next_indices
        self._next_indices = None
        bad = self._guard.check(st.batch, st.indices) if self._guard is not None else None
        if bad and self._guard_action == "skip":
            self._skip_step(st, bad)
            return
        self._cur = st
        self._step_scalars = []
        self._step_grads = None
        self._losses_checked = 0
        self._grads_taken = False
        self._opt_stepped = False
        self._rng = take_rng_state()
        self._t0 = now
        self._wall0 = time.time()
        self._writer.set_step(st.step)
        if self._comm.measuring:
            self._comm.begin_step()
        if self._watchdog is not None:
            self._watchdog.step_started(st.step)
        every = self._specs.every  # spec learning: most steps are not observed
        if every and not st.step % every:
            self._specs.observe(st.step, st.batch)
        if self._layer_stats is not None:
            self._layer_stats.begin(st.step)
        if bad:  # guard_action="raise": a failure of this step, captured with its batch
            err = InvalidInputError(f"step {st.step}: " + format_violations(bad))
            self._end_step(st, err)
            err._debugkit_captured = True
            raise err

    def _skip_step(self, st: _Step, bad):
        st.skipped = True
        st.violations = tuple(bad)
        self._skipped += 1
        self._skipping = True
        self._writer.event("batch_skipped", step=st.step, skipped=self._skipped,
                           dataset_indices=st.indices, n_violations=len(bad),
                           violations=[v.to_dict() for v in bad[:20]],
                           message=format_violations(bad)[:2000])
        self._step_no = st.step + 1

    def _take_grads(self, where: str):
        st = self._cur
        self._grads_taken = True
        if self._layer_stats is not None:
            self._layer_stats.grads_ready(st.step)
        if st.step % self.log_every:
            return
        values = self._norms.compute()
        if self._layer_stats is not None:
            self._observe_norms(st, values)
        self._step_grads = values
        rows = self._step_scalars
        self._losses_checked = len(rows)
        if type(values) is list and values[-1] - values[-1] == 0.0:
            for row in rows:  # _all_finite(rows, 0), inline
                v = row[2]
                if type(v) is not float or v - v != 0.0:
                    break
            else:
                return
        if not self._nonfinite.found:
            # Judged in full only when a value is non-finite (x - x is NaN for NaN and
            # inf) or a GPU copy is in flight: a finite total norm means every layer's
            # norm is finite (.norms).
            self._nonfinite.check(st, values, self._losses(), where,
                                  after_optimizer_step=self._opt_stepped)

    def _observe_norms(self, st: _Step, values) -> None:
        """Feed the layer statistics' grad-norm trigger; when this step's norms left their
        band, sample the step now (its forward run again) and end it on the full path."""
        ls = self._layer_stats
        if ls.observe_norms(st.step, values) and not self._opt_stepped:
            self._lean = False  # the sampled step's rows are handed over by LayerStats.end
            ls.sample_now(st.step, self._forward_again(st))

    def _losses(self) -> list[tuple[str, Any]]:
        """``(key, value)`` of the open step's logged losses (:func:`is_loss_key`)."""
        known = self._loss_keys
        out = []
        for row in self._step_scalars:
            key = row[1]
            is_loss = known.get(key)
            if is_loss is None:
                is_loss = known[key] = is_loss_key(key)
            if is_loss:
                out.append((key, row[2]))
        return out

    def _keep_output(self, module, args, output):
        self._last_output = output

    def _nonfinite_found(self, st: _Step, msg: str, info: dict) -> None:
        if self._cur is st and self._last_output is not None:
            info = {**info, "model_outputs": describe_outputs(self._last_output)}
        fid = self._capture(st, "nonfinite", None, message=msg, extra={"nonfinite": info})
        self._writer.event("nonfinite", step=st.step, failure=fid, message=msg)

    def _pre_optimizer_step(self, optimizer, args, kwargs):
        """The optimizer's step pre-hook: the step's gradient norms (once per step), then,
        on returning, the step is marked optimizer-stepped (``_opt_stepped``: the update
        runs next; a hook that raises, ``halt_on_nonfinite``, leaves it unmarked)."""
        st = self._cur
        if st is None:
            self._check_skipped_body()
            return
        if self._grads_taken:  # a second optimizer step (or record_grads() ran)
            self._opt_before = (st, self._opt_stepped)
            self._opt_stepped = True
            return
        if not self._lean or st.step % self.log_every:
            self._take_grads("optimizer pre-step hook")
            self._opt_stepped = True
            return
        # _take_grads of the lean path, inline: the norms, the layer statistics' trigger,
        # then the finite check of the total and of the rows logged so far (x - x is NaN
        # for NaN and inf)
        self._grads_taken = True
        values = self._norms.compute()
        self._step_grads = values
        rows = self._step_scalars
        self._losses_checked = len(rows)
        ls = self._layer_stats
        if type(values) is list and values[-1] - values[-1] == 0.0:
            if ls is not None:
                # LayerStats.observe_norms, inline: each layer's floored norm within its
                # band (``_quick`` once the band is past its dense start and small enough
                # for the plain loop), then on every ``update_every``-th observation the
                # band's update in plain Python; otherwise, or when a norm left the band,
                # the full observation (it samples the step).
                if ls._quick:
                    floor = ls.share * values[-1] + 1e-30  # the total is finite and >= 0
                    for a, b, c in zip(values, ls._lo, ls._hi):
                        if not b <= a + floor <= c:
                            self._observe_norms(st, values)
                            break
                    else:
                        seen = ls._seen = ls._seen + 1
                        ls._floor = floor
                        if not seen % ls.update_every:
                            ls._update_band_py(values, floor)
                else:
                    self._observe_norms(st, values)
            for row in rows:
                v = row[2]
                if type(v) is not float or v - v != 0.0:
                    break
            else:
                self._opt_stepped = True
                return
        elif ls is not None:
            self._observe_norms(st, values)
        if not self._nonfinite.found:
            self._nonfinite.check(st, values, self._losses(), "optimizer pre-step hook",
                                  after_optimizer_step=self._opt_stepped)
        self._opt_stepped = True

    def _check_skipped_body(self):
        """Warn (once) when the body of a step the guard skipped steps the optimizer."""
        if self._skipping and not self._warned_skipped_body:
            self._warned_skipped_body = True
            warnings.warn(MSG_SKIPPED_BODY_RAN, DebugkitWarning, stacklevel=3)

    def _post_optimizer_step(self, optimizer, args, kwargs):
        """The step post-hook of a Recorder without the pre-hook (``grads_hook=False``)."""
        if self._cur is None:
            self._check_skipped_body()
        else:
            self._opt_stepped = True

    def _capture(self, st: _Step, kind: str, exc, message=None, extra=None) -> str:
        if self._layer_stats is not None:
            self._layer_stats.on_failure(
                st.step, self._forward_again(st) if kind == "nonfinite" else None)
        fid = write_capture(
            self.run_dir, kind=kind, step=st.step, rank=self.rank, world_size=self.world_size,
            device=str(self.device), exc=exc, batch=st.batch, model=self._module,
            optimizer=self.optimizer, rng_state=self._rng_state(), code=self._code,
            dataset_indices=st.indices, message=message, batch_spec=self._specs.spec(self.num_classes),
            extra={"num_classes": self.num_classes,
                   "optimizer_stepped": self._opt_stepped, **(extra or {})})
        return fid

    def _rng_state(self) -> dict | None:
        """The open step's start-of-step RNG state as :func:`take_rng_state` gives it: the
        lean path keeps a clone of the CPU generator (or its state tensor, before torch
        2.4), turned into the state tensor only here, when a capture needs it."""
        rng = self._rng
        if rng is None or type(rng) is dict:
            return rng
        return {"torch_cpu": rng if isinstance(rng, self._Tensor) else rng.get_state()}

    def _forward_again(self, st: _Step):
        """A callable running the open step's forward again for the layer statistics, or
        None when the weights have changed since (the optimizer stepped) or there is no
        batch."""
        if st.batch is None or self._opt_stepped or self._cur is not st:
            return None
        from .layerstats import forward_again

        module, batch, rng = self._module, st.batch, self._rng_state()
        return lambda: forward_again(module, batch, rng)

    def _end_step(self, st: _Step, exc):
        t1 = _perf_counter()
        if exc is None and self._lean and self._grads_taken and (
                len(self._step_scalars) == self._losses_checked
                or _all_finite(self._step_scalars, self._losses_checked)):
            # a healthy lean step whose values were all judged finite
            self._finish_step_rows(st, t1, True)
            specs = self._specs
            if specs.obs is not None:
                specs.commit(st.step)
            return
        self._end_step_full(st, exc, t1)

    def _end_step_full(self, st: _Step, exc, t1: float):
        ok = exc is None
        if not ok and self._opt_stepped and self._opt_step_code is not None:
            self._opt_stepped = self._stepped_despite(st, exc)
        try:
            if ok and not self._grads_taken:
                self._take_grads("end of step")
            elif (ok and len(self._step_scalars) > self._losses_checked
                  and not self._nonfinite.found
                  and not _all_finite(self._step_scalars, self._losses_checked)):
                # Loss logged after the norms were taken (after the optimizer step): judge
                # it on its own.
                self._nonfinite.check_loss(st, self._losses(), "end of step",
                                           after_optimizer_step=self._opt_stepped)
        except NonFiniteError as err:
            ok, exc = False, err
            raise
        finally:
            if not ok and not getattr(exc, "_debugkit_captured", False):
                try:
                    fid = self._capture(st, "exception", exc)
                    self._writer.event("failure", step=st.step, failure=fid,
                                       error_type=type(exc).__name__, message=str(exc)[:2000])
                    self._memhist.dump(st.step, "failure", failure=fid)
                except Exception as cap_err:  # never mask the user's exception
                    self._writer.event("capture_error", step=st.step, message=str(cap_err))
            if self._layer_stats is not None:
                if self._opt_stepped:  # a sampled step's update ratio, after the update
                    try:
                        self._layer_stats.after_update()
                    except Exception:  # noqa: BLE001 - statistics never break the step
                        pass
                self._layer_stats.end(st.step)
            self._finish_step_rows(st, t1, ok)
            specs = self._specs
            if ok:
                if self._memhist.active:
                    self._memhist.step_ok(st.step)
                if specs.obs is not None:
                    specs.commit(st.step)
            else:
                specs.obs = None

    def _stepped_despite(self, st: _Step, exc) -> bool:
        """Whether the optimizer of a step that ends with ``exc`` did step: the pre-hook
        marked the step, but ``exc`` may have come out of ``optimizer.step()`` itself (its
        update, a closure, another hook) before the update returned."""
        code, tb = self._opt_step_code, exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is code:
                if "out" in tb.tb_frame.f_locals:
                    return True  # raised after the update: by a post-hook
                before = self._opt_before
                return before[0] is st and bool(before[1])  # an earlier step() of this step
            tb = tb.tb_next
        return True

    def _finish_step_rows(self, st: _Step, t1: float, ok: bool):
        """Write the step's rows into slot ``n`` of the writer's current block and publish
        it (no lock, no per-row call; see :class:`debugkit.recorder.writer.StepBlock`)."""
        step, wall, t0 = st.step, self._wall0, self._t0
        w = self._writer
        b = w.block
        i = b.n
        last = self._last_exit
        comm = self._comm.end_step(t0, t1) if self._comm.measuring else None
        if comm is not None and self._comm.calls != self._comm_calls:
            # The step's collective count, written when it changes: gloo and NCCL pair
            # collectives by order, so a rank that skips or adds one is named by it.
            self._comm_calls = self._comm.calls
            w.event("collectives", step=step, calls=self._comm.calls)
        if t1 >= self._rss_next or not ok:
            self._rss_value = self._rss.read()
            self._rss_next = t1 + RSS_EVERY_S
            pc = self._pip_check
            if pc is not None and pc.due and step + 1 >= PIP_CHECK_AFTER_STEPS:
                pc.start()
        mem = self._rss_value  # a CPU run's memory row, built by the writer (StepBlock)
        if self._cuda:
            import torch

            try:  # one call for the three counters (memory_allocated() & co. each make it)
                m = torch.cuda.memory_stats(self.device)
                cuda = (m.get("allocated_bytes.all.current", 0), m.get("reserved_bytes.all.current", 0),
                        m.get("allocated_bytes.all.peak", 0))
            except RuntimeError:  # a broken CUDA context (device-side assert): no counters,
                cuda = (None, None, None)  # and the step's own error is the one that propagates
            mem = (step, wall, self._dev_str, *cuda, mem)
        lr = None  # the learning rates' rows, built by the writer
        if self.optimizer is not None:
            groups = self.optimizer.param_groups
            if len(groups) == 1:
                lr = groups[0].get("lr")
                if lr is not None and type(lr) is not float:
                    lr = float(lr.item()) if hasattr(lr, "item") else float(lr)
            else:
                lr = []
                for k, g in enumerate(groups):
                    v = g.get("lr")
                    if v is not None:
                        lr.append((f"lr/{k}", v if type(v) is float else
                                   float(v.item()) if hasattr(v, "item") else float(v)))
        rows = self._step_scalars
        b.rows[i] = (step, wall, t1 - t0, None if last is None else t0 - last, comm, ok,
                     self._step_grads, mem, rows if rows else None, lr)
        b.n = i + 1  # publishes the slot to the writer thread
        if i + 1 == BLOCK_STEPS:
            w.next_block()
        if self._watchdog is not None:
            self._watchdog.step_ended(step, ok)
        self._last_failed = not ok
        self._last_step = step
        self._step_no = step + 1
        self._cur = None
        self._last_output = None
        self._last_exit = _perf_counter()
