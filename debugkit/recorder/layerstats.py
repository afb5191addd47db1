"""Layer statistics: what is inside the layers on sampled steps (``layer_stats_every=N``).

On a sampled step the Recorder asks this module to

* attach a forward hook to every leaf module for that step only (no hook exists on the
  other steps), and reduce each floating-point output to ``mean``, ``std``, ``max_abs``,
  ``frac_zero``, ``frac_nonfinite``, plus ``frac_saturated`` for bounded activations
  (tanh, sigmoid, hardtanh, ...) and ``frac_dead_units`` for the ReLU family (the share
  of units, i.e. features or channels, that are zero for every sample of the batch),
  from at most :data:`OUTPUT_ROWS` samples of the batch (evenly strided);
* take quantiles (1/5/25/50/75/95/99 %) of every trained parameter's weights and
  gradients when the gradients are ready (the optimizer's step pre-hook, or the end of
  the step), read from :data:`QUANTILE_SAMPLE` evenly spaced elements of each (all
  parameters' samples sorted in one batched sort), and its
  number of dimensions (stat ``ndim``);
* measure each parameter's update-to-weight ratio ``||w_after - w_before|| / ||w_before||``
  (that is ``||lr * update|| / ||w||``) around the optimizer step.

Cost: the hook only copies the (row-capped) output; the reductions run once per group of
outputs that share a shape and a kind (all the blocks of a transformer, all the ReLUs of
an MLP), stacked, with element-wise operations and plain sums rather than per-module
``var_mean``/``isfinite`` calls (a few dozen tensor operations per sampled step instead
of ~20 per module). They stay on the device and are concatenated into one vector per
sampled step; on CUDA that vector is copied into pinned memory without a blocking sync.
The step's rows go to the writer as columns (:class:`~.writer.ColumnRows`: the layout of
the sampled step, cached, and the value vector), which the writer thread turns into an
Arrow batch of the run's ``layers`` table (see docs/run-format.md), resolving the copy
there.

Between sampled steps the per-layer gradient norms the Recorder takes anyway feed a
trigger: when a layer's norm leaves its recent band (an exponential moving average of
its log, ± max(log 4, 4 x the moving absolute deviation); norms below 1 % of the total
count as that 1 %), that step is sampled too, by running its forward again before the
optimizer step (:func:`forward_again`), and so is the next; its rows name the layers that
moved (stat ``trigger_grad_norm``). A non-finite capture records its step the same way
(an exception's capture: weights and gradients only) and samples the next step. Memory
per sampled step is bounded by one copy of the trained parameters (for the update ratio)
plus the output copies (reduced whenever they reach :data:`OUTPUT_BUDGET` elements).
"""

from __future__ import annotations

import math
from typing import Any

from .writer import ColumnRows, PendingTensor, RowLayout

#: Quantile levels of weights and gradients; stat names ``w_q01`` ... ``g_q99``.
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
Q_NAMES = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
#: The quantiles of a tensor are read from this many of its elements, evenly spaced (one
#: batched sort of every parameter's sample per sampled step).
QUANTILE_SAMPLE = 1024
#: Output statistics read at most this many samples (evenly strided along the batch axis).
OUTPUT_ROWS = 256
#: Copied outputs waiting for their reduction are reduced once they hold this many elements
#: (a bound on the memory a sampled step adds), else at the end of the step.
OUTPUT_BUDGET = 1 << 22
#: Parameters of up to this many elements (biases, norms' scales) are stacked by size for
#: their quantile sample: one copy of them costs less than one ``index_select`` each.
STACK_NUMEL = 4 * QUANTILE_SAMPLE
OUTPUT_STATS = ("mean", "std", "max_abs", "frac_zero", "frac_nonfinite")
#: Modules whose output is bounded: (low, high) of the output, or None to read them from
#: the module (hardtanh's ``min_val``/``max_val``).
BOUNDED = {"Tanh": (-1.0, 1.0), "Sigmoid": (0.0, 1.0), "Hardtanh": None, "Hardsigmoid": (0.0, 1.0),
           "Softsign": (-1.0, 1.0), "ReLU6": (0.0, 6.0), "Hardswish": None}
