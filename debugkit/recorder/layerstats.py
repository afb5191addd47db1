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

All reductions stay on the device and are concatenated into one vector per sampled step;
on CUDA that vector is copied into pinned memory without a blocking sync and read back
at the next sampled step (or at close), when the copy has long landed. Rows go to the
run's ``layers`` table (see docs/run-format.md).

Between sampled steps the per-layer gradient norms the Recorder takes anyway feed a
trigger: when a layer's norm leaves its recent band (an exponential moving average of
its log, ± max(log 4, 4 x the moving absolute deviation); norms below 1 % of the total
count as that 1 %), the next step is sampled and
its rows name the layers that moved (stat ``trigger_grad_norm``). A failure capture
records the weight and gradient quantiles of its step on the spot and samples the next
step. Memory per sampled step is bounded by one copy of the trained parameters (for the
update ratio) plus a few scalars per module and parameter.
"""

from __future__ import annotations

import math
from typing import Any

from .writer import PendingTensor

#: Quantile levels of weights and gradients; stat names ``w_q01`` ... ``g_q99``.
QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
Q_NAMES = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
#: The quantiles of a tensor are read from this many of its elements, evenly spaced (one
#: batched sort of every parameter's sample per sampled step).
QUANTILE_SAMPLE = 1024
#: Output statistics read at most this many samples (evenly strided along the batch axis).
OUTPUT_ROWS = 256
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


def _bounds(module, cls: str):
    b = BOUNDED.get(cls, False)
    if b is False:
        return None
    if b is None:
        if cls == "Hardtanh":
            return float(module.min_val), float(module.max_val)
        return None
    return b


def _spaced(t, idx_cache):
    """``QUANTILE_SAMPLE`` evenly spaced elements of ``t`` (elements repeat when it is
    smaller), so every tensor's sample has one length and all sort together."""
    import torch

    flat = t.detach().reshape(-1)
    key = (flat.numel(), flat.device)
    idx = idx_cache.get(key)
    if idx is None:
        idx = idx_cache[key] = torch.linspace(0, flat.numel() - 1, QUANTILE_SAMPLE,
                                              device=flat.device).round().long()
    return flat.index_select(0, idx).to(torch.float32)


