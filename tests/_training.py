"""The tiny training loop that tests record runs with, written once.

``train_step`` is one step as a user writes it inside ``Recorder.step``: forward, loss,
``zero_grad``, ``backward``, log the loss, ``optimizer.step()``. ``train`` runs it over
batches. Variations are parameters (``loss_fn``, extra logged scalars); a test whose step
does something else in the middle (a collective, a crash, an allocation) keeps its own
loop, and so do the scenario and torchrun jobs, which stand for users' scripts (their
source lines are part of what the tests check).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch.nn.functional as F


def train_step(rec, model, opt, batch, *, loss_fn: Callable = F.cross_entropy, **log):
    """One recorded step on ``batch = (x, y)``; ``log`` adds scalars after ``loss``.
    Returns the loss."""
    x, y = batch
    with rec.step(batch):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        rec.log(loss=loss, **log)
        opt.step()
    return loss


def train(rec, model, opt, batches: Iterable, **kwargs) -> int:
    """``train_step`` on each batch (drawn lazily, so random batches are drawn in the same
    order as an inline loop draws them). Returns the number of steps run."""
    n = 0
    for batch in batches:
        train_step(rec, model, opt, batch, **kwargs)
        n += 1
    return n
