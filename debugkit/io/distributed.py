"""Read the distributed side of a run: each rank's process facts and its hang dumps.

Works on local runs and on fsspec URLs alike (it only uses the run's path object).
"""

from __future__ import annotations

import re

from .. import format as fmt
from ..errors import RunDirError
from ..runschema import read_run_json

_SAFE_NAME = re.compile(r"^[0-9]+-s[0-9]+-[0-9]+(\.pyspy)?\.(txt|json)$")


def read_rank_info(run):
    """One row per rank: where it ran and how it ended.

    Returns
    -------
    DataFrame with columns ``rank`` (int), ``host``, ``local_rank``, ``node_rank``,
    ``pid``, ``device``, ``backend``, ``world_size``, ``status`` (``running | finished
    | failed | crashed``), ``heartbeat_step`` (the step the rank was at when it last
    wrote its heartbeat), ``heartbeat_time`` (seconds since the epoch),
    ``segments`` (writer sessions) and ``crash_reason`` (for a crashed rank: ``process
    gone`` when its pid was checked on this host, ``heartbeat stale`` when it could not
    be, ``no heartbeat``; else None).
    """
    import pandas as pd

    rows = []
    hbs = run.heartbeats()
    for r in run.ranks:
        meta = run.rank_meta(r)
        hb = hbs.get(r, {})
        segs = [p.name for p in (run.path / fmt.RANKS_DIR / str(r)).iterdir()
                if fmt.META_FILE.match(p.name)]
        rows.append({
            "rank": r, "host": meta.get("host") or hb.get("host"),
            "local_rank": meta.get("local_rank"), "node_rank": meta.get("node_rank"),
            "pid": meta.get("pid") or hb.get("pid"), "device": meta.get("device"),
            "backend": meta.get("backend"), "world_size": meta.get("world_size"),
            "status": run._judge_heartbeat(hb), "heartbeat_step": hb.get("step"),
            "heartbeat_time": hb.get("time"), "segments": len(segs),
            "crash_reason": _crash_reason(run, hb),
        })
    cols = ["rank", "host", "local_rank", "node_rank", "pid", "device", "backend", "world_size",
            "status", "heartbeat_step", "heartbeat_time", "segments", "crash_reason"]
    return pd.DataFrame(rows, columns=cols)


def _crash_reason(run, hb: dict) -> str | None:
    """Why ``run._judge_heartbeat`` calls this heartbeat's rank crashed (None if it does not)."""
    import socket
    import time

    from .run import _pid_alive

    if run._judge_heartbeat(hb) != fmt.STATE_CRASHED:
        return None
    if hb.get("state") != fmt.STATE_RUNNING:
        return "no heartbeat"
    if hb.get("host") == socket.gethostname() and isinstance(hb.get("pid"), int) \
            and not _pid_alive(hb["pid"], hb.get("process_start_ticks")):
        return "process gone"
    return "heartbeat stale" if time.time() > float(hb.get("time") or 0) else "process gone"


def read_hangs(run) -> list[dict]:
    """Every hang dump the watchdog wrote, oldest first.

    Each record is the dump's JSON (``rank, segment, time, reason, trigger_rank,
    trigger_step, in_step, step, last_step, elapsed_s, timeout_s, pid, train_thread,
    threads, files, pyspy_error``; see docs/run-format.md) plus ``id``
    (``r<rank>/<stem>``). An unreadable dump is skipped and noted in ``run.warnings``.
    """
    out = []
    for r in run.ranks:
        d = run.path / fmt.RANKS_DIR / str(r) / fmt.HANGS_DIR
        try:
            if not d.is_dir():
                continue
            names = sorted(p.name for p in d.iterdir())
        except OSError:
            continue
        for name in names:
            if not fmt.HANG_DUMP_FILE.match(name):
                continue
            try:
                rec = read_run_json(d / name, "hang dump")
            except (OSError, ValueError) as exc:
                run.warnings.append(f"{d / name}: unreadable hang dump skipped ({exc})")
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("threads"), list):
                run.warnings.append(f"{d / name}: hang dump without a thread list skipped")
                continue
            rec["rank"] = r
            rec["id"] = f"r{r}/{name[:-5]}"
            out.append(rec)
    out.sort(key=lambda h: (h.get("time") or 0, h["rank"]))
    return out


def read_hang_file(run, rank: int, name: str) -> str:
    """The text of one file of a hang dump (``<stem>.txt`` faulthandler output or
    ``<stem>.pyspy.txt``); ``name`` is checked against the dump naming scheme."""
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise RunDirError(f"hang dump file {name!r}: expected a name like '000-s0000012-1.txt'")
    p = run.path / fmt.RANKS_DIR / str(int(rank)) / fmt.HANGS_DIR / name
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RunDirError(f"{p}: cannot read the hang dump ({exc})") from exc


_FH_THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-fA-F]+)")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def parse_faulthandler(text: str) -> dict:
    """The signal and threads of a faulthandler dump.

    Returns
    -------
    dict with ``signal`` (``Aborted``, ``Segmentation fault``, ... or None), ``threads``
    (a list of ``{"id", "current", "frames"}``, each frame ``{"file", "line",
    "function"}`` innermost first, as faulthandler prints them).
    """
    sig = None
    m = re.search(r"Fatal Python error: ([^\n]+)", text)
    if m:
        sig = m.group(1).strip()
    threads: list[dict] = []
    for line in text.splitlines():
        t = _FH_THREAD.match(line)
        if t:
            threads.append({"id": t.group("id"), "current": t.group("current") == "Current thread",
                            "frames": []})
            continue
        f = _FH_FRAME.match(line)
        if f and threads:
            threads[-1]["frames"].append({"file": f.group("file"), "line": int(f.group("line")),
                                          "function": f.group("func")})
    return {"signal": sig, "threads": threads}


def read_fatal_stacks(run) -> dict[int, dict]:
    """Per rank, the stacks faulthandler wrote when a fatal signal killed it.

    Reads ``ranks/<r>/fatal-<segment>.txt`` (the newest non-empty one per rank). Each
    value is :func:`parse_faulthandler`'s dict plus ``segment`` and ``file`` (the file
    name). Ranks without such a file are absent.
    """
    out: dict[int, dict] = {}
    for r in run.ranks:
        d = run.path / fmt.RANKS_DIR / str(r)
        try:
            names = sorted(p.name for p in d.iterdir() if fmt.FATAL_FILE_RE.match(p.name))
        except OSError:
            continue
        for name in reversed(names):
            try:
                text = (d / name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if not text.strip():
                continue
            rec = parse_faulthandler(text)
            rec.update(segment=int(fmt.FATAL_FILE_RE.match(name).group("seg")), file=name)
            out[r] = rec
            break
    return out