class LayerStats:
    """The layer statistics of one Recorder (see the module docstring).

    Parameters
    ----------
    module : torch.nn.Module
        The unwrapped model.
    named_params : list of (str, Parameter)
        The trained parameters, in the Recorder's layer order.
    optimizer : torch.optim.Optimizer or None
        The inner optimizer (its step hooks time the update ratio).
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
        self._forced: set[int] = set()
        self._step: int | None = None
        self._handles: list = []
        self._outs: list = []  # (order, module, cls, stat names, stats tensor)
        self._measured: set = set()  # modules measured in the open step (first forward only)
        self._grad_part: Any = None
        self._w0: Any = None
        self._ratio = None
        self._triggered: list[tuple[str, float]] = []
        self._pending: list = []  # (step, meta rows, values: PendingTensor or list)
        self._ema = None
        self._dev = None
        self._seen = 0
        self._last_norms: Any = None
        self._hooks = []
        if optimizer is not None:
            self._hooks.append(optimizer.register_step_post_hook(self._after_update))

    # -------------------------------------------------------------- the Recorder's calls
    def sampled(self, step: int) -> bool:
        return step % self.every == 0 or step in self._forced

    def begin(self, step: int) -> None:
        """Start a step: attach the forward hooks when it is sampled."""
        if not (step % self.every == 0 or step in self._forced):
            return
        self._forced.discard(step)
        self._step = step
        self._outs = []
        self._measured = set()
        self._grad_part = None
        self._w0 = None
        self._ratio = None
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
        cache = self.__dict__.setdefault("_idx", {})
        for name, p in self._params:
            samples.append(_spaced(p, cache))
            rows.extend((name, "param", "w_" + q) for q in Q_NAMES)
            if p.grad is not None:
                samples.append(_spaced(p.grad, cache))
                rows.extend((name, "param", "g_" + q) for q in Q_NAMES)
        parts: list = []
        if samples:
            srt = torch.stack(samples).sort(dim=1).values
            parts.append(srt.index_select(1, self._q(srt.device)).reshape(-1))
        if self._params:
            nd = self.__dict__.get("_ndims")
            if nd is None or nd.device != self._params[0][1].device:
                nd = self._ndims = torch.tensor([float(p.dim()) for _, p in self._params],
                                                device=self._params[0][1].device)
            rows.extend((name, "param", "ndim") for name, _ in self._params)
            parts.append(nd)
        self._grad_part = (rows, parts)
        if self._hooks:
            self._w0 = [p.detach().clone() for _, p in self._params]

    def observe_norms(self, step: int, values) -> None:
        """The grad-norm trigger, fed the Recorder's per-layer norms of a logged step (a
        list, or on CUDA a pending copy read once it has landed)."""
        if isinstance(values, PendingTensor):
            prev, self._last_norms = self._last_norms, values
            if prev is None or not prev.event.query():
                return
            values = prev.host.numpy()
        import numpy as np

        v = np.abs(np.asarray(values, dtype=np.float64))
        # A layer holding a negligible share of the total norm moves in the noise: its norm
        # is measured against a floor of TRIGGER_SHARE x the total (the last value).
        x = np.log(v[:-1] + TRIGGER_SHARE * v[-1] + 1e-30)
        if self._ema is None or self._ema.shape != x.shape:
            self._ema, self._dev, self._seen = x.copy(), np.zeros_like(x), 1
            return
        d = x - self._ema
        self._seen += 1
        if self._seen > TRIGGER_WARMUP:
            out = ~(np.abs(d) <= np.maximum(TRIGGER_FLOOR, TRIGGER_DEVS * self._dev))
            if out.any():
                self._forced.add(step + 1)
                idx = np.flatnonzero(out)
                self._triggered = [(self._params[i][0], float(np.exp(x[i]))) for i in idx
                                   if i < len(self._params)]
                if not np.isfinite(x).all():
                    return  # keep the band as it was before the blow-up
        self._ema += TRIGGER_ALPHA * d
        self._dev += TRIGGER_ALPHA * (np.abs(d) - self._dev)

    def on_failure(self, step: int) -> None:
        """A failure capture at ``step``: record its weights and gradients now (the forward
        hooks of an unsampled step are not there) and sample the next step."""
        self._forced.add(step + 1)
        if self._step is not None and self._step != step:
            return  # another sampled step is open: the forced next sample must do
        opened = self._step is None
        if opened:
            self._step = step
            self._outs, self._grad_part, self._w0, self._ratio = [], None, None, None
        try:
            self.grads_ready(step)
            self._w0 = None if opened else self._w0
            if opened:
                self.end(step)
        except Exception:  # statistics never mask the failure being captured
            self._step, self._grad_part = None, None

    def end(self, step: int) -> None:
        """End a step: drop the hooks and queue the sampled step's rows."""
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._step != step:
            return
        self._step = None
        import torch

        rows: list = []
        parts: list = []
        for order, name, cls, names, t in self._outs:
            rows.extend((order, name, cls, s) for s in names)
            parts.append(t)
        n_out = len(self._outs)
        if self._grad_part is not None:
            prow, ppart = self._grad_part
            rows.extend((n_out + self._param_index(r[0]), *r) for r in prow)
            parts.extend(ppart)
        if self._ratio is not None:
            rows.extend((n_out + i, name, "param", "update_ratio")
                        for i, (name, _) in enumerate(self._params))
            parts.append(self._ratio)
        self._outs, self._grad_part, self._w0, self._ratio = [], None, None, None
        for name, norm in self._triggered:
            rows.append((n_out + self._param_index(name), name, "param", "trigger_grad_norm"))
            parts.append(torch.tensor([norm], dtype=torch.float32, device=parts[0].device
                                      if parts else "cpu"))
        self._triggered = []
        self._flush_pending(block=False)
        if not parts:
            return
        vec = torch.cat([p.reshape(-1).to(torch.float64) for p in parts])
        if vec.device.type == "cuda":
            host = torch.empty(vec.shape, dtype=torch.float64, pin_memory=True)
            host.copy_(vec, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record()
            self._pending.append((step, rows, PendingTensor(host, ev)))
        else:
            self._emit(step, rows, vec.tolist())

    def close(self) -> None:
        for h in self._handles + self._hooks:
            h.remove()
        self._handles, self._hooks = [], []
        self._flush_pending(block=True)

    # ------------------------------------------------------------------ internals
    def _q(self, device):
        """Positions of :data:`QUANTILES` in a sorted sample (nearest rank)."""
        import torch

        cache = self.__dict__.setdefault("_qcache", {})
        if device not in cache:
            cache[device] = torch.tensor([round(q * (QUANTILE_SAMPLE - 1)) for q in QUANTILES],
                                         dtype=torch.long, device=device)
        return cache[device]

    def _param_index(self, name: str) -> int:
        idx = self.__dict__.get("_pidx")
        if idx is None:
            idx = self._pidx = {n: i for i, (n, _) in enumerate(self._params)}
        return idx.get(name, 0)

    def _output_hook(self, order: int, name: str, cls: str, module):
        bounds = _bounds(module, cls)
        relu = cls in RELU_FAMILY

        def hook(mod, args, output):
            try:
                self._measure(order, name, cls, output, bounds, relu)
            except Exception:  # statistics never break the step
                pass

        return hook

    def _measure(self, order, name, cls, y, bounds, relu):
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
        yf = y.float()
        finite = torch.isfinite(yf)
        z = torch.where(finite, yf, torch.zeros((), dtype=yf.dtype, device=yf.device))
        var, mean = torch.var_mean(z, correction=0)
        lo, hi = torch.aminmax(z)
        zero = yf == 0
        vals = [mean, var.sqrt(), torch.maximum(hi, -lo), zero.float().mean(),
                1.0 - finite.float().mean()]
        names = OUTPUT_STATS
        if bounds is not None:
            b0, b1 = bounds
            m = SATURATION_MARGIN * (b1 - b0)
            vals.append(((yf <= b0 + m) | (yf >= b1 - m)).float().mean())
            names = names + ("frac_saturated",)
        if relu:
            if yf.dim() >= 2:
                unit = 1 if yf.dim() >= 4 else yf.dim() - 1
                dead = zero.movedim(unit, -1).reshape(-1, zero.shape[unit]).all(0)
            else:
                dead = zero
            vals.append(dead.float().mean())
            names = names + ("frac_dead_units",)
        self._measured.add(order)
        self._outs.append((order, name, cls, names, torch.stack(vals)))

    def _after_update(self, optimizer, args, kwargs):
        if self._w0 is None or self._step is None:
            return
        import torch

        ps = [p.detach() for _, p in self._params]
        diff = torch._foreach_sub(ps, self._w0)
        num = torch.stack(torch._foreach_norm(diff))
        den = torch.stack(torch._foreach_norm(self._w0))
        self._ratio = (num / den.clamp_min(1e-30)).float()
        self._w0 = None

    def _flush_pending(self, *, block: bool) -> None:
        keep = []
        for step, rows, pend in self._pending:
            if block or pend.event.query():
                self._emit(step, rows, pend.resolve().tolist())
            else:
                keep.append((step, rows, pend))
        self._pending = keep

    def _emit(self, step: int, rows: list, values: list) -> None:
        for (order, name, cls, stat), v in zip(rows, values):
            self._add("layers", (step, order, name, cls, stat, v))
