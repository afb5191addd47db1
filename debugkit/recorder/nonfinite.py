"""Detect the first non-finite loss or gradient norm of a run.

On a GPU the values are copied to the host without a blocking sync and judged when the
copies have landed (the next step, or close); on the CPU, or with ``halt=True``, they are
judged at once. The first finding is reported once through ``on_found`` (the recorder
writes a failure capture and an event); with ``halt=True`` a :class:`NonFiniteError`
then stops training.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .. import format as fmt
from ..errors import NonFiniteError
from .writer import PendingTensor


def is_loss_key(key: str) -> bool:
    """Whether a logged scalar is a loss (its last ``/`` part names one)."""
    return "loss" in key.rsplit("/", 1)[-1].lower()


def _host(loss):
    return [(k, v.resolve().item() if isinstance(v, PendingTensor) else v) for k, v in loss]


class NonFiniteMonitor:
    """Judge each logged step's gradient norms (the last one is the total) and losses.

    Parameters
    ----------
    layers : list of str
        Layer names, in the order of the norms (without the total).
    defer : bool
        Judge GPU values when their copies have landed instead of syncing.
    halt : bool
        Raise :class:`NonFiniteError` after reporting the finding.
    on_found : callable
        ``on_found(step, message, info) -> None``: called once, for the first finding.
    """

    def __init__(self, layers, *, defer: bool, halt: bool,
                 on_found: Callable[[object, str, dict], None]):
        self.layers = layers
        self.defer = defer
        self.halt = halt
        self.on_found = on_found
        self.found = False
        #: Deferred (GPU) values waiting to be judged (a list: true while any wait).
        self.pending: list = []

    def check(self, st, values, loss, where: str, *, after_optimizer_step: bool) -> None:
        """A step's norms (``values``: a list or a :class:`PendingTensor`) and its logged
        losses (``(key, value)``)."""
        if self.found:
            return
        if self.defer:
            # No blocking sync: decide when the copies have landed (next step or close).
            self.pending.append((st, values, loss, where))
            return
        vals = values.resolve().tolist() if isinstance(values, PendingTensor) else values
        self.judge(st, vals, _host(loss), where, after_optimizer_step=after_optimizer_step)

    def check_loss(self, st, loss, where: str, *, after_optimizer_step: bool) -> None:
        """Losses logged after the optimizer step, judged on their own (when not deferred)."""
        if loss and not self.found and not self.defer:
            self.judge(st, None, _host(loss), where, after_optimizer_step=after_optimizer_step)

    def resolve_pending(self, *, block: bool) -> None:
        keep = []
        for item in self.pending:
            st, values, loss, where = item
            ready = [values.event] + [v.event for _, v in loss if isinstance(v, PendingTensor)]
            if not block and not all(e.query() for e in ready):
                keep.append(item)
                continue
            if self.found:
                continue
            vals = values.resolve().tolist()
            self.judge(st, vals, _host(loss), where + " (checked after the step)",
                       after_optimizer_step=True)
        self.pending = keep

    def judge(self, st, vals, loss, where: str, *, after_optimizer_step: bool) -> None:
        bad_loss = [k for k, v in loss if not math.isfinite(v)]
        bad_layers = []
        # A non-finite layer norm makes the total non-finite, so the total is checked first.
        if vals is not None and not math.isfinite(vals[-1]):
            bad_layers = [self.layers[i] for i, v in enumerate(vals[:-1]) if not math.isfinite(v)]
            if not bad_layers:
                bad_layers = [fmt.TOTAL_LAYER]
        if not bad_loss and not bad_layers:
            return
        self.found = True
        parts = []
        if bad_loss:
            parts.append(f"loss {bad_loss[0]!r} is {dict(loss)[bad_loss[0]]}")
        if bad_layers:
            parts.append(f"gradient norm of {bad_layers[0]!r} is non-finite"
                         + (f" ({len(bad_layers)} layers in all)" if len(bad_layers) > 1 else ""))
        msg = f"step {st.step}: " + "; ".join(parts)
        self.on_found(st, msg, {"loss_keys": bad_loss, "layers": bad_layers, "detected": where,
                                "loss_finite": not bad_loss,
                                "state_after_optimizer_step": after_optimizer_step})
        if self.halt:
            err = NonFiniteError(msg)
            err._debugkit_captured = True
            raise err


def describe_outputs(output) -> dict | None:
    """``{"finite", "absmax", "tensors"}`` of a model output's floating tensors (a tensor,
    a tuple/list/dict of them, or a ``ModelOutput``), taken only when a step is found
    non-finite; None when it holds no floating tensor."""
    import torch

    found: list = []

    def walk(o, depth=0):
        if depth > 4 or len(found) > 32:
            return
        if isinstance(o, torch.Tensor):
            if o.is_floating_point() and o.numel():
                found.append(o.detach())
        elif isinstance(o, dict):
            for v in o.values():
                walk(v, depth + 1)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, depth + 1)

    walk(output)
    if not found:
        return None
    finite = all(bool(torch.isfinite(t).all()) for t in found)
    absmax = max(float(t.abs().max()) for t in found) if finite else None
    return {"finite": finite, "absmax": absmax, "tensors": len(found)}
