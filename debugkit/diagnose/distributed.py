"""``straggler``, ``hang``, ``rank_divergence``, ``rank_crashed``, ``rank_lost`` and
``collective_mismatch`` findings of multi-rank runs.

Config keys (``{"distributed": {...}}``): ``window`` (steps per straggler window,
default 20), ``ratio`` (busy-time ratio, 1.2), ``min_fraction`` (share of windows,
0.5), ``min_share`` (excess over the job's step period, 0.05), ``rtol`` (gradient-norm spread across ranks, 1e-4), ``num_candidates`` (HTA's
candidates per iteration, 2) and ``min_lag`` (late start in iterations, 0.05).
"""

from __future__ import annotations

from ..analysis import distributed as ad
from ..analysis import distributed_traces as at
from ..analysis.findings import Finding
from ..analysis.lost_ranks import detect_lost_ranks


def _lost_ranks(run, times) -> list[Finding]:
    from ..io.distributed import read_fatal_stacks, read_rank_info

    info = read_rank_info(run)
    world = int(info["world_size"].fillna(0).max() or 0) if len(info) else 0
    if not info["status"].isin(["crashed", "running"]).any() and world <= len(info):
        return []  # every rank closed its run: nothing to read further (large jobs stay cheap)
    return detect_lost_ranks(info, times, failures=run.failures(),
                             events=run.events(), fatal=read_fatal_stacks(run))


def _collective_mismatch(run) -> list[Finding]:
    from ..analysis.collectives import compute_collective_counts, detect_collective_mismatch

    counts = compute_collective_counts(run.events(), run.steps())
    return detect_collective_mismatch(counts, run.failures())


def _trace_coverage(traces: dict) -> list[Finding]:
    """``trace_coverage`` (info): the traces cover only some ranks of the job, so the
    trace analysis compares those only and cannot see a straggler among the others."""
    world = max((t.world_size or 0 for t in traces.values()), default=0)
    ranks = sorted(traces)
    if world <= len(ranks):
        return []
    shown = ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")
    return [Finding(
        kind="trace_coverage", step=None, rank=None, layer=None, severity="info",
        message=(f"The profiler traces cover {len(ranks)} of the job's {world} ranks ({shown}): "
                 f"the straggler and overlap analysis compares these only, so its verdict is "
                 f"uncertain for the whole job (a straggler among the other {world - len(ranks)} "
                 "ranks would not show). Trace every rank, or the ones you suspect."),
        evidence={"trace_ranks": ranks, "world_size": world, "confidence": "partial"})]


def collect(run, config: dict, *, times=None, grad_norms=None, windows=None,
            divergence=None) -> list[Finding]:
    """The findings; ``times`` (compute_rank_step_times), ``grad_norms``, ``windows``
    (compute_straggler_windows with the default window) and ``divergence``
    (compute_grad_divergence) may be passed by a caller that has them (the Distributed
    page), so that nothing is read or computed twice."""
    from ..io.distributed import read_hangs
    from ..io.rank_traces import find_rank_traces, read_rank_traces, stack_events

    out: list[Finding] = []
    ranks = run.ranks
    if len(ranks) > 1:
        if times is None:
            times = ad.compute_rank_step_times(run.steps())
        window = int(config.get("window", ad.STRAGGLER_WINDOW))
        out += ad.detect_stragglers(times, window=window,
                                    ratio=float(config.get("ratio", ad.STRAGGLER_RATIO)),
                                    min_fraction=float(config.get("min_fraction",
                                                                  ad.STRAGGLER_MIN_FRACTION)),
                                    min_share=float(config.get("min_share", ad.STRAGGLER_MIN_SHARE)),
                                    windows=windows if window == ad.STRAGGLER_WINDOW else None)
        out += ad.detect_rank_divergence(run.grad_norms() if grad_norms is None else grad_norms,
                                         rtol=float(config.get("rtol", ad.DIVERGENCE_RTOL)),
                                         divergence=divergence)
        out += _lost_ranks(run, times)
        out += _collective_mismatch(run)
    dumps = read_hangs(run)
    if dumps:
        out += ad.detect_hangs(dumps, events=run.events(), failures=run.failures(), ranks=ranks)
    paths = find_rank_traces(run)
    if len(paths) > 1:
        traces = read_rank_traces(paths)
        out += _trace_coverage(traces)
        events = stack_events(traces)
        out += at.detect_trace_stragglers(
            events, num_candidates=int(config.get("num_candidates", at.NUM_CANDIDATES)),
            min_lag=float(config.get("min_lag", at.MIN_LAG)))
    return out
