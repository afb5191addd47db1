"""Checks on a captured batch's values: labels, non-finite inputs, index ranges.

Functions take CPU or CUDA tensors and return plain dicts (JSON-able) that say which
samples, which positions and which values. They need torch; the replay's child
process calls them.
"""

from __future__ import annotations

from typing import Any

from .loading import iter_leaves

#: Keys under which a dict batch usually holds its classification target.
LABEL_KEYS = ("label", "labels", "target", "targets", "y")
#: ``F.cross_entropy``'s default ``ignore_index``: a label with this value is skipped.
IGNORE_INDEX = -100
#: How many offending samples a finding lists.
MAX_SAMPLES = 20
#: How many positions per sample a finding lists.
MAX_POSITIONS = 20


def _is_int(t) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex() \
        and t.dtype != torch.bool


def find_target(batch: Any, is_int=None) -> tuple[tuple, Any] | None:
    """``(path, tensor)`` of the batch's integer classification target, if it has one.

    An ``(inputs, target)`` pair gives ``target``; a dict gives the first of
    :data:`LABEL_KEYS` that holds an integer tensor (``is_int``: the test of one, default
    torch's; :mod:`debugkit.replay.batchcheck_numpy` passes numpy's).
    """
    is_int = is_int or _is_int
    if isinstance(batch, (list, tuple)) and len(batch) == 2 and is_int(batch[1]):
        return (1,), batch[1]
    if isinstance(batch, dict):
        for key in LABEL_KEYS:
            if key in batch and is_int(batch[key]):
                return (key,), batch[key]
    return None


def batch_size(batch: Any) -> int | None:
    """The length of the batch's first dimension (its first tensor's), or None."""
    for _, t in iter_leaves(batch):
        if len(t.shape) >= 1:
            return int(t.shape[0])
    return None


def group_by_sample(mask, values, n_batch: int | None, *, limit: int = MAX_SAMPLES,
                    per_sample: int = MAX_POSITIONS) -> tuple[list[dict], int]:
    """Offending elements grouped by sample (dim 0, when it is the batch dimension).

    Returns ``(samples, n_samples)``: up to ``limit`` entries ``{"sample", "positions",
    "values"}`` (``sample`` None when dim 0 is not the batch; ``positions`` the index
    within the sample: an int for 1-D samples, a list for more, omitted for scalars)
    and the number of samples affected in all.
    """
    import torch

    if not bool(mask.any()):
        return [], 0
    batched = mask.dim() >= 1 and n_batch is not None and mask.shape[0] == n_batch
    if not batched:
        pos = torch.nonzero(mask, as_tuple=False)[:per_sample]
        return [{"sample": None,
                 "positions": [q for q in (_pos(p) for p in pos.cpu().tolist()) if q is not None],
                 "values": [values[tuple(p)].item() for p in pos.cpu().tolist()]}], 1
    per_row = mask.reshape(mask.shape[0], -1).any(dim=1)
    rows = torch.nonzero(per_row, as_tuple=False).reshape(-1)
    out = []
    for r in rows[:limit].cpu().tolist():
        m, v = mask[r], values[r]
        if m.dim() == 0:
            out.append({"sample": r, "positions": [], "values": [v.item()]})
            continue
        pos = torch.nonzero(m, as_tuple=False)[:per_sample].cpu().tolist()
        out.append({"sample": r, "positions": [_pos(p) for p in pos],
                    "values": [v[tuple(p)].item() for p in pos]})
    return out, int(rows.numel())


def _pos(p: list) -> int | list | None:
    return p[0] if len(p) == 1 else (p if p else None)


def find_bad_labels(target, num_classes: int, *, path: tuple = (1,), source: str = "num_classes",
                 n_batch: int | None = None, ignore_index: int = IGNORE_INDEX) -> dict:
    """Labels outside ``[0, num_classes)`` (``ignore_index`` is allowed).

    Returns ``{"path", "num_classes", "source", "count", "total", "samples",
    "n_samples"}`` where ``count`` is the number of bad labels, ``samples`` as in
    :func:`group_by_sample` with the bad values.
    """
    t = target.detach()
    n_batch = n_batch if n_batch is not None else (int(t.shape[0]) if t.dim() else None)
    bad = ((t < 0) | (t >= num_classes)) & (t != ignore_index)
    samples, n = group_by_sample(bad, t, n_batch)
    return {"path": list(path), "num_classes": int(num_classes), "source": source,
            "count": int(bad.sum().item()), "total": int(t.numel()), "samples": samples,
            "n_samples": n}


def find_nonfinite(batch: Any, *, skip: tuple | None = None, n_batch: int | None = None) -> list[dict]:
    """Floating tensors of the batch holding NaN or Inf.

    Returns one entry per such tensor: ``{"path", "shape", "nan", "posinf", "neginf",
    "samples", "n_samples"}`` (counts of each kind; ``samples`` with the positions, i.e.
    the features, of the non-finite values).
    """
    import torch

    n_batch = n_batch if n_batch is not None else batch_size(batch)
    out = []
    for path, t in iter_leaves(batch):
        if skip is not None and tuple(path) == tuple(skip):
            continue
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
            continue
        bad = ~torch.isfinite(t)
        if not bool(bad.any()):
            continue
        samples, n = group_by_sample(bad, t, n_batch)
        out.append({"path": list(path), "shape": list(t.shape),
                    "nan": int(torch.isnan(t).sum().item()),
                    "posinf": int((t == float("inf")).sum().item()),
                    "neginf": int((t == float("-inf")).sum().item()),
                    "samples": samples, "n_samples": n})
    return out


def check_index_range(idx, size: int, n_batch: int | None) -> dict | None:
    """Integer indices outside ``[0, size)`` (an ``nn.Embedding``'s input), or None."""
    t = idx.detach()
    bad = (t < 0) | (t >= size)
    if not bool(bad.any()):
        return None
    samples, n = group_by_sample(bad, t, n_batch)
    return {"count": int(bad.sum().item()), "total": int(t.numel()),
            "min": int(t.min().item()), "max": int(t.max().item()),
            "samples": samples, "n_samples": n}
