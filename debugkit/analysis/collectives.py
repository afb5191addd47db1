"""Per-rank collective counts: the rank that skipped or added a collective.

gloo and NCCL pair collectives by their order on each rank, not by name or call site:
a rank that skips one (or calls one more) does not fail there. The ranks run on with
their collectives mismatched (silently, while the tensors' sizes agree) until one rank
waits for a collective its peers never call, and the job hangs or times out, often many
steps later and on the other rank. The Recorder counts the collectives each rank enters
in each step (``rec.comm()`` blocks and DDP comm-hook buckets) and writes the count to
the rank's events when it changes (``{"kind": "collectives", "step", "calls"}``), which
is enough to name the rank, the step and the direction.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from .findings import Finding
from .lost_ranks import parse_collective_error

EVENT = "collectives"


def compute_collective_counts(events: list[dict], steps) -> pd.DataFrame:
    """The collectives each rank entered at each of its recorded steps.

    Parameters
    ----------
    events : list of dict
        ``run.events()`` (the ``collectives`` events are used).
    steps : DataFrame
        ``run.steps()`` (``rank``, ``step``).

    Returns
    -------
    DataFrame with columns ``rank`` (int), ``step`` (int) and ``calls`` (int): a step
    before a rank's first count (nothing measured yet) is left out.
    """
    by_rank: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        if e.get("kind") == EVENT and isinstance(e.get("step"), int) and isinstance(e.get("calls"), int):
            by_rank.setdefault(int(e["rank"]), []).append((e["step"], e["calls"]))
    rows = []
    if not by_rank or steps is None or not len(steps):
        return pd.DataFrame({"rank": pd.Series(dtype="int64"), "step": pd.Series(dtype="int64"),
                             "calls": pd.Series(dtype="int64")})
    for rank, g in steps.groupby("rank", sort=True):
        changes = sorted(by_rank.get(int(rank), []))
        if not changes:
            continue
        k, cur = 0, None
        for s in sorted(set(int(x) for x in g["step"])):
            while k < len(changes) and changes[k][0] <= s:
                cur = changes[k][1]
                k += 1
            if cur is not None:
                rows.append((int(rank), s, int(cur)))
    return pd.DataFrame(rows, columns=["rank", "step", "calls"]).astype("int64")


def _collective_name(failures: list[dict]) -> str | None:
    for f in failures:
        coll = parse_collective_error(f.get("message"), f.get("traceback"))
        if coll and coll.get("collective"):
            return str(coll["collective"])
    return None


def detect_collective_mismatch(counts: pd.DataFrame, failures: list[dict] | None = None) -> list[Finding]:
    """``collective_mismatch``: the first step at which the ranks entered different
    numbers of collectives, naming the rank(s) whose count differs from their own usual
    count (the mode over their steps) as the one(s) that skipped or added a collective,
    and the later failures (a hang, a timeout, a closed peer) that follow from it."""
    if counts.empty or counts["rank"].nunique() < 2:
        return []
    wide = counts.pivot(index="step", columns="rank", values="calls").dropna()
    if wide.empty:
        return []
    differ = wide[wide.nunique(axis=1) > 1]
    if differ.empty:
        return []
    step = int(differ.index[0])
    row = differ.iloc[0]
    usual = {int(r): Counter(counts[counts["rank"] == r]["calls"]).most_common(1)[0][0]
             for r in wide.columns}
    odd = [int(r) for r in wide.columns if int(row[r]) != usual[int(r)]]
    if not odd or len(odd) == len(wide.columns):  # no rank kept its usual count: the minority
        c = Counter(int(v) for v in row)
        top = c.most_common(1)[0][0]
        odd = [int(r) for r in wide.columns if int(row[r]) != top]
    failures = failures or []
    later = sorted((f for f in failures if isinstance(f.get("step"), int) and f["step"] >= step),
                   key=lambda f: (f["step"], f.get("rank") or 0))
    name = _collective_name(later)
    what = f"an {name}" if name and name[0] in "aeiou" else (f"a {name}" if name else "a collective")
    parts = []
    for r in odd:
        n, u = int(row[r]), int(usual[r])
        k = abs(u - n)
        if n < u:
            did = f"skipped {what}" if k == 1 else f"skipped {k} collectives"
        else:
            did = f"called an extra {name or 'collective'}" if k == 1 else f"called {k} extra collectives"
        parts.append(f"rank {r} {did} at step {step} ({n} collective call{'s' if n != 1 else ''} "
                     f"where it usually makes {u})")
    others = {int(r): int(row[r]) for r in wide.columns if int(r) not in odd}
    cons = [{"failure": f.get("id"), "step": f["step"], "rank": f.get("rank"),
             "error_type": f.get("error_type")} for f in later]
    tail = ""
    if later:
        f0 = later[0]
        tail = (f" The failure at step {f0['step']} on rank {f0.get('rank')} ({f0.get('error_type')}) "
                "follows from it: from then on the ranks' collectives were paired out of order "
                "until one rank waited for a collective the other never called.")
    made = ", ".join(str(v) for v in sorted(set(others.values())))
    msg = (f"Collective calls diverged at step {step}: " + "; ".join(parts)
           + (f", while the other ranks made {made}" if others else "") + ". gloo and NCCL pair collectives by "
           "their order, not by name, so nothing failed there." + tail +
           " Make every rank call the same collectives in the same order: a collective inside "
           "`if rank == ...`, a data-dependent branch or an early `continue` is the usual cause.")
    return [Finding(
        kind="collective_mismatch", step=step, rank=odd[0], layer=None, severity="error",
        message=msg,
        evidence={"ranks": odd, "calls": {str(int(r)): int(row[r]) for r in wide.columns},
                  "usual_calls": {str(r): int(u) for r, u in usual.items()},
                  "direction": {str(r): ("skipped" if int(row[r]) < usual[r] else "added") for r in odd},
                  "collective": name, "consequences": cons,
                  "related": [{"kind": "step_failure", "step": c["step"], "rank": c["rank"],
                               "relation": "consequence"} for c in cons]},
    )]
