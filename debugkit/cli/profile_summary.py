"""``debugkit profile-summary PATH [--json]``: top functions of a profile, or top
operators of a torch.profiler trace."""

from __future__ import annotations

from ._output import print_json, print_table


def register(sub) -> None:
    p = sub.add_parser(
        "profile-summary", help="summarise a profile file (py-spy speedscope/raw, chrome trace)",
        description="Print the samples, threads and top functions (self and total) of a sampled "
                    "profile, or the events and top operators of a torch.profiler chrome trace. "
                    "PATH is a profile file, or a run directory with --profile ID (the run's "
                    "only or latest profile without it).")
    p.add_argument("path", metavar="PATH", help="profile file (.json, .json.gz, .txt) or run directory")
    p.add_argument("--profile", default=None, help="with a run directory: which profile (its id)")
    p.add_argument("--top", type=int, default=20, help="how many functions/operators (default 20)")
    p.add_argument("--by", choices=["frame", "function"], default="frame",
                   help="sampled profiles: one row per frame (name, file, line: default) or per function")
    p.add_argument("--threads", choices=["all", "main", "thread", "dataloader", "process"], default="all",
                   help="sampled profiles: which threads the top lists count (default all; "
                        "main = the training thread, dataloader = worker processes)")
    p.add_argument("--idle", action="store_true",
                   help="sampled profiles: keep waiting threads' samples (Condition.wait, select, "
                        "socket.accept, queue get ...) in the self-time list; by default they are left "
                        "out and counted under 'idle'")
    p.add_argument("--include-last-step", action="store_true",
                   help="chrome traces: count the last ProfilerStep in the GPU idle share (HTA's "
                        "include_last_profiler_step; by default it is left out, as HTA does)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def summarize(path, profile_id=None, top=20, by="frame", threads="all", include_last_step=False,
              idle=False) -> dict:
    from pathlib import Path

    from ..errors import InvalidInputError
    from ..io.profile_types import SampledProfile, StackDump
    from ..io.run_profiles import get_profile, read_any, read_entry

    if top < 1:
        raise InvalidInputError(f"--top {top}: expected a positive number")
    p = Path(path).expanduser()
    if p.is_dir() or p.suffix.lower() == ".zip":
        from ..io.run import open_run

        r = open_run(p)
        if profile_id:
            entry = get_profile(r, profile_id)
        else:
            entries = r.profiles()
            if not entries:
                raise InvalidInputError(f"{p}: the run holds no profiles (record one with "
                                        f"`debugkit profile {p} -- python train.py`)")
            entry = entries[-1]
        obj = read_entry(entry)
        where = {"run": str(r.path), "profile": entry["id"]}
        pyspy = entry.get("pyspy") or {}
    else:
        if profile_id:
            raise InvalidInputError("--profile only applies to a run directory")
        obj = read_any(p)
        where = {"file": str(p)}
        pyspy = {}
    if isinstance(obj, SampledProfile):
        from ..analysis.profile import summarize_profile

        ids = None
        if threads != "all":
            ids = obj.thread_ids(threads)
            if not ids:
                raise InvalidInputError(f"--threads {threads}: the profile has no such threads "
                                        f"(it has: {', '.join(sorted(set(obj.threads['role'])))})")
        out = summarize_profile(obj, top=top, by=by, thread_ids=ids, include_idle=idle)
        out["threads_counted"] = threads
        from ..analysis.profile import explain_sample_count

        # py-spy's own "Samples: N" against what is shown (None for an imported file).
        out["sample_count"] = explain_sample_count(pyspy.get("samples_reported"), obj,
                                                   pyspy.get("errors_reported"))
    elif isinstance(obj, StackDump):
        out = {"format": "pyspy-dump", "threads": obj.threads.drop(columns=["thread"]).to_dict("records")}
    else:
        from ..analysis.trace import summarize_trace

        out = summarize_trace(obj, top=top, include_last_step=include_last_step)
    return {**out, **where}


def run(args) -> int:
    s = summarize(args.path, args.profile, args.top, args.by, args.threads,
                  include_last_step=args.include_last_step, idle=args.idle)
    if args.json:
        print_json(s)
        return 0
    if s["format"] == "chrome-trace":
        print(f"chrome trace: {s['events']:,} events, {s['window_ms']:.1f} ms window, "
              f"{len(s['threads'])} threads/streams")
        gpu = s["gpu"]
        if gpu["idle_fraction"] is not None:
            per = ", ".join(f"GPU {d['device']} {d['idle_fraction']:.2%}" for d in gpu["devices"])
            print(f"GPU idle: {gpu['idle_fraction']:.2%} ({per})")
            print(f"  {gpu['idle_note']}")
        sp = s.get("step_phases") or {}
        if sp.get("phases"):
            how = "your annotations" if sp["source"] == "annotations" else "built-in phases"
            parts = ", ".join(f"{k} {p['fraction']:.0%}" for k, p in sp["phases"].items() if p["fraction"] >= 0.005)
            print(f"steps ({sp['steps']}, {how}): {parts}")
            if sp.get("note"):
                print(f"  note: {sp['note']}")
        print("\ntop operators by self CPU time:")
        print_table([{**r, "fraction": f"{r['fraction']:.1%}"} for r in s["top_self"]],
                    ["name", "calls", "self_cpu_us", "cpu_total_us", "self_cuda_us", "fraction"])
        return 0
    if s["format"] == "pyspy-dump":
        print_table(s["threads"], ["pid", "tid", "name", "active", "waiting_in", "leaf"])
        return 0
    dur = f", {s['duration_s']:.1f} s" if s.get("duration_s") else ""
    print(f"{s['format']}: {s['samples']:,} samples{dur}, {len(s['threads'])} threads")
    if s.get("sample_count"):
        print(s["sample_count"]["note"])
    idle = s.get("idle") or {}
    for title, key in (("self", "top_self"), ("total", "top_total")):
        print(f"\ntop {title}:")
        if key == "top_self" and idle.get("samples") and not idle.get("included_in_top_self"):
            print(f"(idle samples left out: {idle['samples']:,}, {idle['fraction']:.1%}, waiting in "
                  + ", ".join(r["name"] for r in idle["top"][:3]) + "; --idle shows them)")
        print_table([{**r, "fraction": f"{r['fraction']:.1%}",
                      "where": f"{r['file']}:{r['line']}" if r["line"] else r["file"]} for r in s[key]],
                    ["samples", "fraction", "name", "where"])
    sb = s.get("step_breakdown") or {}
    if sb.get("loop"):
        parts = ", ".join(f"{k} {v['fraction']:.0%}" for k, v in sb["phases"].items())
        print(f"\ntraining loop ({sb['loop']}): {parts}")
    if sb.get("summary") and (sb.get("loop") or sb.get("workers_only")):
        print(sb["summary"])
    wk = s.get("workers") or {}
    if wk.get("top") and not sb.get("waiting_for_data") and not sb.get("workers_only"):
        r = wk["top"][0]
        print(f"DataLoader workers' top function: {r['name']} ({r['busy_fraction']:.0%} of their busy samples)")
    return 0
