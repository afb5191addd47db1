"""Distributed-run analyses: per-rank step times, stragglers, hangs, rank divergence.

Pure functions over the reader's DataFrames and records; no I/O, no plotting.

In synchronous data-parallel training every rank leaves each gradient all-reduce at
the same moment, so a slow rank does not show up as a longer step on that rank: the
*others* take longer, waiting for it inside the collective. The time a rank spends
on its own work is therefore ``data_wait_s + compute_s`` ("busy" time), where
``compute_s = step_time_s - comm_s`` removes the time it was held up in
collectives. Stragglers are found on busy time.
"""

from __future__ import annotations

import difflib
import math
from collections import Counter

from .findings import Finding

# Defaults of the detectors (documented in docs/distributed.md).
STRAGGLER_WINDOW = 20          # steps per window
STRAGGLER_RATIO = 1.2          # busy-time ratio to the other ranks' median
STRAGGLER_MIN_FRACTION = 0.5   # share of windows a rank must be slow in
STRAGGLER_MIN_SHARE = 0.05     # its excess, as a share of the job's step period
DIVERGENCE_RTOL = 1e-4         # relative spread of a gradient norm across ranks
COLLECTIVE_ERROR_HINTS = ("gloo", "nccl", "Timed out waiting", "Connection closed by peer",
                          "collective operation timeout", "ProcessGroup", "c10d")


# ------------------------------------------------------------------------------ step times
def compute_rank_step_times(steps):
    """Per step and rank, how the time went.

    Parameters
    ----------
    steps : DataFrame
        :meth:`Run.steps` (``step, rank, wall_time, step_time_s, data_wait_s, comm_s, ok``).

    Returns
    -------
    DataFrame with columns ``step``, ``rank``, ``wall_time``, ``step_time_s``,
    ``data_wait_s`` (0 where null: a segment's first step), ``comm_s`` (NaN where not
    measured), ``compute_s`` (``step_time_s - comm_s``), ``busy_s`` (``data_wait_s +
    compute_s``), ``comm_measured`` (bool) and ``ok``; sorted by step then rank. When
    a step number occurs twice on a rank (a resumed run), the last row is kept.

    Where ``comm_s`` was not measured, the wait is estimated as the step time minus
    the shortest step time of any rank at that step (in synchronous training the rank
    that reaches the all-reduce last waits for nobody), so a rank held up by its data
    loader is still found; a rank slowed in compute is then invisible (measure with
    ``rec.watch_ddp(model)`` or ``rec.comm()``).
    """
    import numpy as np

    df = steps[["step", "rank", "wall_time", "step_time_s", "data_wait_s", "comm_s", "ok"]].copy()
    df = df.drop_duplicates(["step", "rank"], keep="last").sort_values(["step", "rank"])
    df["comm_measured"] = df["comm_s"].notna()
    df["data_wait_s"] = df["data_wait_s"].astype(float).fillna(0.0)
    comm = df["comm_s"].astype(float)
    st = df["step_time_s"].astype(float)
    est = st - st.groupby(df["step"]).transform("min")
    df["compute_s"] = np.maximum(st - comm.fillna(est), 0.0)
    df["comm_s"] = comm
    df["busy_s"] = df["data_wait_s"] + df["compute_s"]
    return df.reset_index(drop=True)[["step", "rank", "wall_time", "step_time_s", "data_wait_s",
                                      "comm_s", "compute_s", "busy_s", "comm_measured", "ok"]]