#: Modules whose outputs are exactly zero for negative inputs.
RELU_FAMILY = ("ReLU", "ReLU6", "RReLU", "Threshold")
#: A unit counts as saturated within this share of the output range from a bound.
SATURATION_MARGIN = 0.01
# The grad-norm trigger: observations before it fires, EMA weight, band floor (log 4).
TRIGGER_WARMUP = 8
TRIGGER_ALPHA = 0.1
TRIGGER_FLOOR = math.log(4.0)
TRIGGER_DEVS = 4.0
TRIGGER_SHARE = 1e-2
#: The band is updated at every one of the first TRIGGER_DENSE observations (the norms move
#: fastest early in training), then every TRIGGER_UPDATE_EVERY-th one and whenever a step
#: leaves it; every step is checked against it.
TRIGGER_DENSE = 64
TRIGGER_UPDATE_EVERY = 8
#: Up to this many layers the per-step check is a plain Python loop, beyond it numpy.
TRIGGER_PY_LAYERS = 128


def _exp_or_inf(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:  # numpy's inf
        return math.inf


def _bounds(module, cls: str):
    b = BOUNDED.get(cls, False)
    if b is False:
        return None
    if b is None:
        if cls == "Hardtanh":
            return float(module.min_val), float(module.max_val)
        return None
    return b


def _spaced_all(tensors, cache):
    """``[len(tensors), QUANTILE_SAMPLE]`` float32: :data:`QUANTILE_SAMPLE` evenly spaced
    elements of each tensor (elements repeat when it is smaller), so that all sort together.

    Small tensors of one size, dtype and device (up to :data:`STACK_NUMEL` elements) are
    stacked and sampled with one ``index_select``; larger ones are sampled one by one (a
    stack would copy them whole).
    """
    import torch

    groups: dict = {}
    for i, t in enumerate(tensors):
        flat = t.detach().reshape(-1)
        n = flat.numel()
        key = (n, flat.device, flat.dtype) if n <= STACK_NUMEL else i
        groups.setdefault(key, []).append((i, flat))
    out: list = []
    order: list = []
    for members in groups.values():
        flat = members[0][1]
        key = (flat.numel(), flat.device)
        idx = cache.get(key)
        if idx is None:
            idx = cache[key] = torch.linspace(0, flat.numel() - 1, QUANTILE_SAMPLE,
                                              device=flat.device).round().long()
        if len(members) == 1:
            out.append(flat.index_select(0, idx).unsqueeze(0))
        else:
            out.append(torch.stack([f for _, f in members]).index_select(1, idx))
        order += [i for i, _ in members]
    x = torch.cat(out) if len(out) > 1 else out[0]
    if order != sorted(order):
        inv = [0] * len(order)
        for pos, i in enumerate(order):
            inv[i] = pos
        x = x.index_select(0, torch.tensor(inv, device=x.device))
    return x.to(torch.float32)


class LayerStats:
    """The layer statistics of one Recorder (see the module docstring).

    Parameters
    ----------
    module : torch.nn.Module
        The unwrapped model.
    named_params : list of (str, Parameter)
        The trained parameters, in the Recorder's layer order.
    optimizer : torch.optim.Optimizer or None
        The inner optimizer, or None (with one, the Recorder calls :meth:`after_update`
        at the end of a sampled step whose optimizer stepped, to time the update ratio).
    every : int
        Sample every ``every`` steps (and the steps the trigger or a failure asks for).
    add : callable
        ``add(table, row)`` of the rank's writer.
    cuda : bool
        Whether the model lives on a CUDA device (copies are then asynchronous).
    """

    def __init__(self, module, named_params, optimizer, every: int, add, cuda: bool):
        self.every = int(every)
        self._add = add
        self._cuda = cuda
        self._leaves = [(name or type(m).__name__, type(m).__name__, m)
                        for name, m in module.named_modules() if next(m.children(), None) is None]
        self._params = list(named_params)
        self._pidx = {n: i for i, (n, _) in enumerate(self._params)}
        self._forced: set[int] = set()
        self._step: int | None = None
        self._handles: list = []
        self._outs: list = []  # copied outputs awaiting reduction: (order, name, cls, kind, t)
        self._out_elems = 0
        self._reduced: list = []  # (entries [(order, name, cls, stat names)], stats [G, k])
        self._measured: set = set()  # modules measured in the open step (first forward only)
        self._grad_part: Any = None
        self._w0: Any = None
        self._ratio: Any = None
        self._triggered: list[tuple[str, float]] = []
        self._layouts: dict = {}  # the rows of a sampled step's shape, built once
        self._idx: dict = {}
        self._qcache: dict = {}
        self._ndims: Any = None
        self._ema: Any = None
        self._dev: Any = None
        self._floor = 1e-30  # the last finite floor (TRIGGER_SHARE x the total norm)
        self._lo: Any = None  # the band as bounds on the floored norms (lists, and numpy)
        self._hi: Any = None
        self._lo_np: Any = None
        self._hi_np: Any = None
        self._seen = 0
        self._last_norms: Any = None
        # What the Recorder's lean optimizer pre-hook reads to check a step's norms against
        # the band inline (see Recorder._pre_optimizer_step): True once the band is past
        # its dense start and small enough for the plain loop; the step's observation then
        # needs no call here unless it is a band update (every ``update_every``-th) or a
        # norm left the band.
        self._quick = False
        self.update_every = TRIGGER_UPDATE_EVERY
        self.share = TRIGGER_SHARE
        # The update ratio is timed at the end of a step open on the full path whose
        # optimizer stepped (Recorder._end_step_full calls after_update() before end()):
        # no optimizer post-hook at all, neither its own (one more call per step) nor one
        # registered per sampled step (it would mutate the optimizer's hooks while a
        # framework's post-hook ends the step).
        self._timed = optimizer is not None

    # -------------------------------------------------------------- the Recorder's calls
    def sampled(self, step: int) -> bool:
        return step % self.every == 0 or step in self._forced

    def begin(self, step: int) -> None:
        """Start a step: attach the forward hooks when it is sampled."""
        if not (step % self.every == 0 or step in self._forced):
            return
        self._forced.discard(step)
        self._open(step)
        for i, (name, cls, m) in enumerate(self._leaves):
            self._handles.append(m.register_forward_hook(self._output_hook(i, name, cls, m)))

    def grads_ready(self, step: int) -> None:
        """Gradients are final (optimizer pre-step, ``record_grads`` or end of step): take
        their quantiles and the weights before the update."""
        if self._step != step or self._grad_part is not None:
            return
        import torch

        rows: list = []
        samples: list = []
        cache = self._idx
        for name, p in self._params:
            samples.append(p)
            rows.append((name, "w_"))
            if p.grad is not None:
                samples.append(p.grad)
                rows.append((name, "g_"))
        parts: list = []
        if samples:
            stacked = _spaced_all(samples, cache)
            if stacked.device.type == "cpu":
                # numpy's sort of 100 x 1,024 floats takes ~0.2 ms where torch's CPU sort
                # takes ~4 ms (one thread); on a GPU torch's sort is the fast one.
                import numpy as np

                srt = np.sort(stacked.numpy(), axis=1)
                parts.append(torch.from_numpy(srt[:, self._q_positions()].reshape(-1)))
            else:
                srt = stacked.sort(dim=1).values
                parts.append(srt.index_select(1, self._q(srt.device)).reshape(-1))
        if self._params:
            nd = self._ndims
            if nd is None or nd.device != self._params[0][1].device:
                nd = self._ndims = torch.tensor([float(p.dim()) for _, p in self._params],
                                                device=self._params[0][1].device)
            parts.append(nd)
        self._grad_part = (tuple(rows), parts)
        if self._timed:
            self._w0 = [p.detach().clone() for _, p in self._params]

    def observe_norms(self, step: int, values) -> bool:
        """The grad-norm trigger, fed the Recorder's per-layer norms of a logged step (a
        list, or on CUDA a pending copy read once it has landed). Returns True when the
        norms of this very step (a list) left their band: the Recorder then asks for
        :meth:`sample_now` while the weights are still those of the step's forward.

        Cost: the band is kept as bounds on the floored norm itself (``exp(ema -+ band)``),
        so the per-step check is one comparison per layer, in plain Python for up to
        :data:`TRIGGER_PY_LAYERS` layers (~2.5 us for 50; numpy's array conversion alone
        costs ~1.5 us) and vectorised beyond; the band itself (logs, the moving averages)
        is updated on each of the first :data:`TRIGGER_DENSE` observations, then every
        :data:`TRIGGER_UPDATE_EVERY`-th one and on every step that left it."""
        now = True
        if isinstance(values, PendingTensor):
            prev, self._last_norms = self._last_norms, values
            if prev is None or not prev.event.query():
                return False
            values, now = prev.host.numpy(), False
        self._seen += 1
        seen = self._seen
        # A layer holding a negligible share of the total norm moves in the noise: its norm
        # is measured against a floor of TRIGGER_SHARE x the total (the last value).
        floor = TRIGGER_SHARE * abs(float(values[-1])) + 1e-30
        if floor == math.inf or floor != floor:  # a non-finite total: name the layers that
            floor = self._floor                  # are, not every layer against a NaN floor
        else:
            self._floor = floor
        out = None
        lo, hi = self._lo, self._hi
        if lo is not None and seen > TRIGGER_WARMUP and len(values) == len(lo) + 1:
            if len(lo) <= TRIGGER_PY_LAYERS and type(values) is list:
                for a, b, c in zip(values, lo, hi):  # norms are >= 0 (or NaN)
                    if not b <= a + floor <= c:  # NaN fails too
                        out = self._outside(values, floor)
                        break
            else:
                import numpy as np

                if self._lo_np is None:  # the band was last updated in plain Python
                    self._lo_np, self._hi_np = np.array(lo), np.array(hi)
                x = np.asarray(values, dtype=np.float64)[:-1] + floor
                if not (np.greater_equal(x, self._lo_np).all() and np.less_equal(x, self._hi_np).all()):
                    out = self._outside(values, floor)
        fired = False
        if out is not None:
            fired = now
            self._forced.add(step + 1)
            self._triggered = out
            if not all(map(math.isfinite, values)):
                return fired  # keep the band as it was before the blow-up
        if out is not None or seen <= TRIGGER_DENSE or seen % TRIGGER_UPDATE_EVERY == 0:
            self._update_band(values, floor)
        return fired

    def _outside(self, values, floor) -> list[tuple[str, float]]:
        """``(layer, norm)`` of the layers whose floored norm left its band."""
        return [(self._params[i][0], abs(float(a)) + floor)
                for i, (a, b, c) in enumerate(zip(values, self._lo, self._hi))
                if not b <= abs(float(a)) + floor <= c and i < len(self._params)]

    def _update_band(self, values, floor) -> None:
        """One step of the band: an exponential moving average of the floored norms' log,
        +- max(log 4, 4 x their moving absolute deviation), kept as bounds on the norms.

        In plain Python for a list of up to :data:`TRIGGER_PY_LAYERS` layers (the same
        operations in the same order as numpy's below): called right after backward, a
        dozen numpy calls run cache-cold there, ~160 us in place for 50 layers where they
        take ~10 us warm; the loop stays ~3x cheaper in place."""
        if type(values) is list and len(values) <= TRIGGER_PY_LAYERS + 1:
            self._update_band_py(values, floor)
            return
        import numpy as np

        if type(self._ema) is list:
            self._ema, self._dev = np.array(self._ema), np.array(self._dev)

        x = np.abs(np.asarray(values[:-1], dtype=np.float64))
        x += floor
        np.log(x, out=x)
        if self._ema is None or self._ema.shape != x.shape:
            self._ema, self._dev = x.copy(), np.zeros_like(x)
            band = np.full_like(x, TRIGGER_FLOOR)
        else:
            d = x - self._ema
            ad = np.abs(d)
            d *= TRIGGER_ALPHA
            self._ema += d
            ad -= self._dev
            ad *= TRIGGER_ALPHA
            self._dev += ad
            band = np.maximum(self._dev * TRIGGER_DEVS, TRIGGER_FLOOR)
        with np.errstate(over="ignore", under="ignore"):
            self._lo_np = np.exp(self._ema - band)
            self._hi_np = np.exp(self._ema + band)
        self._lo, self._hi = self._lo_np.tolist(), self._hi_np.tolist()
        self._quick = self._seen >= TRIGGER_DENSE and len(self._lo) <= TRIGGER_PY_LAYERS

    def _update_band_py(self, values, floor) -> None:
        log, exp, inf = math.log, math.exp, math.inf
        ema, dev = self._ema, self._dev
        n = len(values) - 1
        if ema is None or len(ema) != n:
            ema, dev = [log(abs(v) + floor) for v in values[:-1]], [0.0] * n
            lo = [exp(e - TRIGGER_FLOOR) for e in ema]
            hi = [_exp_or_inf(e + TRIGGER_FLOOR) for e in ema]
        else:
            if type(ema) is not list:
                ema, dev = ema.tolist(), dev.tolist()
            alpha = TRIGGER_ALPHA
            e2: list = []
            d2: list = []
            lo = []
            hi = []
            for v, e, dv in zip(values, ema, dev):  # one loop: numpy's steps, in its order
                d = log(abs(v) + floor) - e
                e += d * alpha
                dv += (abs(d) - dv) * alpha
                e2.append(e)
                d2.append(dv)
                b = dv * TRIGGER_DEVS
                if b < TRIGGER_FLOOR:  # np.maximum (NaN stays NaN)
                    b = TRIGGER_FLOOR
                lo.append(exp(e - b))  # underflows to 0.0
                try:
                    hi.append(exp(e + b))
                except OverflowError:  # numpy's inf
                    hi.append(inf)
            ema, dev = e2, d2
        self._ema, self._dev = ema, dev
        self._lo, self._hi = lo, hi
        self._lo_np = self._hi_np = None
        self._quick = self._seen >= TRIGGER_DENSE

    def sample_now(self, step: int, forward) -> None:
        """Sample ``step`` after its forward has run (the trigger fired on its norms, or it
        failed): run the forward again with the hooks (``forward()``, see
        :func:`forward_again`), then take the gradients' quantiles. Nothing happens when
        the step is already sampled or another one is open."""
        if self._step is not None:
            if self._step == step and not self._measured and forward is not None:
                self._forward_with_hooks(forward)
            return
        self._open(step)
        if forward is not None:
            self._forward_with_hooks(forward)
        self.grads_ready(step)

    def on_failure(self, step: int, forward=None) -> None:
        """A failure capture at ``step``: record its weights and gradients now, its module
        outputs too when ``forward`` can run its forward again (the hooks of an unsampled
        step were not there when it ran), and sample the next step."""
        self._forced.add(step + 1)
        if self._step is not None and self._step != step:
            return  # another sampled step is open: the forced next sample must do
        opened = self._step is None
        if opened:
            self._open(step)
        try:
            if forward is not None and not self._measured:
                self._forward_with_hooks(forward)
            self.grads_ready(step)
            self._w0 = None if opened else self._w0
            if opened:
                self.end(step)
        except Exception:  # statistics never mask the failure being captured
            self._step, self._grad_part = None, None

    def end(self, step: int) -> None:
        """End a step: drop the hooks and hand the sampled step's rows to the writer."""
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._step != step:
            return
        self._step = None
        try:
            self._reduce_outputs()
        except Exception:  # statistics never break the step
            self._outs, self._reduced = [], []
        import torch

        parts: list = []
        out_key = []
        for entries, stats in self._reduced:
            out_key.append(tuple((o, n, c, names) for o, n, c, names in entries))
            parts.append(stats)
        n_out = sum(len(k) for k in out_key)
        prow: tuple = ()
        if self._grad_part is not None:
            prow, ppart = self._grad_part
            parts.extend(ppart)
        ratio = self._ratio is not None
        if ratio:
            parts.append(self._ratio)
        trig = tuple(name for name, _ in self._triggered)
        if trig:
            parts.append(torch.tensor([norm for _, norm in self._triggered],
                                      dtype=torch.float32,
                                      device=parts[0].device if parts else "cpu"))
        self._reduced, self._grad_part, self._w0, self._ratio = [], None, None, None
        self._triggered = []
        if not parts:
            return
        key = (tuple(out_key), prow, ratio, trig)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = self._layout(out_key, n_out, prow, ratio, trig)
        vec = torch.cat([p.reshape(-1).to(torch.float64) for p in parts])
        if vec.device.type == "cuda":
            host = torch.empty(vec.shape, dtype=torch.float64, pin_memory=True)
            host.copy_(vec, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            self._add("layers", ColumnRows(step, layout, PendingTensor(host, ev)))
        else:
            self._add("layers", ColumnRows(step, layout, vec.numpy()))

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    # ------------------------------------------------------------------ internals
    def _open(self, step: int) -> None:
        self._step = step
        self._outs, self._out_elems, self._reduced = [], 0, []
        self._measured = set()
        self._grad_part, self._w0, self._ratio = None, None, None

    def _forward_with_hooks(self, forward) -> None:
        handles = [m.register_forward_hook(self._output_hook(i, name, cls, m))
                   for i, (name, cls, m) in enumerate(self._leaves)]
        try:
            forward()
        except Exception:  # statistics never break the step (the outputs are then missing)
            pass
        finally:
            for h in handles:
                h.remove()

    def _layout(self, out_key, n_out: int, prow, ratio: bool, trig) -> RowLayout:
        """The constant columns (order, module, module_type, stat) of a sampled step."""
        order: list = []
        module: list = []
        mtype: list = []
        stat: list = []
        for group in out_key:
            for o, n, c, names in group:
                k = len(names)
                order += [o] * k
                module += [n] * k
                mtype += [c] * k
                stat += names
        pidx = self._pidx
        for name, prefix in prow:
            order += [n_out + pidx.get(name, 0)] * len(Q_NAMES)
            module += [name] * len(Q_NAMES)
            mtype += ["param"] * len(Q_NAMES)
            stat += [prefix + q for q in Q_NAMES]
        if prow:
            order += [n_out + i for i in range(len(self._params))]
            module += [n for n, _ in self._params]
            mtype += ["param"] * len(self._params)
            stat += ["ndim"] * len(self._params)
        if ratio:
            order += [n_out + i for i in range(len(self._params))]
            module += [n for n, _ in self._params]
            mtype += ["param"] * len(self._params)
            stat += ["update_ratio"] * len(self._params)
        for name in trig:
            order.append(n_out + pidx.get(name, 0))
            module.append(name)
            mtype.append("param")
            stat.append("trigger_grad_norm")
        return RowLayout((order, module, mtype, stat))

    def _q(self, device):
        """Positions of :data:`QUANTILES` in a sorted sample (nearest rank), on ``device``."""
        import torch

        cache = self._qcache
        if device not in cache:
            cache[device] = torch.tensor(self._q_positions(), dtype=torch.long, device=device)
        return cache[device]

    @staticmethod
    def _q_positions() -> list[int]:
        return [round(q * (QUANTILE_SAMPLE - 1)) for q in QUANTILES]

    def _output_hook(self, order: int, name: str, cls: str, module):
        kind = (_bounds(module, cls), cls in RELU_FAMILY)

        def hook(mod, args, output):
            try:
                self._stash(order, name, cls, output, kind)
            except Exception:  # statistics never break the step
                pass

        return hook

    def _stash(self, order, name, cls, y, kind):
        """Keep a float32 copy of the module's output (at most :data:`OUTPUT_ROWS` rows of
        the batch) for the grouped reduction. A copy, since a later in-place op (an
        ``inplace=True`` ReLU after a Linear) would change the output under a reference."""
        import torch

        if order in self._measured:  # a later forward of the step (accumulation, eval, reuse)
            return
        if isinstance(y, (tuple, list)) and y:
            y = y[0]
        if not isinstance(y, torch.Tensor) or not y.is_floating_point() or y.numel() == 0:
            return
        y = y.detach()
        if y.dim() >= 2 and y.shape[0] > OUTPUT_ROWS:  # a bounded cost for large batches
            y = y[:: -(-y.shape[0] // OUTPUT_ROWS)]
        t = y.to(torch.float32, copy=True)
        self._measured.add(order)
        self._outs.append((order, name, cls, kind, t))
        self._out_elems += t.numel()
        if self._out_elems > OUTPUT_BUDGET:
            self._reduce_outputs()

    def _reduce_outputs(self) -> None:
        """Reduce the copied outputs, stacked by (shape, device, kind): one set of tensor
        operations per group instead of one per module."""
        import torch

        groups: dict = {}
        for order, name, cls, kind, t in self._outs:
            groups.setdefault((tuple(t.shape), t.device, kind), []).append((order, name, cls, t))
        self._outs, self._out_elems = [], 0
        for (shape, _, (bounds, relu)), members in groups.items():
            x = members[0][3].unsqueeze(0) if len(members) == 1 else \
                torch.stack([m[3] for m in members])
            stats = _group_stats(x.reshape(len(members), *(shape or (1,))), bounds, relu)
            names = OUTPUT_STATS + (("frac_saturated",) if bounds is not None else ()) \
                + (("frac_dead_units",) if relu else ())
            self._reduced.append(([(o, n, c, names) for o, n, c, _ in members], stats))

    def after_update(self) -> None:
        """The optimizer stepped (the Recorder calls it as the step ends): the update ratio
        of an open sampled step whose weights were taken before it."""
        if self._w0 is None or self._step is None:
            return
        import torch

        ps = [p.detach() for _, p in self._params]
        diff = torch._foreach_sub(ps, self._w0)
        num = torch.stack(torch._foreach_norm(diff))
        den = torch.stack(torch._foreach_norm(self._w0))
        self._ratio = (num / den.clamp_min(1e-30)).float()
        self._w0 = None


def forward_again(module, batch, rng_state: dict) -> None:
    """Run ``module``'s forward on a step's ``batch`` again, as the step ran it: without
    autograd, from the step's starting RNG state (the same dropout masks, unless the
    training code drew numbers before its forward), leaving the RNG and the module's
    buffers (BatchNorm's running statistics) as they were. The inputs are ``batch[0]`` of
    an ``(inputs, target)`` pair, the keyword arguments of a dict batch, or the batch.
    Only valid before the optimizer step changed the weights.
    """
    import torch

    saved = [(b, b.detach().clone()) for b in module.buffers()]
    cuda = rng_state.get("torch_cuda")
    devices = list(range(len(cuda))) if cuda else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.set_rng_state(rng_state["torch_cpu"])
            if cuda:
                torch.cuda.set_rng_state_all(cuda)
            if isinstance(batch, dict):
                module(**batch)
            elif isinstance(batch, (tuple, list)) and len(batch) == 2:
                module(batch[0])
            else:
                module(batch)
    finally:
        with torch.no_grad():
            for b, v in saved:
                b.copy_(v)


def _group_stats(x, bounds, relu):
    """``[G, k]`` statistics of ``G`` stacked outputs ``x`` (``[G, *shape]``, float32):
    the columns of :data:`OUTPUT_STATS`, then ``frac_saturated`` when ``bounds`` is given,
    then ``frac_dead_units`` when ``relu``.

    Written with element-wise operations and plain sums, which cost a few ns an element
    on a CPU, where ``var_mean``, ``aminmax``, ``isfinite`` and comparisons producing
    bools cost 5-30 (measured on the bench's 24 x 4,096 stacks). Non-finite elements count
    in ``frac_nonfinite``, as zeros in ``mean``, ``std`` and ``max_abs`` (so one NaN does
    not hide the rest), and as non-zero (alive) in ``frac_zero`` and ``frac_dead_units``.
    """
    import torch

    g = x.shape[0]
    flat = x.reshape(g, -1)
    n = flat.shape[1]
    frac_nf = flat.mul(0).nan_to_num_(1.0, 1.0, 1.0).mean(1)  # x*0: 0, or NaN if not finite
    z = flat.nan_to_num(0.0, 0.0, 0.0)
    # mean and std of z / max|z|, scaled back: squares of outputs near 1e20 and beyond
    # would overflow float32
    max_abs = z.abs().amax(1)
    scale = max_abs.clamp_min(1e-30).unsqueeze(1)
    zs = z / scale
    mean_s = zs.mean(1)
    d = zs.sub_(mean_s.unsqueeze(1))
    std = (torch.linalg.vecdot(d, d) / n).sqrt_() * scale.squeeze(1)
    nz = flat.nan_to_num(1.0, 1.0, 1.0).abs_().sign_()  # 0 exactly where the output is 0
    cols = [mean_s * scale.squeeze(1), std, max_abs, 1.0 - nz.mean(1), frac_nf]
    if bounds is not None:
        b0, b1 = bounds
        c, h = 0.5 * (b0 + b1), 0.5 * (b1 - b0) - SATURATION_MARGIN * (b1 - b0)
        # within the margin of a bound <=> |y - centre| > half-range - margin (NaN counts as
        # the centre, an infinity as its bound)
        y = flat.nan_to_num(c, b1, b0)
        cols.append(y.sub_(c).abs_().sub_(h).clamp_min_(0.0).sign_().mean(1))
    if relu:
        shape = x.shape[1:]
        unit = 1 if len(shape) >= 4 else len(shape) - 1  # channels, or the last axis
        alive = nz.reshape(x.shape).movedim(unit + 1, -1).reshape(g, -1, shape[unit]).amax(1)
        cols.append(1.0 - alive.mean(1))
    return torch.stack(cols, dim=1)
