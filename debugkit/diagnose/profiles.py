"""Findings from a run's profiles: a DataLoader-bound training loop (py-spy), every
thread idle in a stack dump (a hang)."""

from __future__ import annotations

from ..analysis.findings import Finding
from ..errors import DebugkitError


def collect(run, config: dict) -> list[Finding]:
    """Config: ``data_wait_threshold`` (default 0.3: 30 % of the loop in data loading)."""
    from ..analysis.profile import compute_step_breakdown, compute_worker_hotspots, detect_data_wait
    from ..io.profile_types import SampledProfile, StackDump
    from ..io.run_profiles import read_entry

    out: list[Finding] = []
    entries = run.profiles()
    sampled = [e for e in entries if e["kind"] == "sampled"]
    for e in sampled[-1:]:  # the latest profile says how the run trains now
        try:
            prof = read_entry(e)
        except DebugkitError as exc:
            out.append(Finding("unreadable_profile", None, None, None, "info",
                               f"Profile {e['id']} could not be read: {exc}", {"profile": e["id"]}))
            continue
        if isinstance(prof, SampledProfile):
            main = prof.thread_ids("main")
            bd, info = compute_step_breakdown(prof, main or None)
            out += detect_data_wait(bd, info, e["id"], float(config.get("data_wait_threshold", 0.3)),
                                    workers=compute_worker_hotspots(prof))
    for e in [e for e in entries if e["kind"] == "stacks"][-1:]:
        try:
            dump = read_entry(e)
        except DebugkitError:
            continue
        if isinstance(dump, StackDump) and len(dump.threads) and not dump.threads["active"].any():
            waits = dump.threads.loc[dump.threads["waiting_in"] != "", "waiting_in"].value_counts()
            what = ", ".join(f"{n} in {w}" for w, n in waits.items()) or "no Python-level wait seen"
            out.append(Finding(
                kind="hang", step=None, rank=None, layer=None, severity="warning",
                message=(f"Stack dump {e['id']}: all {len(dump.threads)} threads were idle when it was "
                         f"taken ({what}): the process looked hung. See the Profiler page for the stacks."),
                evidence={"dump": e["id"], "threads": int(len(dump.threads)), "waiting": waits.to_dict()}))
    return out
