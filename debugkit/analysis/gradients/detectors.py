"""Gradient detectors (NaN/Inf, explosions, vanishing and dead layers) over a
:class:`~.matrix.GradMatrix`, and :func:`detect_gradient_findings`, every gradient and
loss finding of a run."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..findings import Finding, sort_findings
from ..scalars import describe_lr_before
from ._window import _effective_window, _fmt, _jsonable, _sustained, _trailing_jumps, _window_medians
from .config import resolve_config
from .losses import _loss_lookup, detect_loss_spikes, detect_nonfinite_loss
from .matrix import TOTAL, GradMatrix, pivot_grad_norms


def detect_nonfinite_grad(m: GradMatrix, scalars=None, config: dict | None = None) -> list[Finding]:
    """``nonfinite_grad``: the first step whose gradient norms hold NaN/Inf.

    ``layer`` is the first affected parameter in model order (``__total__`` when only
    the total overflowed); evidence lists every affected layer and whether the loss was
    still finite at that step (a finite loss points at the backward pass).
    """
    cfg = resolve_config(config)
    bad = m.nonfinite()
    cols = np.flatnonzero(bad.any(axis=0))
    if not len(cols):
        return []
    j = int(cols[0])
    step = int(m.steps[j])
    rows = np.flatnonzero(bad[:-1, j])
    layers = [m.names[i] for i in rows] or [TOTAL]
    first = layers[0]
    loss_finite, loss_value, loss_key = None, None, None
    from_rank = None  # another rank whose loss was non-finite at this step
    if scalars is not None and len(scalars):
        lookup = _loss_lookup(scalars, cfg)
        lk = lookup.get(m.rank)
        if lk is not None:
            loss_key, ls, lv = lk
            hit = np.flatnonzero(ls == step)
            if len(hit):
                loss_value = float(lv[hit[-1]])
                loss_finite = bool(math.isfinite(loss_value))
        if loss_finite:
            for r in sorted(lookup):
                _, ls, lv = lookup[r]
                hit = np.flatnonzero(ls == step)
                if r != m.rank and len(hit) and not math.isfinite(float(lv[hit[-1]])):
                    from_rank = r
                    break
    vals = {m.names[i]: _jsonable(m.values[i, j]) for i in (rows if len(rows) else [len(m.names) - 1])}
    if from_rank is not None:
        why = (f"while this rank's loss was still finite ({_fmt(loss_value)}) and rank {from_rank}'s "
               f"was already non-finite at this step: the gradient all-reduce (DDP) or reduce-scatter "
               f"(FSDP) carried rank {from_rank}'s non-finite gradients to this rank; look at rank "
               f"{from_rank}'s batch and finding")
    elif loss_finite:
        why = (f"while the loss was still finite ({_fmt(loss_value)}): the backward pass made it; look "
               "for log/sqrt/division of zero or an overflowing custom op in those layers, and replay "
               "the step with torch.autograd.detect_anomaly")
    elif loss_finite is False:
        why = ("and the loss was already non-finite: the forward pass overflowed; lower the learning "
               "rate, clip gradients or check the inputs of that batch")
    else:
        why = "(no loss logged at that step); look at the step's batch and the learning rate"
    n_total = len(m.layers)
    where = (f"first in {first!r} ({len(rows)} of {n_total} layers)" if len(rows)
             else f"in the total only (every one of the {n_total} layers was finite: the sum of squares overflowed)")
    message = f"Gradient norms became non-finite at step {step} on rank {m.rank}, {where}, {why}."
    return [Finding(
        kind="nonfinite_grad", step=step, rank=m.rank, layer=first, severity="error",
        message=message,
        evidence={"layers": layers, "values": vals, "loss_finite": loss_finite,
                  "loss": _jsonable(loss_value) if loss_value is not None else None,
                  "loss_key": loss_key, "from_rank": from_rank,
                  "last_finite_step": int(m.steps[j - 1]) if j > 0 else None,
                  "nonfinite_steps": int(len(cols))},
    )]


def _significant(m: GradMatrix, cfg) -> np.ndarray:
    """Bool matrix: finite values that are not negligible (above the vanishing floors)."""
    v = m.values
    with np.errstate(invalid="ignore"):
        fin = np.isfinite(v)
        lay = np.where(fin[:-1], v[:-1], -np.inf)
        rowmax = lay.max(axis=0) if lay.shape[0] else np.full(v.shape[1], -np.inf)
        sig = fin & (v >= cfg["vanish_abs"]) & (v >= cfg["vanish_rel"] * rowmax[None, :])
    return sig


def detect_exploding_grad(m: GradMatrix, config: dict | None = None) -> list[Finding]:
    """``exploding_grad``: the first step where the total or a layer's norm jumps above
    ``explode_factor`` x its trailing median, or has grown by ``growth_ratio`` x per step
    for ``growth_steps`` consecutive steps.

    Reports the first such step; ``layer`` is the parameter with the largest factor at
    that step (``__total__`` when only the total jumped). Negligible norms (below the
    vanishing floors) are never called explosions.
    """
    cfg = resolve_config(config)
    if m.n_steps < 2:
        return []
    v = np.where(np.isfinite(m.values), m.values, np.nan)
    sig = _significant(m, cfg)
    jump = _trailing_jumps(v, sig, cfg["explode_window"], cfg["explode_min_history"],
                           cfg["explode_factor"])
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = v[:, 1:] / v[:, :-1]
        up = np.zeros_like(sig)
        up[:, 1:] = (ratio >= cfg["growth_ratio"]) & sig[:, 1:] & (v[:, :-1] > 0)
    n = cfg["growth_steps"]
    grow_end = _sustained(up, n)  # True at the last step of n consecutive increases
    jump_cols = np.flatnonzero(jump.any(axis=0))
    grow_cols = np.flatnonzero(grow_end.any(axis=0))
    first_jump = int(jump_cols[0]) if len(jump_cols) else None
    # A geometric run is reported at its start (the step before its first increase).
    first_grow_end = int(grow_cols[0]) if len(grow_cols) else None
    first_grow = first_grow_end - n if first_grow_end is not None else None
    if first_jump is None and first_grow is None:
        return []
    use_jump = first_grow is None or (first_jump is not None and first_jump <= first_grow)
    if use_jump:
        j = first_jump
        rows = np.flatnonzero(jump[:, j])
        meds = _window_medians(v, rows, np.full(len(rows), j), cfg["explode_window"],
                               cfg["explode_min_history"])
        f = v[rows, j] / meds
        reason = "jump"
    else:
        j = first_grow
        end = first_grow_end
        rows = np.flatnonzero(grow_end[:, end])
        with np.errstate(invalid="ignore", divide="ignore"):
            f = v[rows, end] / v[rows, j]
        reason = "geometric"
    layer_rows = [r for r in rows if r != len(m.names) - 1]
    pick = layer_rows if layer_rows else list(rows)
    best = max(pick, key=lambda r: float(f[list(rows).index(r)]))
    best_f = float(f[list(rows).index(best)])
    name = m.names[best]
    step = int(m.steps[j])
    total_row = len(m.names) - 1
    med_total = (_window_medians(v, np.array([total_row]), np.array([j]), cfg["explode_window"],
                                 cfg["explode_min_history"])[0] if reason == "jump" else v[total_row, j])
    suggest = float(f"{2 * med_total:.2g}") if np.isfinite(med_total) and med_total > 0 else None
    flagged = {m.names[r]: round(float(ff), 3) for r, ff in zip(rows, f)}
    if reason == "jump":
        med_best = float(meds[list(rows).index(best)])
        what = (f"jumped to {_fmt(v[best, j])} at step {step} on rank {m.rank}, {_fmt(best_f)}x its median "
                f"of {_fmt(med_best)} over the previous {cfg['explode_window']} logged steps")
        evidence = {"reason": "jump", "factor": best_f, "value": float(v[best, j]),
                    "trailing_median": med_best, "window": cfg["explode_window"]}
    else:
        end_step = int(m.steps[first_grow_end])
        what = (f"grew {_fmt(best_f)}x in {n} consecutive logged steps from step {step} to {end_step} on "
                f"rank {m.rank} (at least {cfg['growth_ratio']:g}x per step)")
        evidence = {"reason": "geometric", "factor": best_f, "value": float(v[best, first_grow_end]),
                    "start_value": float(v[best, j]), "end_step": end_step, "growth_steps": n}
    advice = "lower the learning rate or add warmup, and clip with clip_grad_norm_"
    if suggest:
        advice += f"(max_norm={suggest:g})"
    later = np.flatnonzero((jump | grow_end).any(axis=0))
    evidence.update({"layers": flagged, "steps_flagged": int(len(later)),
                     "last_flagged_step": int(m.steps[later[-1]]), "suggested_max_norm": suggest})
    return [Finding(kind="exploding_grad", step=step, rank=m.rank, layer=name, severity="warning",
                    message=f"Gradient norm of {name!r} {what}; {advice}.", evidence=evidence)]


def with_lr_context(findings: list[Finding], scalars) -> list[Finding]:
    """Exploding-gradient findings that also say what the learning rate did before them
    ("lr grew 100x since step 0, from 0.1 to 10"), from the ``lr`` scalars the Recorder logs;
    the numbers go to ``evidence["lr"]``. Findings are returned unchanged without them."""
    out = []
    for f in findings:
        lr = describe_lr_before(scalars, f.step, f.rank) if f.step is not None else None
        if lr is None:
            out.append(f)
            continue
        head, sep, advice = f.message.partition("; ")
        msg = f"{head} ({lr['text']}){sep}{advice}" if sep else f"{f.message} ({lr['text']})"
        out.append(dataclasses.replace(f, message=msg, evidence={**f.evidence, "lr": lr}))
    return out


def _warmup_end(scalars, rank: int) -> int | None:
    """The step at which the ``lr`` scalar of ``rank`` first reaches its maximum, when it
    rose to it (a warmup); None without a rising ``lr``."""
    if scalars is None or not len(scalars) or "key" not in scalars.columns:
        return None
    lr = scalars[(scalars["key"] == "lr") & (scalars["rank"] == rank)].sort_values("step")
    if len(lr) < 2:
        return None
    v = lr["value"].to_numpy(dtype=float)
    top = int(np.nanargmax(v)) if np.isfinite(v).any() else 0
    return int(lr["step"].iloc[top]) if top > 0 and v[top] > v[0] else None


def detect_vanishing_grad(m: GradMatrix, config: dict | None = None, scalars=None) -> list[Finding]:
    """``vanishing_grad``: layers whose norm stays below ``vanish_abs`` or below
    ``vanish_rel`` x the largest layer's norm of each step over ``vanish_window`` logged
    steps. One finding per rank names them all (``layer``: the earliest in model order).
    Layers that are exactly zero throughout are left to :func:`detect_dead_layers`.

    Tiny gradients at the start are how some layers begin (attention's query and key at
    initialisation): a layer counts only when it is still tiny for ``vanish_min_steps``
    logged steps after the first ``vanish_settle_steps`` and after the learning-rate
    warmup (from ``scalars``' ``lr``), and does not grow later to ``vanish_recover`` x its
    median over its first vanishing window."""
    cfg = resolve_config(config)
    if len(m.layers) < 1:
        return []
    w = _effective_window(m.n_steps, cfg["vanish_window"], cfg["vanish_min_steps"])
    if w is None:
        return []
    v = m.values[:-1]
    fin = np.isfinite(v) & m.present[:-1]
    lay = np.where(fin, v, -np.inf)
    rowmax = lay.max(axis=0)
    argmax = lay.argmax(axis=0)
    with np.errstate(invalid="ignore"):
        tiny = fin & ((v < cfg["vanish_abs"]) | (v < cfg["vanish_rel"] * rowmax[None, :]))
    zero = fin & (v == 0)
    sustained = _sustained(tiny, w)
    dead = _sustained(zero, _effective_window(m.n_steps, cfg["dead_window"], cfg["dead_min_steps"]) or w)
    settle = min(cfg["vanish_settle_steps"], m.n_steps)
    warm = _warmup_end(scalars, m.rank)
    if warm is not None:
        settle = max(settle, int(np.searchsorted(m.steps, warm)))
    late = _sustained(tiny, cfg["vanish_min_steps"])
    late[:, :min(m.n_steps, settle + cfg["vanish_min_steps"] - 1)] = False
    rows = [i for i in range(len(m.layers)) if sustained[i].any() and late[i].any()]
    hits = []
    for i in rows:
        ends = np.flatnonzero(sustained[i])
        # A layer that is exactly zero over every one of its vanishing windows is dead.
        nonzero_windows = [e for e in ends if not dead[i, e]]
        if not nonzero_windows:
            continue
        start = int(nonzero_windows[0]) - w + 1
        first_med = float(np.nanmedian(np.where(fin[i, start:start + w], v[i, start:start + w], np.nan)))
        later = np.where(fin[i, start + w:], v[i, start + w:], np.nan)
        if later.size and np.isfinite(later).any() and first_med > 0 \
                and float(np.nanmax(later)) >= cfg["vanish_recover"] * first_med \
                and not tiny[i, -min(w, m.n_steps):].all():
            continue  # it grew out of it: a start, not a vanishing layer
        sel = tiny[i] & fin[i]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(sel, v[i] / rowmax, np.nan)
        hits.append((start, i, float(np.nanmedian(np.where(sel, v[i], np.nan))), float(np.nanmedian(ratio))))
    if not hits:
        return []
    start = min(h[0] for h in hits)
    first = min(hits, key=lambda h: h[1])
    big = int(np.bincount(argmax[np.isfinite(rowmax)], minlength=len(m.layers)).argmax())
    names = [m.names[h[1]] for h in sorted(hits, key=lambda h: h[1])]
    listing = ", ".join(repr(n) for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    message = (f"Gradients vanish in {len(names)} of {len(m.layers)} layers on rank {m.rank} from step "
               f"{int(m.steps[start])} ({listing}): the earliest, {m.names[first[1]]!r}, has a median norm "
               f"of {_fmt(first[2])}, {_fmt(first[3])} of the largest layer ({m.names[big]!r}), so those "
               "layers barely learn; use ReLU/GELU instead of sigmoid/tanh, add normalisation or "
               "residual connections, or fix the initialisation.")
    return [Finding(
        kind="vanishing_grad", step=int(m.steps[start]), rank=m.rank, layer=m.names[first[1]],
        severity="warning", message=message,
        evidence={"layers": names, "window": w, "vanish_abs": cfg["vanish_abs"],
                  "vanish_rel": cfg["vanish_rel"], "largest_layer": m.names[big],
                  "per_layer": {m.names[i]: {"first_step": int(m.steps[s]), "median_norm": mn,
                                             "median_ratio_to_largest": mr}
                                for s, i, mn, mr in sorted(hits, key=lambda h: h[1])}},
    )]


def detect_dead_layers(m: GradMatrix, config: dict | None = None) -> list[Finding]:
    """``dead_layer``: parameters whose gradient norm is exactly 0.0 for ``dead_window``
    consecutive logged steps (unused in the forward pass, detached, or frozen by mistake),
    or whose gradient went to exactly 0.0 after being non-zero and stayed there to the
    last logged step for at least ``dead_min_steps`` steps (saturated sigmoid/tanh units
    or dead ReLUs: a run that ends soon after its units saturate is named too).
    One finding per rank names them all (``layer``: the first in model order);
    ``evidence["went_to_zero"]`` maps each layer that was non-zero before to the step
    its gradient became exactly zero, and ``evidence["last_nonzero_step"]`` to its last
    non-zero step."""
    cfg = resolve_config(config)
    w = _effective_window(m.n_steps, cfg["dead_window"], cfg["dead_min_steps"])
    if w is None or not m.layers:
        return []
    v = m.values[:-1]
    present = m.present[:-1]
    zero = present & (v == 0)
    nonzero = present & np.isfinite(v) & (v != 0)
    sustained = _sustained(zero, w)
    starts: dict[int, int] = {}
    for i in range(len(m.layers)):
        if sustained[i].any():
            starts[i] = int(np.argmax(sustained[i])) - w + 1
            continue
        # A zero run that lasts to the layer's last logged step, after non-zero values.
        cols = np.flatnonzero(present[i])
        if not len(cols) or not zero[i, cols[-1]]:
            continue
        nz = np.flatnonzero(nonzero[i])
        if not len(nz):
            continue
        tail = cols[cols > nz[-1]]
        if len(tail) >= cfg["dead_min_steps"] and zero[i, tail].all():
            starts[i] = int(tail[0])
    rows = sorted(starts)
    if not rows:
        return []
    went = {}  # layer row -> (first zero step, last non-zero step before it), as columns
    for i in rows:
        before = np.flatnonzero(nonzero[i, :starts[i]])
        if len(before):
            went[i] = (starts[i], int(before[-1]))
    always = [i for i in rows if zero[i].sum() == present[i].sum()]
    names = [m.names[i] for i in rows]
    step = int(m.steps[min(starts.values())])

    def listing(idx):
        ns = [m.names[i] for i in idx]
        return ", ".join(repr(n) for n in ns[:4]) + (f" and {len(ns) - 4} more" if len(ns) > 4 else "")

    parts = []
    never = [i for i in rows if i not in went]
    if went:
        s0 = min(went.values())[0]
        parts.append(
            f"{len(went)} parameter(s) had non-zero gradients, then exactly-zero gradients from step "
            f"{int(m.steps[s0])} on rank {m.rank} ({listing(sorted(went))}): their units saturated "
            "(sigmoid/tanh outputs pinned at 0 or 1 / -1 or 1, whose slope rounds to 0) or died "
            "(ReLUs that output 0 for every input), so they stopped learning; lower the learning "
            "rate or clip gradients, normalise the inputs and activations (LayerNorm/BatchNorm), "
            "or use a non-saturating activation (GELU, LeakyReLU)")
    if never:
        s1 = min(starts[i] for i in never)
        parts.append(
            f"{len(never)} parameter(s) got an exactly-zero gradient for {w}+ consecutive logged steps "
            f"from step {int(m.steps[s1])} on rank {m.rank} ({listing(never)}): they are unused in the "
            "forward pass, cut off from the loss (a .detach() or no_grad), or their units are dead; "
            "remove them, reconnect them, or set requires_grad=False on purpose")
    message = ". ".join(parts) + "."
    return [Finding(
        kind="dead_layer", step=step, rank=m.rank, layer=names[0], severity="warning",
        message=message,
        evidence={"layers": names, "window": w,
                  "first_zero_step": {m.names[i]: int(m.steps[starts[i]]) for i in rows},
                  "zero_in_every_logged_step": [m.names[i] for i in always],
                  "went_to_zero": {m.names[i]: int(m.steps[went[i][0]]) for i in sorted(went)},
                  "last_nonzero_step": {m.names[i]: int(m.steps[went[i][1]]) for i in sorted(went)}},
    )]


#: What to use instead of a hand-written loss formula that under/overflows.
MSG_STABLE_LOSS = ("compute it with F.log_softmax / F.cross_entropy (not log(softmax(x))), "
                   "F.binary_cross_entropy_with_logits or F.logsigmoid (not log(sigmoid(x))) and "
                   "torch.logsumexp (not log(sum(exp(x))))")


def loss_origins(captures: list[dict]) -> dict[tuple[int, int], dict]:
    """``{(step, rank): {"outputs_absmax", "loss_keys", "failure"}}`` of the non-finite
    captures whose loss was non-finite while every output of the model was finite: the
    loss computation made it (``captures``: ``run.failures()``)."""
    out = {}
    for c in captures:
        nf = c.get("nonfinite") or {}
        outs = nf.get("model_outputs") or {}
        if c.get("kind") != "nonfinite" or nf.get("loss_finite") is not False or outs.get("finite") is not True:
            continue
        key = (c.get("step"), c.get("rank"))
        out.setdefault(key, {"outputs_absmax": outs.get("absmax"), "loss_keys": nf.get("loss_keys") or [],
                             "failure": c.get("id")})
    return out


def link_loss_origins(findings: list[Finding], captures: list[dict]) -> list[Finding]:
    """Attribute a non-finite loss whose model outputs were finite to the loss computation:
    the ``nonfinite_loss`` finding says so (and what to use instead), and the
    ``nonfinite_grad`` of that step becomes its consequence (a warning whose
    ``evidence["related"]`` names the loss finding), not a separate first error. A loss
    finding is added when the loss was not logged as a scalar. :func:`attach_related` then
    makes the loss finding (the named cause) the root of that step's findings."""
    origins = loss_origins(captures)
    if not origins:
        return findings
    out = []
    done = set()
    for f in findings:
        key = (f.step, f.rank)
        o = origins.get(key)
        if o is None or f.kind not in ("nonfinite_loss", "nonfinite_grad"):
            out.append(f)
            continue
        amax = o["outputs_absmax"]
        outs = (f"every output of the model was finite (max |output| {_fmt(amax)})" if amax is not None
                else "every output of the model was finite")
        if f.kind == "nonfinite_loss":
            done.add(key)
            out.append(dataclasses.replace(
                f, message=f"{f.message.split('; look at')[0].rstrip('.')}: the loss computation made it, "
                           f"not a layer ({outs}); {MSG_STABLE_LOSS}, and replay the captured step "
                           "to see the op.",
                evidence={**f.evidence, "origin": "loss_computation", "outputs_absmax": amax,
                          "failure": o["failure"],
                          "related": [{"kind": "nonfinite_grad", "step": f.step, "rank": f.rank,
                                       "relation": "consequence"}]}))
        else:
            out.append(dataclasses.replace(
                f, severity="warning",
                message=(f"A consequence of the non-finite loss at step {f.step} on rank {f.rank} (made by "
                         f"the loss computation, not by a layer: {outs}): gradient norms became "
                         f"non-finite in {len(f.evidence.get('layers') or [])} layer(s) from "
                         f"{f.layer!r} on."),
                evidence={**f.evidence, "origin": "loss_computation",
                          "related": [{"kind": "nonfinite_loss", "step": f.step, "rank": f.rank,
                                       "relation": "cause"}]}))
    for (step, rank), o in origins.items():
        if (step, rank) in done or not any(f.kind == "nonfinite_grad" and (f.step, f.rank) == (step, rank)
                                           for f in out):
            continue
        amax = o["outputs_absmax"]
        keys = ", ".join(repr(k) for k in o["loss_keys"]) or "the loss"
        out.append(Finding(
            kind="nonfinite_loss", step=step, rank=rank, layer=None, severity="error",
            message=(f"Loss {keys} became non-finite at step {step} on rank {rank}. The loss computation "
                     f"made it: every output of the model was finite (max |output| {_fmt(amax)}); "
                     f"{MSG_STABLE_LOSS}."),
            evidence={"origin": "loss_computation", "outputs_absmax": amax, "failure": o["failure"],
                      "related": [{"kind": "nonfinite_grad", "step": step, "rank": rank,
                                   "relation": "consequence"}]}))
    return sort_findings(out)


def detect_gradient_findings(grads, scalars, config: dict | None = None, *,
                             matrices: dict[int, GradMatrix] | None = None) -> list[Finding]:
    """Every gradient and loss finding of a run, ordered by step.

    Parameters
    ----------
    grads : DataFrame
        :meth:`Run.grad_norms` rows (not read when ``matrices`` is given).
    scalars : DataFrame
        :meth:`Run.scalars` rows.
    config : dict, optional
        Overrides of :data:`DEFAULTS`.
    matrices : dict, optional
        ``pivot_grad_norms(grads)``, when the caller already has it.
    """
    cfg = resolve_config(config)
    out: list[Finding] = []
    out += detect_nonfinite_loss(scalars, cfg)
    out += detect_loss_spikes(scalars, cfg)
    for m in (pivot_grad_norms(grads) if matrices is None else matrices).values():
        out += detect_nonfinite_grad(m, scalars, cfg)
        out += with_lr_context(detect_exploding_grad(m, cfg), scalars)
        out += detect_vanishing_grad(m, cfg, scalars)
        out += detect_dead_layers(m, cfg)
    return sort_findings(out)
