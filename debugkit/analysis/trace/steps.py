"""Each ``ProfilerStep#N`` split into phases: from torch's own event names (data, forward,
backward, optimizer, other) or from the user's ``record_function`` annotations.
"""

from __future__ import annotations

import numpy as np

from .events import BACKWARD_PREFIX, CPU_OP, DATA_PREFIX, OPTIMIZER_PREFIXES, STEP_PREFIX, _x
from .gpu_idle import _subtract, _union_intervals, trace_window
from .operators import _parent_of_rows, compute_nesting


def compute_trace_steps(trace):
    """Each ``ProfilerStep#N`` split into data loading, forward, backward, optimizer and
    other, by wall time.

    Within a step's window: ``data`` is time in ``enumerate(DataLoader)#...``;
    ``optimizer`` in ``Optimizer.step#...`` / ``Optimizer.zero_grad#...``; ``backward`` in
    ``autograd::engine::evaluate_function: ...`` (any thread); ``forward`` the other
    operators on the step's thread; ``other`` the rest (Python between operators, waiting).
    Each instant counts once, in that order of precedence.

    Returns
    -------
    DataFrame with columns ``step`` (int), ``start_ms`` (from the window start),
    ``dur_ms``, ``data_ms``, ``forward_ms``, ``backward_ms``, ``optimizer_ms``,
    ``other_ms``. Empty when the trace has no ``ProfilerStep#`` annotations (record with
    ``schedule=`` and call ``prof.step()``).
    """
    import pandas as pd

    x = _x(trace)
    names = x["name"].astype(str)
    cols = ["step", "start_ms", "dur_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms"]
    steps = x[names.str.startswith(STEP_PREFIX)]
    if not len(steps):
        return pd.DataFrame({c: [] for c in cols})
    w0, _ = trace_window(trace)
    ts = x["ts_us"].to_numpy()
    te = ts + x["dur_us"].to_numpy()
    lane = (x["pid"].astype(str) + "\x1f" + x["tid"].astype(str)).to_numpy()
    is_data = names.str.startswith(DATA_PREFIX).to_numpy()
    is_opt = names.str.startswith(OPTIMIZER_PREFIXES).to_numpy()
    is_bwd = names.str.startswith(BACKWARD_PREFIX).to_numpy()
    is_op = (x["cat"] == CPU_OP).to_numpy()
    rows = []
    for r in steps.itertuples():
        s0, s1 = r.ts_us, r.ts_us + r.dur_us
        step_lane = f"{r.pid}\x1f{r.tid}"
        inside = (te > s0) & (ts < s1)
        done_s, done_e = np.zeros(0), np.zeros(0)
        got = {}
        for phase, mask in (("data", is_data & (lane == step_lane)), ("optimizer", is_opt),
                            ("backward", is_bwd), ("forward", is_op & (lane == step_lane))):
            m = inside & mask
            a_s, a_e = _union_intervals(np.clip(ts[m], s0, s1), np.clip(te[m], s0, s1))
            got[phase] = _subtract(a_s, a_e, done_s, done_e)
            done_s, done_e = _union_intervals(np.concatenate([done_s, a_s]), np.concatenate([done_e, a_e]))
        total = s1 - s0
        try:
            step_no = int(r.name.split("#", 1)[1])
        except (IndexError, ValueError):
            step_no = len(rows)
        rows.append({"step": step_no, "start_ms": (s0 - w0) / 1e3, "dur_ms": total / 1e3,
                     "data_ms": got["data"] / 1e3, "forward_ms": got["forward"] / 1e3,
                     "backward_ms": got["backward"] / 1e3, "optimizer_ms": got["optimizer"] / 1e3,
                     "other_ms": max(total - sum(got.values()), 0.0) / 1e3})
    return pd.DataFrame(rows, columns=cols).sort_values("step", kind="stable").reset_index(drop=True)


ANNOTATION_MIN_COVER = 0.5   # annotations must cover half a step to be its phases
ANNOTATION_SURE_COVER = 0.8  # under this, the output says much of the step is unannotated
MSG_ANNOTATION_GAPS = ("your annotations cover {cover:.0%} of the steps; the rest is 'other' "
                       "(time between them)")
MSG_ONE_STEP = "one step only: a single step may not be typical"


def _phase_name(name: str) -> str:
    """A ``record_function`` label as a phase: torch's own DataLoader/optimizer labels map
    to ``data``/``optimizer``; TorchRec's ``## forward ##`` to ``forward``."""
    if name.startswith(DATA_PREFIX):
        return "data"
    if name.startswith(OPTIMIZER_PREFIXES):
        return "optimizer"
    return name.strip().strip("#").strip() or name


