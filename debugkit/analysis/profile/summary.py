"""One profile summarized as JSON-able rows (``debugkit profile --summary``), and why the
sample count shown may differ from the one py-spy reported.
"""

from __future__ import annotations

from .data_wait import describe_breakdown
from .functions import compute_function_table
from .idle import idle_stacks
from .selection import _opt_int, select
from .steps import compute_step_breakdown
from .workers import _worker_rows, compute_worker_hotspots


def thread_rows(profile) -> list[dict]:
    """The threads as JSON-able rows: ``id, name, pid, tid, role, process, samples``."""
    out = []
    for t in profile.threads.itertuples():
        out.append({"id": int(t.thread_id), "name": t.name, "pid": _opt_int(t.pid), "tid": _opt_int(t.tid),
                    "role": t.role, "process": t.process, "samples": int(t.samples)})
    return out


def compute_idle_summary(profile, thread_ids=None, top: int = 5) -> dict:
    """Idle samples of the threads (innermost frame a blocking call, :data:`IDLE_LEAVES`):
    ``{"samples", "fraction", "top": [{name, file, line, samples, fraction}]}``."""
    sel = select(profile, thread_ids, "frame")
    idle = idle_stacks(sel)
    n = int(sel.samples[idle].sum())
    full = compute_function_table(profile, thread_ids, "frame")
    busy = compute_function_table(profile, thread_ids, "frame", include_idle=False)
    b = busy.set_index(["name", "file", "line"])["self_samples"] if len(busy) else None
    rows = []
    for r in full.itertuples():
        left = r.self_samples - (int(b.get((r.name, r.file, r.line), 0)) if b is not None else 0)
        if left > 0:
            rows.append({"name": r.name, "file": r.file, "line": _opt_int(r.line), "samples": int(left),
                         "fraction": round(left / max(sel.total_samples, 1), 6)})
        if len(rows) >= top:
            break
    return {"samples": n, "fraction": round(n / max(sel.total_samples, 1), 6), "top": rows}


def summarize_profile(profile, top: int = 20, by: str = "frame", thread_ids=None,
                      include_idle: bool = False) -> dict:
    """The ``debugkit profile-summary --json`` document of a sampled profile.

    ``top_self`` leaves idle samples out unless ``include_idle`` (``idle`` says how many
    there were and where they wait); ``top_total`` counts every sample."""
    table = compute_function_table(profile, thread_ids, by, include_idle=include_idle)
    table_all = table if include_idle else compute_function_table(profile, thread_ids, by)
    total = int(select(profile, thread_ids, by).total_samples)

    def rows(df, col, frac):
        return [{"name": r.name, "file": r.file, "line": _opt_int(r.line),
                 "samples": int(getattr(r, col)), "fraction": round(float(getattr(r, frac)), 6)}
                for r in df.head(top).itertuples()]

    by_total = table_all.sort_values(["total_samples", "self_samples", "name"], ascending=[False, False, True],
                                     kind="stable")
    main = profile.thread_ids("main") if thread_ids is None else list(thread_ids)
    bd, info = compute_step_breakdown(profile, main or None)
    workers = compute_worker_hotspots(profile)
    data = float(bd.loc[bd["phase"] == "data", "fraction"].iloc[0]) if info["loop_samples"] else 0.0
    return {
        "format": profile.format,
        "samples": total,
        "threads": thread_rows(profile),
        "duration_s": profile.meta.get("duration_s"),
        "rate_hz": profile.meta.get("rate_hz"),
        "top_self": rows(table, "self_samples", "self_fraction"),
        "top_total": rows(by_total, "total_samples", "total_fraction"),
        "step_breakdown": {
            "threads": ("main" if thread_ids is None else "selected") if main else "all",
            "loop": info["loop"],
            "phases": {r.phase: {"samples": int(r.samples), "fraction": round(float(r.fraction), 6),
                                 "seconds": round(float(r.seconds), 6)} for r in bd.itertuples()},
            "loop_samples": int(info["loop_samples"]),
            "workers_only": bool(info["workers_only"]),
            "summary": describe_breakdown(bd, info, workers if data >= 0.3 or info["workers_only"] else None),
            "waiting_for_data": data >= 0.3,
        },
        "idle": {**compute_idle_summary(profile, thread_ids), "included_in_top_self": include_idle},
        "workers": {"samples": int(workers.attrs["worker_samples"]), "busy_samples": int(workers.attrs["busy_samples"]),
                    "top": _worker_rows(workers)},
    }


MSG_COUNT_AGREES = "py-spy reported {reported:,} samples; all {shown:,} are shown."
MSG_COUNT_LAUNCHER = ("py-spy reported {reported:,} samples: {shown:,} of the profiled program are "
                      "shown, and {launcher:,} of debugkit's own launcher process (the `debugkit "
                      "profile` wrapper waiting for your script) are left out.")
MSG_COUNT_UNEXPLAINED = (" {unexplained:,} samples py-spy counted are not in the file it wrote "
                         "(samples it could not read: it reported {errors:,} errors).")
MSG_COUNT_UNEXPLAINED_EXTRA = (" The file holds {unexplained:,} samples more than py-spy reported.")


def explain_sample_count(reported, profile, errors=None) -> dict | None:
    """Reconcile the sample count py-spy printed with the one the page shows.

    ``reported`` is py-spy's own "Samples: N" (kept by ``debugkit profile`` as
    ``pyspy.samples_reported``); ``profile`` the parsed profile, whose ``meta`` records
    how many samples the file held and how many were debugkit's launcher's. Returns
    ``{reported, in_file, launcher, shown, unexplained, note}``, or None when py-spy's
    count was not recorded (an imported file)."""
    if reported is None:
        return None
    reported = int(reported)
    shown = int(profile.total_samples)
    in_file = int(profile.meta.get("samples_in_file", shown))
    launcher = int(profile.meta.get("launcher_samples", in_file - shown))
    unexplained = reported - in_file
    if launcher:
        note = MSG_COUNT_LAUNCHER.format(reported=reported, shown=shown, launcher=launcher)
    else:
        note = MSG_COUNT_AGREES.format(reported=reported, shown=shown) if not unexplained else \
            f"py-spy reported {reported:,} samples; {shown:,} are shown."
    if unexplained > 0:
        note += MSG_COUNT_UNEXPLAINED.format(unexplained=unexplained, errors=int(errors or 0))
    elif unexplained < 0:
        note += MSG_COUNT_UNEXPLAINED_EXTRA.format(unexplained=-unexplained)
    return {"reported": reported, "in_file": in_file, "launcher": launcher, "shown": shown,
            "unexplained": unexplained, "note": note}
