"""Read the distributed side of a run: each rank's process facts and its hang dumps.

Works on local runs and on fsspec URLs alike (it only uses the run's path object).
"""

from __future__ import annotations

import json
import re

from .._fsutil import read_json
from .. import format as fmt
from ..errors import RunDirError

HANGS_DIR = "hangs"
_DUMP = re.compile(r"^(?P<seg>\d+)-s(?P<step>\d+)-(?P<n>\d+)\.json$")
_SAFE_NAME = re.compile(r"^[0-9]+-s[0-9]+-[0-9]+(\.pyspy)?\.(txt|json)$")


def read_rank_info(run):
    """One row per rank: where it ran and how it ended.

    Returns
    -------
    DataFrame with columns ``rank`` (int), ``host``, ``local_rank``, ``node_rank``,
    ``pid``, ``device``, ``backend``, ``world_size``, ``status`` (``running | finished
    | failed | crashed``), ``heartbeat_step`` (the step the rank was at when it last
    wrote its heartbeat), ``heartbeat_time`` (seconds since the epoch) and
    ``segments`` (writer sessions).
    """
    import pandas as pd

    rows = []
    hbs = run.heartbeats()
    for r in run.ranks:
        meta = run.rank_meta(r)
        hb = hbs.get(r, {})
        segs = [p.name for p in (run.path / fmt.RANKS_DIR / str(r)).iterdir()
                if p.name.startswith("meta-")]
        rows.append({
            "rank": r, "host": meta.get("host") or hb.get("host"),
            "local_rank": meta.get("local_rank"), "node_rank": meta.get("node_rank"),
            "pid": meta.get("pid") or hb.get("pid"), "device": meta.get("device"),
            "backend": meta.get("backend"), "world_size": meta.get("world_size"),
            "status": run._judge_heartbeat(hb), "heartbeat_step": hb.get("step"),
            "heartbeat_time": hb.get("time"), "segments": len(segs),
        })
    cols = ["rank", "host", "local_rank", "node_rank", "pid", "device", "backend", "world_size",
            "status", "heartbeat_step", "heartbeat_time", "segments"]
    return pd.DataFrame(rows, columns=cols)


def read_hangs(run) -> list[dict]:
    """Every hang dump the watchdog wrote, oldest first.

    Each record is the dump's JSON (``rank, segment, time, reason, trigger_rank,
    trigger_step, in_step, step, last_step, elapsed_s, timeout_s, pid, train_thread,
    threads, files, pyspy_error``; see docs/run-format.md) plus ``id``
    (``r<rank>/<stem>``). An unreadable dump is skipped and noted in ``run.warnings``.
    """
    out = []
    for r in run.ranks:
        d = run.path / fmt.RANKS_DIR / str(r) / HANGS_DIR
        try:
            if not d.is_dir():
                continue
            names = sorted(p.name for p in d.iterdir())
        except OSError:
            continue
        for name in names:
            if not _DUMP.match(name):
                continue
            try:
                rec = read_json(d / name)
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
    p = run.path / fmt.RANKS_DIR / str(int(rank)) / HANGS_DIR / name
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise RunDirError(f"{p}: cannot read the hang dump ({exc})") from exc
