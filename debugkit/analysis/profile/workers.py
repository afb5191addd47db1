"""DataLoader worker processes: where their busy samples go, in words for the page.
"""

from __future__ import annotations

from .functions import compute_function_table
from .paths import frame_package_path
from .selection import _opt_int, select

MSG_WORKERS_VIEW = ("These are DataLoader worker processes: they run no training loop, so there is "
                    "no step breakdown here.")
MSG_WORKER_TOP = ("The DataLoader workers spend most of their busy time in `{name}` ({where}): "
                  "{busy:.0%} of their non-idle samples{unsure}.")
MSG_FEW_SAMPLES = "; only {n} samples, so this is rough"
FEW_SAMPLES = 100  # under this many samples a share is called rough


def compute_worker_hotspots(profile, top: int = 5):
    """What the DataLoader worker processes spend their busy time on: their top
    functions by self samples, idle samples (waiting for work) left out.

    Returns
    -------
    DataFrame with columns ``name``, ``file``, ``line`` (Int64: the function's hottest
    line), ``self_samples``, ``busy_fraction`` (of the workers' non-idle samples),
    ``fraction`` (of all their samples); ``attrs``: ``busy_samples``, ``worker_samples``.
    Empty when the profile has no DataLoader worker threads.
    """
    import pandas as pd

    ids = profile.thread_ids("dataloader")
    cols = ["name", "file", "line", "self_samples", "busy_fraction", "fraction"]
    out = pd.DataFrame({c: [] for c in cols})
    out.attrs.update(busy_samples=0, worker_samples=0)
    if not ids:
        return out
    fn = compute_function_table(profile, ids, by="function", include_idle=False)
    lines = compute_function_table(profile, ids, by="frame", include_idle=False)
    busy = int(fn["self_samples"].sum())
    total = int(select(profile, ids, "function").total_samples)
    fn = fn[fn["self_samples"] > 0].head(top).copy()
    hot = lines.drop_duplicates(["name", "file"]).set_index(["name", "file"])["line"]
    fn["line"] = pd.array([hot.get((n, f)) for n, f in zip(fn["name"], fn["file"])], dtype="Int64")
    fn["busy_fraction"] = fn["self_samples"] / max(busy, 1)
    fn["fraction"] = fn["self_samples"] / max(total, 1)
    fn = fn[cols].reset_index(drop=True)
    fn.attrs.update(busy_samples=busy, worker_samples=total)
    return fn


def describe_worker_top(workers) -> str:
    """One sentence naming the workers' top function (empty without workers)."""
    if workers is None or not len(workers):
        return ""
    r = workers.iloc[0]
    line = _opt_int(r["line"])
    where = f"{frame_package_path(r['file'])}" + (f":{line}" if line else "")
    n = int(workers.attrs.get("busy_samples", 0))
    # The name sits in a Markdown code span: a backtick in a stranger's profile must not end it.
    return MSG_WORKER_TOP.format(name=str(r["name"]).replace("`", "'"), where=where.replace("`", "'"),
                                 busy=float(r["busy_fraction"]),
                                 unsure=MSG_FEW_SAMPLES.format(n=n) if n < FEW_SAMPLES else "")


def _worker_rows(workers) -> list[dict]:
    if workers is None:
        return []
    return [{"name": r.name, "file": r.file, "line": _opt_int(r.line), "samples": int(r.self_samples),
             "busy_fraction": round(float(r.busy_fraction), 6), "fraction": round(float(r.fraction), 6)}
            for r in workers.itertuples()]
