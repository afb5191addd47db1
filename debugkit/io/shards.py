"""The whole layers' gradient norms of ranks that recorded their shards (FSDP2's
``fully_shard``: DTensor parameters; the rank metadata's ``grad_shards``), for
:meth:`debugkit.io.run.Run.grad_norms`."""

from __future__ import annotations


def add_shards(step, rank, code, value, sharded: list[int]):
    """The rows of the ``sharded`` ranks replaced by their layers' whole norms.

    At each step a layer's norm is ``sqrt(sum over ranks of shard_norm ** 2)``, summed
    scaled by the largest so that large finite norms do not overflow; NaN when a shard's
    is, else inf when one is. Each sharded rank gets that row, at the steps every sharded
    rank logged (a rank that died before a step leaves the step out: a partial sum is not
    the layer's norm). A step logged twice by a rank (a resumed segment) counts its last row.
    """
    import numpy as np

    mask = np.isin(rank, np.asarray(sharded, dtype=rank.dtype))
    keep = ~mask
    s, r, c, v = step[mask], rank[mask], code[mask].astype(np.int64), value[mask]
    if not len(s):
        return step[keep], rank[keep], code[keep], value[keep]
    # the last row of each (step, rank, layer), by sorting (no arithmetic key to overflow)
    o = np.lexsort((np.arange(len(s)), c, r, s))
    s, r, c, v = s[o], r[o], c[o], v[o]
    last = np.r_[(s[1:] != s[:-1]) | (r[1:] != r[:-1]) | (c[1:] != c[:-1]), True]
    s, c, v = s[last], c[last], v[last]
    o = np.lexsort((c, s))
    gs, gc, vs = s[o], c[o], v[o]
    starts = np.flatnonzero(np.r_[True, (gs[1:] != gs[:-1]) | (gc[1:] != gc[:-1])])
    count = np.diff(np.r_[starts, len(gs)])
    a = np.where(np.isfinite(vs), np.abs(vs), 0.0)
    top = np.maximum.reduceat(a, starts)
    scale = np.where(top > 0, top, 1.0)
    whole = np.sqrt(np.add.reduceat((a / np.repeat(scale, count)) ** 2, starts)) * scale
    whole[np.logical_or.reduceat(np.isinf(vs), starts)] = np.inf
    whole[np.logical_or.reduceat(np.isnan(vs), starts)] = np.nan
    full = count == len(sharded)
    gstep, gcode, whole = gs[starts][full], gc[starts][full], whole[full]
    n = len(gstep)
    out_step = np.concatenate([step[keep]] + [gstep] * len(sharded))
    out_rank = np.concatenate([rank[keep]] + [np.full(n, x, dtype=rank.dtype) for x in sharded])
    out_code = np.concatenate([code[keep]] + [gcode.astype(code.dtype)] * len(sharded))
    out_value = np.concatenate([value[keep]] + [whole] * len(sharded))
    return out_step, out_rank, out_code, out_value
