"""Per-parameter gradient L2 norms with fused kernels, no per-parameter ``.item()``.

The norms never overflow where the true value is finite. ``torch._foreach_norm`` sums
the squares in the gradient's own dtype, so a float32 (or bfloat16) gradient whose
elements pass ~1.8e19 gives ``inf`` although its norm fits in float32 easily
(``_foreach_norm([torch.full((10,), 1e20)])`` is ``inf``; the norm is 3.2e20). Two ways
around it, chosen per device by what costs nothing there (``bench/grad_norms.py``
measures both):

- CUDA: ``_foreach_norm(grads, 2, dtype=torch.float64)``. Its fused kernel converts each
  element to float64 as it loads it and accumulates in float64 (no copy of the
  gradients); the squares of float32/bfloat16/float16 values cannot overflow float64.
- CPU: ``_foreach_norm`` there is a loop of ``linalg.vector_norm`` calls, and asking
  one for float64 copies the gradient first. So the norms are taken as before, and only
  those that come out non-finite are taken again (:func:`safe_norm`): inf for an
  element that is NaN/Inf (NaN if one is NaN), else the max-abs-scaled float64 norm.

Either way a norm is NaN/Inf only when an element of that gradient is (or, for float64
gradients, when the norm itself exceeds float64's range, ~1.8e308).
"""

from __future__ import annotations

import math
from operator import attrgetter

from .writer import PendingTensor

_grad = attrgetter("grad")  # map(_grad, params): the gradients without a Python frame


def is_sharded(t) -> bool:
    """Whether ``t`` is a ``DTensor`` (FSDP2's ``fully_shard``, tensor parallelism): its
    ``grad`` is a DTensor too, whose local shard is what this rank holds."""
    import sys

    mod = sys.modules.get("torch.distributed.tensor")  # imported by whoever made a DTensor
    cls = getattr(mod, "DTensor", None) if mod is not None else None
    return cls is not None and isinstance(t, cls)


class _LocalGrad:
    """A DTensor parameter seen through its local shard: ``.grad`` is the local shard of
    its gradient (no collective: each rank takes the norms of what it holds, and the
    reader adds the ranks' squares up, :meth:`debugkit.io.run.Run.grad_norms`)."""

    __slots__ = ("p",)

    def __init__(self, p):
        self.p = p

    @property
    def grad(self):
        g = self.p.grad
        return None if g is None else g.to_local()

    @property
    def device(self):
        return self.p.device

    @property
    def dtype(self):
        return self.p.dtype


def safe_norm(g) -> float:
    """The L2 norm of one tensor as a Python float, without intermediate overflow.

    NaN when an element is NaN, inf when an element is +-inf (and none is NaN), else
    ``m * ||g / m||`` in float64 with ``m = max|g|``, which is inf only when the norm
    itself does not fit in float64.
    """
    import torch

    if g.numel() == 0:
        return 0.0
    m = torch.linalg.vector_norm(g.detach(), float("inf")).double()  # max |g|, NaN-propagating
    mv = float(m)
    if mv != mv or mv == float("inf"):
        return mv
    if mv == 0.0:
        return 0.0
    return float(mv * torch.linalg.vector_norm(g.detach().double() / m))


def _scaled_total(stack):
    """L2 norm of a float64 vector of norms, divided by its largest first (on the device).

    Only needed for float64 gradients on CUDA: the squares of float64 norms overflow
    past ~1e154, which the norms of float32/bfloat16/float16 gradients never reach.
    """
    import torch

    m = torch.linalg.vector_norm(stack, float("inf"))
    scale = torch.where(torch.isfinite(m) & (m > 0), m, torch.ones_like(m))
    return (torch.linalg.vector_norm(stack / scale) * scale).reshape(1)


def _python_total(vals: list) -> float:
    """L2 norm of a list of finite-or-not floats, scaled so large finite ones do not overflow."""
    m = max((abs(v) for v in vals), default=0.0)
    if m != m or m in (0.0, float("inf")) or any(v != v for v in vals):
        return math.nan if any(v != v for v in vals) else m
    return m * math.sqrt(math.fsum((v / m) ** 2 for v in vals))