def compute_annotated_steps(trace):
    """Each ``ProfilerStep#N`` split by the user's own ``record_function`` annotations.

    A step's phases are the annotations directly inside it on its thread
    (``user_annotation`` events, and ``cpu_op`` events named TorchRec-style
    ``## name ##``), named without the ``##`` (``## sparse_data_dist ##`` ->
    ``sparse_data_dist``; torch's ``enumerate(DataLoader)#...`` -> ``data``,
    ``Optimizer.step#...`` -> ``optimizer``); time in none of them is ``other``. Used
    only when, over all steps, the user's annotations (not torch's) cover at least
    :data:`ANNOTATION_MIN_COVER` of the steps' time and name two phases or more;
    otherwise the result is empty and :func:`compute_trace_steps`' built-in split applies.

    Returns
    -------
    DataFrame with columns ``step`` (int), ``phase``, ``ms``, ``fraction`` (of the step),
    in time order within each step (``other`` last). ``attrs["cover"]`` is the share of
    the steps' time the annotations cover.
    """
    import pandas as pd

    cols = ["step", "phase", "ms", "fraction"]
    empty = pd.DataFrame({c: [] for c in cols})
    empty.attrs["cover"] = 0.0
    x = _x(trace)
    names = x["name"].astype(str)
    step_rows = x.index[names.str.startswith(STEP_PREFIX).to_numpy()]
    if not len(step_rows):
        return empty
    idx, parent, _ = compute_nesting(trace)
    ev = trace.events
    par = _parent_of_rows(trace, idx, parent)
    cat = ev["cat"].astype(str).to_numpy()
    nm = ev["name"].astype(str).to_numpy()
    ts = ev["ts_us"].to_numpy()
    dur = ev["dur_us"].to_numpy()
    is_ann = (cat == "user_annotation") | ((cat == CPU_OP) & np.char.startswith(nm.astype(str), "##"))
    steps = set(step_rows.tolist())
    child = np.flatnonzero(is_ann & np.isin(par, list(steps)))
    child = child[~np.char.startswith(nm[child].astype(str), STEP_PREFIX)]
    rows, user_names, total, covered = [], set(), 0.0, 0.0
    for srow in sorted(steps, key=lambda r: ts[r]):
        s0, s1 = ts[srow], ts[srow] + dur[srow]
        mine = child[par[child] == srow]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        phases: dict[str, list] = {}
        for r in mine.tolist():
            ph = _phase_name(nm[r])
            phases.setdefault(ph, [[], []])
            phases[ph][0].append(max(ts[r], s0))
            phases[ph][1].append(min(ts[r] + dur[r], s1))
            if ph not in ("data", "optimizer") or not nm[r].startswith((DATA_PREFIX,) + OPTIMIZER_PREFIXES):
                user_names.add(ph)
        done_s, done_e = np.zeros(0), np.zeros(0)
        try:
            step_no = int(nm[srow].split("#", 1)[1])
        except (IndexError, ValueError):
            step_no = len({r["step"] for r in rows})
        span = max(s1 - s0, 1e-9)
        for ph, (a, b) in phases.items():
            a_s, a_e = _union_intervals(np.array(a), np.array(b))
            got = _subtract(a_s, a_e, done_s, done_e)
            done_s, done_e = _union_intervals(np.concatenate([done_s, a_s]), np.concatenate([done_e, a_e]))
            rows.append({"step": step_no, "phase": ph, "ms": got / 1e3, "fraction": got / span})
        inside = float((done_e - done_s).sum())
        rows.append({"step": step_no, "phase": "other", "ms": max(span - inside, 0.0) / 1e3,
                     "fraction": max(span - inside, 0.0) / span})
        total += span
        covered += inside
    cover = covered / total if total else 0.0
    if len(user_names) < 2 or cover < ANNOTATION_MIN_COVER:
        empty.attrs["cover"] = cover
        return empty
    out = pd.DataFrame(rows, columns=cols)
    out["step"] = out["step"].astype(np.int64)
    out.attrs["cover"] = cover
    return out


def summarize_step_phases(trace) -> dict:
    """Where the steps' time goes, for ``profile-summary``: the user's annotations when the
    trace has them (``source: "annotations"``), else the built-in split of
    :func:`compute_trace_steps` (``source: "built-in"``); ``phases`` maps each phase to its
    total ``ms`` and ``fraction`` of all steps, ``note`` says what to keep in mind."""
    ann = compute_annotated_steps(trace)
    if len(ann):
        g = ann.groupby("phase", sort=False)["ms"].sum()
        tot = float(g.sum()) or 1.0
        cover = float(ann.attrs["cover"])
        n_steps = int(ann["step"].nunique())
        notes = [MSG_ANNOTATION_GAPS.format(cover=cover)] if cover < ANNOTATION_SURE_COVER else []
        if n_steps < 2:
            notes.append(MSG_ONE_STEP)
        note = "; ".join(notes) or None
        return {"source": "annotations", "steps": n_steps,
                "phases": {k: {"ms": round(float(v), 3), "fraction": round(float(v) / tot, 6)} for k, v in g.items()},
                "annotation_cover": round(cover, 6), "note": note}
    st = compute_trace_steps(trace)
    if not len(st):
        return {"source": None, "steps": 0, "phases": {}, "annotation_cover": None,
                "note": "no ProfilerStep# annotations"}
    tot = float(st["dur_ms"].sum()) or 1.0
    phases = {k: {"ms": round(float(st[f"{k}_ms"].sum()), 3), "fraction": round(float(st[f"{k}_ms"].sum()) / tot, 6)}
              for k in ("data", "forward", "backward", "optimizer", "other")}
    return {"source": "built-in", "steps": int(len(st)), "phases": phases, "annotation_cover": None,
            "note": "phases guessed from torch's own event names (forward: every other operator "
                    "on the step's thread); annotate yours with record_function to split them"}
