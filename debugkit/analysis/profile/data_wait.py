"""The step breakdown in words, and the ``data_wait`` finding: the loop waiting on its
DataLoader for a large share of the step.
"""

from __future__ import annotations

from .steps import OTHER
from .workers import FEW_SAMPLES, MSG_WORKERS_VIEW, _worker_rows, describe_worker_top


def describe_breakdown(df, info, workers=None) -> str:
    """One sentence on the breakdown, naming the biggest phase; when the loop waits for
    data and ``workers`` (:func:`compute_worker_hotspots`) is given, what the workers do."""
    if info.get("workers_only"):
        return " ".join(x for x in (MSG_WORKERS_VIEW, describe_worker_top(workers)) if x)
    if not info.get("loop_samples"):
        return ("No DataLoader, backward, optimizer or nn.Module frames in these threads: "
                "not a training loop, or the profile missed it.")
    top = df[df["phase"] != OTHER].sort_values("fraction", ascending=False).iloc[0]
    data = float(df.loc[df["phase"] == "data", "fraction"].iloc[0])
    msg = f"{top['phase'].capitalize()} takes the most time: {top['fraction']:.0%} of the training loop."
    if data >= 0.3:
        msg += (f" {data:.0%} is spent waiting for data (DataLoader): the model waits for its "
                "input; more workers, pinned memory or a faster dataset would help.")
        top = describe_worker_top(workers)
        if top:
            msg += " " + top
    if info["loop_samples"] < FEW_SAMPLES:
        msg += f" (Only {info['loop_samples']} samples in the loop: a rough picture.)"
    return msg


def detect_data_wait(breakdown, info, profile_id: str, threshold: float = 0.3, workers=None) -> list:
    """A ``dataloader_bound`` finding when the training loop spends at least
    ``threshold`` of its samples in data loading; it names the DataLoader workers' top
    function when ``workers`` (:func:`compute_worker_hotspots`) has one."""
    from ..findings import Finding

    if not info.get("loop_samples"):
        return []
    data = float(breakdown.loc[breakdown["phase"] == "data", "fraction"].iloc[0])
    if data < threshold:
        return []
    return [Finding(
        kind="dataloader_bound", step=None, rank=None, layer=None, severity="warning",
        message=(f"Profile {profile_id}: the training loop spends {data:.0%} of its time waiting for "
                 "data (DataLoader). More workers, pinned memory or a cheaper dataset would help; "
                 "see the Profiler page." + (" " + describe_worker_top(workers) if workers is not None
                                             and len(workers) else "")),
        evidence={"profile": profile_id, "data_fraction": round(data, 4), "loop": info.get("loop"),
                  "worker_top": _worker_rows(workers)[:1] or None,
                  "phases": {r.phase: round(float(r.fraction), 4) for r in breakdown.itertuples()},
                  "threshold": threshold})]