def compute_rank_summary(times):
    """Medians per rank of :func:`compute_rank_step_times`.

    Returns
    -------
    DataFrame with columns ``rank``, ``steps``, ``step_time_s``, ``data_wait_s``,
    ``comm_s``, ``compute_s``, ``busy_s`` (medians over the rank's steps; ``comm_s``
    NaN when never measured) and ``busy_ratio`` (the rank's median busy time over the
    median of the other ranks' medians; NaN for a single rank).
    """
    import numpy as np
    import pandas as pd

    if times.empty:
        return pd.DataFrame(columns=["rank", "steps", "step_time_s", "data_wait_s", "comm_s",
                                     "compute_s", "busy_s", "busy_ratio"])
    g = times.groupby("rank", sort=True)
    out = g[["step_time_s", "data_wait_s", "comm_s", "compute_s", "busy_s"]].median()
    out.insert(0, "steps", g.size())
    ratios = []
    for r in out.index:
        others = out.loc[out.index != r, "busy_s"]
        ref = float(others.median()) if len(others) else math.nan
        ratios.append(float(out.loc[r, "busy_s"]) / ref if ref and ref > 0 else math.nan)
    out["busy_ratio"] = np.array(ratios, dtype=float)
    return out.reset_index()


def compute_straggler_windows(times, window: int = STRAGGLER_WINDOW):
    """Busy-time ratio of every rank in consecutive windows of ``window`` steps.

    Only steps that every rank recorded are used. Returns a DataFrame with
    ``window_start``, ``window_end`` (first and last step), ``rank``, ``busy_s``,
    ``data_wait_s``, ``compute_s`` (medians in the window) and ``ratio`` (the rank's
    median busy time over the median of the other ranks' medians in that window).
    """
    import pandas as pd

    cols = ["window_start", "window_end", "rank", "busy_s", "data_wait_s", "compute_s", "ratio"]
    if times.empty or times["rank"].nunique() < 2:
        return pd.DataFrame(columns=cols)
    import numpy as np

    n_ranks = times["rank"].nunique()
    counts = times.groupby("step")["rank"].nunique()
    full = counts.index[counts == n_ranks]
    # The first step of a segment has no data wait (nothing before it): leave it out.
    t = times[times["step"].isin(full) & (times["step"] > times["step"].min())]
    steps = np.sort(t["step"].unique())
    if not len(steps):
        return pd.DataFrame(columns=cols)
    w = max(1, int(window))
    chunk_of = np.arange(len(steps)) // w
    n_chunks = int(chunk_of[-1]) + 1
    # A short window after the first is too noisy to judge on its own: stop before it.
    lengths = np.bincount(chunk_of, minlength=n_chunks)
    short = np.flatnonzero(lengths[1:] < max(3, window // 2))
    keep = int(short[0]) + 1 if len(short) else n_chunks
    starts = steps[::w][:keep]
    ends = steps[np.minimum(np.arange(keep) * w + w, len(steps)) - 1]
    chunk = pd.Series(chunk_of, index=steps)
    t = t.assign(_chunk=t["step"].map(chunk))
    t = t[t["_chunk"] < keep]
    # Medians per (window, rank): one grouped pass, not one per window.
    med = t.groupby(["_chunk", "rank"], sort=True)[["busy_s", "data_wait_s", "compute_s"]].median()
    busy = med["busy_s"].unstack("rank").sort_index()
    ranks = busy.columns.to_numpy()
    ref = _median_of_others(busy.to_numpy(dtype=float))
    own = busy.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(ref > 0, own / ref, np.nan)
    wi = busy.index.to_numpy()
    out = pd.DataFrame({
        "window_start": np.repeat(starts[wi], len(ranks)).astype(np.int64),
        "window_end": np.repeat(ends[wi], len(ranks)).astype(np.int64),
        "rank": np.tile(ranks, len(wi)).astype(np.int64),
        "busy_s": own.ravel(),
        "ratio": ratio.ravel(),
    })
    idx = pd.MultiIndex.from_arrays([np.repeat(wi, len(ranks)), np.tile(ranks, len(wi))])
    for c in ("data_wait_s", "compute_s"):
        out[c] = med[c].reindex(idx).to_numpy(dtype=float)
    # Only steps every rank recorded are used, so every rank is in every window.
    return out[cols]


def _median_of_others(m):
    """Row-wise: for every column j, the median of the row's other columns (NaN skipped).

    Sorting each row once gives every leave-one-out median: with the row sorted and
    element j at sorted position p, the remaining n-1 values are the sorted row without
    position p."""
    import numpy as np

    n_rows, n = m.shape
    out = np.full((n_rows, n), np.nan)
    if n < 2:
        return out
    finite = ~np.isnan(m).any(axis=1)
    a = m[finite]
    if len(a):
        order = np.argsort(a, axis=1, kind="stable")
        s = np.take_along_axis(a, order, axis=1)
        pos = np.empty_like(order)
        np.put_along_axis(pos, order, np.arange(n)[None, :].repeat(len(a), 0), axis=1)
        k = n - 1  # values left

        def rem(i):  # the i-th smallest of the row without position pos
            return np.take_along_axis(s, np.where(i < pos, i, i + 1), axis=1)

        if k % 2:
            res = rem(np.full_like(pos, k // 2))
        else:
            res = (rem(np.full_like(pos, k // 2 - 1)) + rem(np.full_like(pos, k // 2))) / 2
        out[finite] = res
    for i in np.flatnonzero(~finite):  # rows with a missing median: the plain way
        row = m[i]
        for j in range(n):
            rest = np.delete(row, j)
            out[i, j] = np.nanmedian(rest) if (~np.isnan(rest)).any() else np.nan
    return out


def detect_stragglers(times, *, window: int = STRAGGLER_WINDOW, ratio: float = STRAGGLER_RATIO,
                      min_fraction: float = STRAGGLER_MIN_FRACTION,
                      min_share: float = STRAGGLER_MIN_SHARE, windows=None) -> list[Finding]:
    """``straggler`` findings: ranks whose busy time stays above the others'.

    A rank is a straggler when its median busy time exceeds ``ratio`` times the other
    ranks' median in more than ``min_fraction`` of the windows, two of them consecutive
    (persistence: a rank slowed in scattered windows by a loaded machine is not one), and its median excess
    is at least ``min_share`` of the job's median step period (step time + data
    wait), so that sub-millisecond noise on tiny steps is not reported. The cause is the part
    of the excess that is larger: data wait (the input pipeline) or compute.
    """
    # ``windows``: compute_straggler_windows(times, window) when the caller has it already.
    wins = compute_straggler_windows(times, window) if windows is None else windows
    if wins.empty:
        return []
    n_windows = wins[["window_start"]].drop_duplicates().shape[0]
    if n_windows < 2:
        return []  # one window cannot show that a rank *stays* slow
    out = []
    measured = bool(times["comm_measured"].all())
    period = float((times["step_time_s"] + times["data_wait_s"]).median())
    for r, g in wins.groupby("rank", sort=True):
        slow = g[g["ratio"] > ratio]
        if len(slow) <= min_fraction * n_windows:
            continue
        # Persistence: slow in two consecutive windows at least, not in scattered ones (a
        # loaded machine slows one rank for a while, then another, then the first again).
        order = g.sort_values("window_start")["ratio"].to_numpy() > ratio
        if not (order[1:] & order[:-1]).any():
            continue
        mine = times[times["rank"] == r]
        rest = times[times["rank"] != r]
        # Per-step medians of the other ranks, then the median excess of this rank.
        ref = rest.groupby("step")[["data_wait_s", "compute_s", "busy_s"]].median()
        own = mine.set_index("step")[["data_wait_s", "compute_s", "busy_s"]]
        both = own.merge(ref, left_index=True, right_index=True, how="inner",
                         suffixes=("", "_others"))
        both = both[both.index > times["step"].min()]
        ex_data = float((both["data_wait_s"] - both["data_wait_s_others"]).median())
        ex_comp = float((both["compute_s"] - both["compute_s_others"]).median())
        cause = "data" if ex_data >= ex_comp else "compute"
        excess = float((both["busy_s"] - both["busy_s_others"]).median())
        if not period > 0 or excess < min_share * period:
            continue
        med_ratio = float(slow["ratio"].median())
        first = int(slow["window_start"].min())
        what = ("waiting on its data loader" if cause == "data" else "computing")
        msg = (f"Rank {r} is a straggler: its own work per step (data wait + compute) is "
               f"{med_ratio:.1f}x the other ranks' median in {len(slow)} of {n_windows} "
               f"window{'s' if n_windows != 1 else ''} "
               f"of {window} steps; the extra time is spent {what} "
               f"({ex_data * 1000:+.1f} ms data wait, {ex_comp * 1000:+.1f} ms compute per step, "
               f"{excess / period:.0%} of the job's step period), "
               f"and the other ranks wait for it in their collectives.")
        if not measured:
            msg += (" Collective time was not measured on every rank (use rec.watch_ddp(model) "
                    "or rec.comm()); it was estimated from the fastest rank's step, so the "
                    "compute part is approximate.")
        out.append(Finding(
            kind="straggler", step=first, rank=int(r), layer=None,
            severity="warning", message=msg,
            evidence={"source": "steps", "cause": cause, "median_ratio": med_ratio,
                      "slow_windows": int(len(slow)), "windows": int(n_windows), "window": int(window),
                      "ratio_threshold": float(ratio),
                      "excess_data_wait_s": ex_data, "excess_compute_s": ex_comp,
                      "excess_s": excess, "step_period_s": period,
                      "busy_s": float(own["busy_s"].median()),
                      "others_busy_s": float(ref["busy_s"].median()),
                      "comm_measured": measured}))
    return out


# ------------------------------------------------------------------------------ hangs
def _frame_key(fr: dict) -> str:
    import os

    return f"{fr.get('function')} ({os.path.basename(str(fr.get('file')))}:{fr.get('line')})"


def train_stack(dump: dict) -> list[dict]:
    """The frames of the training thread of a hang dump (outermost first)."""
    threads = dump.get("threads") or []
    tid = dump.get("train_thread")
    for t in threads:
        if t.get("ident") == tid:
            return t.get("frames") or []
    for t in threads:
        if t.get("name") == "MainThread":
            return t.get("frames") or []
    return threads[0].get("frames") or [] if threads else []


def stuck_frame(frames: list[dict]) -> dict | None:
    """The innermost frame of the user's own code (else the innermost frame)."""
    for fr in reversed(frames):
        if not fr.get("library"):
            return fr
    return frames[-1] if frames else None


def stack_signature(frames: list[dict]) -> tuple:
    """What identifies where a rank waits: its user-code frames, outermost first."""
    return tuple(_frame_key(f) for f in frames if not f.get("library")) or tuple(
        _frame_key(f) for f in frames[-3:])


def group_hang_incidents(dumps: list[dict]) -> list[list[dict]]:
    """Group dumps into incidents: a rank's own timeout dump plus the dumps that other
    ranks wrote on its request (``trigger_rank``) within the same minute."""
    incidents: list[list[dict]] = []
    for d in sorted(dumps, key=lambda d: d.get("time") or 0):
        for inc in incidents:
            lead = inc[0]
            if (d.get("trigger_rank") == lead.get("trigger_rank")
                    and abs((d.get("time") or 0) - (lead.get("time") or 0)) < 60
                    and all(x["rank"] != d["rank"] for x in inc)):
                inc.append(d)
                break
        else:
            incidents.append([d])
    return incidents


def compute_hang_view(incident: list[dict], world_ranks: list[int] | None = None):
    """Per rank, where it was when the hang was dumped, and which rank(s) diverge.

    Parameters
    ----------
    incident : list of dict
        Dumps of one incident (see :func:`group_hang_incidents`).
    world_ranks : list of int, optional
        All ranks of the run, so that ranks without a dump are listed too.

    Returns
    -------
    (DataFrame, list of int)
        Columns ``rank``, ``in_step``, ``step`` (the step in progress, or None),
        ``last_step`` (last completed), ``position`` (step in progress, or last
        completed + 0.5 between steps), ``elapsed_s``, ``stuck_at``
        (``function (file:line)`` of the user frame it waits in), ``stuck_code``,
        ``signature_group`` (ranks with the same stack share a number), ``divergent``
        (bool), ``dump`` (its id); and the divergent ranks.

        A rank diverges when its stack or step differs from the majority's; with no
        majority (two ranks, or all different) the rank that is furthest behind (the
        lowest position) is the one the others wait for.
    """
    import pandas as pd

    rows = []
    sigs = {}
    for d in incident:
        frames = train_stack(d)
        fr = stuck_frame(frames)
        in_step = bool(d.get("in_step"))
        last = d.get("last_step")
        pos = d.get("step") if in_step else ((last + 0.5) if last is not None else -0.5)
        sigs[d["rank"]] = (stack_signature(frames), d.get("step") if in_step else None, in_step)
        rows.append({"rank": d["rank"], "in_step": in_step, "step": d.get("step") if in_step else None,
                     "last_step": last, "position": pos, "elapsed_s": d.get("elapsed_s"),
                     "stuck_at": _frame_key(fr) if fr else None,
                     "stuck_code": fr.get("code") if fr else None, "dump": d.get("id")})
    for r in world_ranks or []:
        if r not in sigs:
            rows.append({"rank": r, "in_step": None, "step": None, "last_step": None,
                         "position": None, "elapsed_s": None, "stuck_at": None,
                         "stuck_code": None, "dump": None})
    df = pd.DataFrame(rows, columns=["rank", "in_step", "step", "last_step", "position", "elapsed_s",
                                     "stuck_at", "stuck_code", "dump"])
    for c in ("step", "last_step"):
        df[c] = df[c].astype("Int64")
    groups = {}
    for r, s in sigs.items():
        groups.setdefault(s, []).append(r)
    numbered = {s: i for i, s in enumerate(sorted(groups, key=lambda s: (-len(groups[s]), min(groups[s]))))}
    df["signature_group"] = [numbered.get(sigs[r]) if r in sigs else None for r in df["rank"]]
    sizes = sorted((len(v) for v in groups.values()), reverse=True)
    divergent: list[int] = []
    if len(groups) > 1:
        if sizes[0] > 1 and (len(sizes) == 1 or sizes[0] > sizes[1]):
            majority = max(groups, key=lambda s: len(groups[s]))
            divergent = sorted(r for s, rs in groups.items() if s != majority for r in rs)
        else:
            dumped = df[df["position"].notna()]
            low = dumped["position"].min()
            divergent = sorted(int(r) for r in dumped.loc[dumped["position"] == low, "rank"])
            if len(divergent) == len(dumped):
                divergent = []  # all equally far: nothing singles one out
    df["divergent"] = df["rank"].isin(divergent)
    return df.sort_values("rank").reset_index(drop=True), divergent


def diff_stacks(a: list[dict], b: list[dict], name_a: str = "a", name_b: str = "b") -> str:
    """A unified diff of two training-thread stacks (one ``function (file:line)`` and
    source line per frame)."""
    def lines(frames):
        return [f"{_frame_key(f)}  {f.get('code') or ''}".rstrip() for f in frames]
    return "\n".join(difflib.unified_diff(lines(a), lines(b), fromfile=name_a, tofile=name_b,
                                          lineterm="", n=2))


def short_error(message: str) -> str:
    """The first line of an error message, without the ``Got the following error when
    running the callback: RuntimeError:`` wrappers that DDP's comm hooks add."""
    text = str(message or "").strip()
    wrapper = "Got the following error when running the callback: "
    while text.startswith(wrapper):
        text = text[len(wrapper):]
        head, sep, rest = text.partition(": ")
        if sep and head.isidentifier():
            text = rest
    return (text.splitlines() or [""])[0][:300]


def is_collective_error(record: dict) -> bool:
    """True for a failure or error record that came from torch.distributed."""
    mod = str(record.get("error_module") or "")
    etype = str(record.get("error_type") or "")
    if mod.startswith("torch.distributed") or etype.startswith("Dist"):
        return True
    msg = str(record.get("message") or "")
    return any(h in msg for h in COLLECTIVE_ERROR_HINTS)


def detect_hangs(dumps: list[dict], *, events: list[dict] | None = None,
                 failures: list[dict] | None = None, ranks: list[int] | None = None) -> list[Finding]:
    """``hang`` findings, one per incident of watchdog dumps.

    The finding's ``rank`` is the divergent rank (the one the others wait for) when
    one stands out. Severity is ``error`` when the hung step never finished or ended
    in an error (a collective timeout), ``warning`` when it finished late.
    """
    events = events or []
    failures = failures or []
    out = []
    resolved = {(e.get("rank"), e.get("step")): e for e in events if e.get("kind") == "hang_resolved"}
    for inc in group_hang_incidents(dumps):
        view, divergent = compute_hang_view(inc, ranks)
        lead = inc[0]
        hung = [d for d in inc if d.get("in_step")]
        step = min((d["step"] for d in hung), default=lead.get("last_step"))
        ended = [resolved.get((d["rank"], d.get("step"))) for d in hung]
        finished_ok = bool(hung) and all(e is not None and e.get("ok") for e in ended)
        errs = [f for f in failures if is_collective_error(f)
                and any(f.get("rank") == d["rank"] for d in inc)]
        per_rank = []
        for row in view.to_dict("records"):
            if row["dump"] is None:
                per_rank.append(f"rank {row['rank']}: no dump")
            elif row["in_step"]:
                per_rank.append(f"rank {row['rank']}: in step {_int(row['step'])} at {row['stuck_at']}")
            else:
                per_rank.append(f"rank {row['rank']}: between steps (last completed "
                                f"{_int(row['last_step'])}) at {row['stuck_at']}")
        who = (f"Rank {', '.join(map(str, divergent))} diverges from the others: the rest wait for it. "
               if divergent else "")
        trig = lead.get("trigger_rank")
        elapsed = lead.get("elapsed_s")
        head = (f"Rank {trig} spent more than {lead.get('timeout_s')} s in step {step}"
                if hung else f"The watchdog dumped stacks near step {step}")
        if finished_ok:
            tail = "The step finished after all (slow, not stuck)."
        elif errs:
            e = errs[0]
            first_line = short_error(e.get("message"))
            tail = (f"It ended with {e.get('error_type')} on rank {e.get('rank')}: {first_line}")
        else:
            tail = "It never finished."
        msg = f"{head}. {who}" + "; ".join(per_rank) + f". {tail}"
        out.append(Finding(
            kind="hang", step=int(step) if step is not None else None,
            rank=divergent[0] if len(divergent) == 1 else (trig if not divergent else None),
            layer=None, severity="warning" if finished_ok else "error", message=msg,
            evidence={"divergent_ranks": divergent, "trigger_rank": trig,
                      "elapsed_s_at_dump": elapsed, "finished": finished_ok,
                      "ranks": [{k: (None if _isnan(v) else v) for k, v in rec.items()}
                                for rec in view.to_dict("records")],
                      "dumps": [d.get("id") for d in inc],
                      "errors": [{"rank": f.get("rank"), "error_type": f.get("error_type"),
                                  "failure": f.get("id")} for f in errs]}))
    return out


def _int(v):
    return None if v is None or _isnan(v) else int(v)


def _isnan(v) -> bool:
    if v is None or isinstance(v, (str, bytes, list, tuple, dict)):
        return False
    try:
        import pandas as pd

        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------------------ divergence
def compute_grad_divergence(grad_norms):
    """Spread of each gradient norm across ranks, per step and layer.

    After DDP's all-reduce every rank holds the same averaged gradients, so each
    layer's norm should be identical on all ranks.

    Returns
    -------
    DataFrame with columns ``step``, ``layer``, ``ranks`` (how many ranks logged
    it), ``min``, ``max``, ``median``, ``rel_spread`` (``(max - min) / max(|median|,
    1e-12)``) and ``outlier_rank`` (the rank furthest from the median).
    """
    import numpy as np
    import pandas as pd

    cols = ["step", "layer", "ranks", "min", "max", "median", "rel_spread", "outlier_rank"]
    if grad_norms.empty or grad_norms["rank"].nunique() < 2:
        return pd.DataFrame(columns=cols)
    g = grad_norms.groupby(["step", "layer"], observed=True, sort=True)["grad_norm"]
    out = g.agg(["count", "min", "max", "median"]).reset_index()
    out = out[out["count"] > 1]
    out = out.rename(columns={"count": "ranks"})
    out["rel_spread"] = (out["max"] - out["min"]) / np.maximum(out["median"].abs(), 1e-12)
    med = grad_norms.merge(out[["step", "layer", "median"]], on=["step", "layer"], how="inner")
    med["dev"] = (med["grad_norm"] - med["median"]).abs()
    idx = med.groupby(["step", "layer"], observed=True)["dev"].idxmax()
    outl = med.loc[idx, ["step", "layer", "rank"]].rename(columns={"rank": "outlier_rank"})
    out = out.merge(outl, on=["step", "layer"], how="left")
    return out[cols].sort_values(["step", "layer"]).reset_index(drop=True)


def detect_rank_divergence(grad_norms, *, rtol: float = DIVERGENCE_RTOL, divergence=None) -> list[Finding]:
    """``rank_divergence``: gradient norms that differ across ranks after the all-reduce.

    One finding for the run: the first step where some layer's norms differ by more
    than ``rtol`` (relative), the layers affected, and the rank that stands apart
    when there are three or more ranks.
    """
    import numpy as np

    # ``divergence``: compute_grad_divergence(grad_norms) when the caller has it already.
    div = compute_grad_divergence(grad_norms) if divergence is None else divergence
    if div.empty:
        return []
    finite = np.isfinite(div["rel_spread"])
    bad = div[finite & (div["rel_spread"] > rtol)]
    if bad.empty:
        return []
    first = int(bad["step"].min())
    layers = [str(x) for x in bad["layer"].astype(str).unique()]
    n_ranks = int(grad_norms["rank"].nunique())
    steps_bad = int(bad["step"].nunique())
    steps_all = int(div["step"].nunique())
    outliers = Counter(int(r) for r in bad["outlier_rank"])
    rank = None
    if n_ranks >= 3 and outliers:
        r, c = outliers.most_common(1)[0]
        if c > 0.5 * len(bad):
            rank = r
    worst = bad.loc[bad["rel_spread"].idxmax()]
    msg = (f"Gradient norms differ across ranks after the all-reduce from step {first} on "
           f"({steps_bad} of {steps_all} steps; layers {', '.join(layers[:5])}"
           f"{' …' if len(layers) > 5 else ''}): up to {float(worst['rel_spread']):.2%} apart "
           f"({worst['layer']} at step {int(worst['step'])}). DDP averages gradients, so the "
           f"replicas should agree: parameters outside DDP's all-reduce, a forward that "
           f"bypasses the DDP wrapper (model.module(x)) or no_sync() on some ranks "
           f"desynchronise them.")
    if rank is not None:
        msg += f" Rank {rank} is the one that stands apart."
    return [Finding(kind="rank_divergence", step=first, rank=rank, layer=layers[0],
                    severity="error" if steps_bad > 1 else "warning", message=msg,
                    evidence={"layers": layers, "steps_diverged": steps_bad, "steps": steps_all,
                              "max_rel_spread": float(worst["rel_spread"]), "rtol": float(rtol),
                              "ranks": n_ranks,
                              "outlier_counts": {str(k): v for k, v in sorted(outliers.items())}})]
