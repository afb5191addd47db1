"""Per-parameter gradient L2 norms with fused kernels, no per-parameter ``.item()``."""

from __future__ import annotations

from .writer import PendingTensor


class GradNormComputer:
    """Computes ``[norm(p.grad) for p in params] + [total]`` in one pass per device/dtype.

    Parameters whose ``.grad`` is None (unused in this step's graph) count as 0.0.
    On CPU the result is a list of floats; on CUDA a :class:`PendingTensor` whose
    device->host copy runs asynchronously (no blocking sync on the training thread).
    """

    def __init__(self, params):
        import torch

        self.params = list(params)
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

    def compute(self):
        """Return the norms of the current gradients (see class docstring)."""
        import torch

        parts = []
        for (device, dtype), idx in self.groups:
            grads = [self.params[i].grad for i in idx]
            low = dtype in (torch.float16, torch.bfloat16)
            if any(g is None for g in grads):
                present = [g for g in grads if g is not None]
                vals = torch.zeros(len(grads), dtype=torch.float32, device=device)
                if present:
                    norms = torch._foreach_norm(present, 2, dtype=torch.float32) if low else torch._foreach_norm(present)
                    where = torch.tensor([k for k, g in enumerate(grads) if g is not None], device=device)
                    vals[where] = torch.stack(norms).float()
                parts.append(vals)
            else:
                norms = torch._foreach_norm(grads, 2, dtype=torch.float32) if low else torch._foreach_norm(grads)
                parts.append(torch.stack(norms).float())
        if self.single:
            stack = parts[0] if parts else torch.zeros(0)
        else:
            target = parts[0].device
            stack = torch.cat([p.to(target) for p in parts])[self.order.to(target)]
        total = torch.linalg.vector_norm(stack).reshape(1) if len(stack) else torch.zeros(1)
        full = torch.cat([stack, total])
        if full.device.type == "cpu":
            return full.tolist()
        host = torch.empty(full.shape, dtype=full.dtype, pin_memory=True)
        host.copy_(full, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        return PendingTensor(host, ev)