class GradNormComputer:
    """Computes ``[norm(p.grad) for p in params] + [total]`` in one pass per device/dtype.

    Parameters whose ``.grad`` is None (unused in this step's graph) count as 0.0.
    On CPU the result is a list of floats; on CUDA a :class:`PendingTensor` whose
    device->host copy runs asynchronously (no blocking sync on the training thread).
    Values are float64 and overflow-free (module docstring).
    """

    def __init__(self, params):
        import torch

        self.params = list(params)
        #: some parameters are DTensors (FSDP2): the norms are of this rank's shards
        self.sharded = any(is_sharded(p) for p in self.params)
        if self.sharded:
            self.params = [_LocalGrad(p) if is_sharded(p) else p for p in self.params]
        groups: dict = {}
        for i, p in enumerate(self.params):
            groups.setdefault((p.device, p.dtype), []).append(i)
        self.groups = list(groups.items())
        self.single = len(self.groups) == 1
        self.order = None
        if not self.single:
            flat = [i for _, idx in self.groups for i in idx]
            self.order = torch.tensor(sorted(range(len(flat)), key=flat.__getitem__))
        self.n = len(self.params) + 1
        self.scaled_total = any(d.type != "cpu" and t == torch.float64 for d, t in groups)
        # One CPU group of float32/float64 gradients (the common CPU case): the fused norm,
        # one stack, one tolist, and the total in Python (math.hypot: float64, no overflow).
        self.cpu_fast = (self.single and bool(self.params) and self.groups[0][0][0].type == "cpu"
                         and self.groups[0][0][1] in (torch.float32, torch.float64))
        self._foreach_norm, self._stack = torch._foreach_norm, torch.stack  # bound once

    @staticmethod
    def _norms(grads, device, dtype):
        """Per-tensor norms of ``grads`` (one device and dtype) as one tensor.

        float64 on CUDA; on CPU float32 (or the gradients' float64) as the fused norm
        gives them, fixed afterwards by :meth:`_fix_overflow`.
        """
        import torch

        if device.type == "cuda":
            return torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float64))
        low = dtype in (torch.float16, torch.bfloat16)
        norms = torch._foreach_norm(grads, 2, dtype=torch.float32) if low else torch._foreach_norm(grads)
        return torch.stack(norms)

    def _fix_overflow(self, vals: list) -> list:
        """Take the non-finite norms of a CPU result again without overflow (module docstring)."""
        out = list(vals)
        for i, v in enumerate(out[:-1]):
            if not math.isfinite(v):
                out[i] = safe_norm(self.params[i].grad)
        out[-1] = _python_total(out[:-1])
        return out

    def compute(self):
        """Return the norms of the current gradients (see class docstring)."""
        if self.cpu_fast:  # the per-step path: no import statement, bound torch functions
            try:
                vals = self._stack(self._foreach_norm(list(map(_grad, self.params)))).tolist()
            except TypeError:  # a parameter without .grad this step: the general path
                pass
            else:
                total = math.hypot(*vals)  # inf/NaN exactly when a norm is (module docstring)
                vals.append(total)
                return vals if math.isfinite(total) else self._fix_overflow(vals)
        import torch

        parts = []
        for (device, dtype), idx in self.groups:
            grads = [self.params[i].grad for i in idx]
            if any(g is None for g in grads):
                present = [g for g in grads if g is not None]
                vals = torch.zeros(len(grads), dtype=torch.float64 if device.type == "cuda" else
                                   (torch.float64 if dtype == torch.float64 else torch.float32), device=device)
                if present:
                    where = torch.tensor([k for k, g in enumerate(grads) if g is not None], device=device)
                    vals[where] = self._norms(present, device, dtype)
                parts.append(vals)
            else:
                parts.append(self._norms(grads, device, dtype))
        if self.single:
            stack = parts[0] if parts else torch.zeros(0)
        else:
            target = parts[0].device
            stack = torch.cat([p.to(target) for p in parts])[self.order.to(target)]
        if not len(stack):
            return [0.0] if stack.device.type == "cpu" else self._pending(torch.zeros(1, dtype=torch.float64))
        if stack.device.type == "cpu":
            full = torch.cat([stack, torch.linalg.vector_norm(stack).reshape(1)]).tolist()
            # One check on the hot path: any non-finite norm makes the total non-finite,
            # and so does a total whose float32 sum of squares overflowed.
            return full if math.isfinite(full[-1]) else self._fix_overflow(full)
        stack = stack.double()
        total = _scaled_total(stack) if self.scaled_total else torch.linalg.vector_norm(stack).reshape(1)
        return self._pending(torch.cat([stack, total]))

    @staticmethod
    def _pending(full):
        import torch

        host = torch.empty(full.shape, dtype=full.dtype, pin_memory=True)
        host.copy_(full, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        return PendingTensor(host, ev)
