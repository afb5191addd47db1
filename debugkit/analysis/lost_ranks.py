"""Ranks that died or fell behind, and the collective errors they cause on the others.

When one rank of a job dies (killed by a signal, the OOM killer, NCCL's watchdog abort),
it writes nothing more: the errors a user sees come from the *other* ranks, whose next
collective fails ("Connection closed by peer", a timeout). These pure functions name the
rank that went away (``rank_crashed``: its process is gone without a close record;
``rank_lost``: it is behind the others, which have ended, and writes no more) so that
it comes before the symptoms, and read torch.distributed's error texts (gloo, NCCL,
``TORCH_DISTRIBUTED_DEBUG=DETAIL``) for the collective and the ranks they name.

The message texts recognised are PyTorch's own (``ProcessGroupNCCL.cpp``'s watchdog
timeout, ``TraceUtils.h``'s desync report, ``ProcessGroupWrapper.cpp``'s fingerprint
mismatch) and gloo's (``transport/tcp/pair.cc``, ``unbound_buffer.cc``).
"""

from __future__ import annotations

import math
import re

from .._fsutil import in_debugkit
from .findings import Finding

#: (kind, regex) for the error texts of torch.distributed's backends, most specific first.
_NCCL_TIMEOUT = re.compile(
    r"(?:\[Rank (?P<rank>\d+)\]\s*)?Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?P<rest>[^\n]*?)\) ran for (?P<ran>\d+) milliseconds")
_NCCL_TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(?P<ms>\d+)")
_MISSING = re.compile(r"ranks \[(?P<ranks>[\d, ]+)\] are the lagging ranks that caused this timeout")
_JOINED = re.compile(r"\[(?P<ranks>[\d, ]+)\] joined but didn't finish collective #(?P<seq>\d+)")
_MISMATCH = re.compile(
    r"Detected mismatch between collectives on ranks\. Rank (?P<a>\d+) is running collective: "
    r"(?P<fa>.*?), but Rank (?P<b>\d+) is running collective: (?P<fb>.*?)\.(?:\s|$)", re.S)
_OPTYPE = re.compile(r"OpType=(?P<op>\w+)")
_SEQNO = re.compile(r"SequenceNumber=(?P<seq>\d+)")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<dir>send|recv) operation to complete")
_GLOO_CLOSED = re.compile(r"Connection closed by peer \[(?P<peer>[^\]]+)\]:(?P<port>\d+)")
_GLOO_RESET = re.compile(r"(?:Read|Write) error \[(?P<peer>[^\]]+)\]:(?P<port>\d+): Connection reset by peer")
_GLOO_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\. (?P<got>\d+) vs (?P<want>\d+)")
_C10D_FRAME = re.compile(r'distributed_c10d\.py", line \d+, in (?P<func>\w+)')

KIND_TEXT = {
    "timeout": "timed out",
    "peer_closed": "lost its connection: the peer closed it (a remote rank crashed or exited)",
    "peer_reset": "lost its connection: reset by the peer (a remote rank crashed)",
    "mismatch": "found ranks in different collectives",
    "size_mismatch": "received a message of another size than it expected (the ranks were in "
                     "different collectives, or the same one with different tensor sizes)",
}


def _ranks(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def parse_collective_error(message: str | None, traceback: str | None = None) -> dict | None:
    """What a torch.distributed error text says, or None when it is not one.

    Returns
    -------
    dict with ``backend`` (``nccl | gloo | None``), ``kind`` (``timeout | peer_closed |
    peer_reset | mismatch | size_mismatch``), ``collective`` (``ALLREDUCE`` from NCCL's
    text, or the ``torch.distributed`` function on the traceback, e.g. ``all_reduce``;
    None when neither says), ``ranks`` (the ranks the text names: the reporting rank,
    the other side of a mismatch, the lagging ranks of NCCL's desync report),
    ``lagging_ranks``, ``seq`` (collective sequence number), ``timeout_ms``, ``peer``
    (``host:port`` of the lost connection) and ``collectives`` (rank -> collective, for
    a mismatch).
    """
    text = str(message or "")
    out = {"backend": None, "kind": None, "collective": None, "ranks": [], "lagging_ranks": [],
           "seq": None, "timeout_ms": None, "peer": None, "collectives": {}}
    m = _NCCL_TIMEOUT.search(text)
    if m:
        ms = _NCCL_TIMEOUT_MS.search(m.group("rest") or "")
        out.update(backend="nccl", kind="timeout", collective=m.group("op"), seq=int(m.group("seq")),
                   timeout_ms=int(ms.group("ms")) if ms else None)
        if m.group("rank"):
            out["ranks"].append(int(m.group("rank")))
    mm = _MISMATCH.search(text)
    if mm and out["kind"] is None:
        a, b = int(mm.group("a")), int(mm.group("b"))
        ops = {a: _OPTYPE.search(mm.group("fa")), b: _OPTYPE.search(mm.group("fb"))}
        seq = _SEQNO.search(mm.group("fa"))
        out.update(kind="mismatch", ranks=[a, b], seq=int(seq.group("seq")) if seq else None,
                   collectives={r: (o.group("op") if o else None) for r, o in ops.items()})
        out["collective"] = out["collectives"].get(a)
    if out["kind"] is None:
        for kind, rx in (("timeout", _GLOO_TIMEOUT), ("peer_closed", _GLOO_CLOSED),
                         ("peer_reset", _GLOO_RESET), ("size_mismatch", _GLOO_SIZE)):
            g = rx.search(text)
            if g:
                out.update(backend="gloo", kind=kind)
                if kind == "timeout":
                    out["timeout_ms"] = int(g.group("ms"))
                if "peer" in g.groupdict():
                    out["peer"] = f"{g.group('peer')}:{g.group('port')}"
                break
    if out["kind"] is None:
        return None
    if out["backend"] is None and ("gloo" in text.lower() or "nccl" in text.lower()):
        out["backend"] = "gloo" if "gloo" in text.lower() else "nccl"
    lag = _MISSING.search(text)
    if lag:
        out["lagging_ranks"] = _ranks(lag.group("ranks"))
    else:
        joined = _JOINED.search(text)
        if joined:
            out["lagging_ranks"] = _ranks(joined.group("ranks"))
            out["seq"] = out["seq"] or int(joined.group("seq"))
    out["ranks"] = sorted(set(out["ranks"]) | set(out["lagging_ranks"]))
    if out["collective"] is None and traceback:
        funcs = [f for f in _C10D_FRAME.findall(str(traceback)) if f != "wrapper"]
        if funcs:
            out["collective"] = funcs[-1]
    return out


def describe_collective_error(info: dict) -> str:
    """One clause for a :func:`parse_collective_error` result."""
    what = KIND_TEXT.get(info["kind"], info["kind"])
    coll = f" in {info['collective']}" if info.get("collective") else ""
    seq = f" (collective #{info['seq']})" if info.get("seq") is not None else ""
    text = f"{info.get('backend') or 'the process group'}{coll}{seq} {what}"
    if info.get("timeout_ms") is not None and info["kind"] == "timeout":
        text += f" after {info['timeout_ms']} ms"
    if info.get("collectives"):
        text += " (" + ", ".join(f"rank {r}: {op or '?'}" for r, op in info["collectives"].items()) + ")"
    if info.get("lagging_ranks"):
        text += f"; it names rank(s) {', '.join(map(str, info['lagging_ranks']))} as lagging"
    return text


# ------------------------------------------------------------------------------ stacks
def _is_library(path: str) -> bool:
    p = str(path).replace("\\", "/")
    return ("site-packages/" in p or "dist-packages/" in p or "/lib/python3" in p
            or in_debugkit(p) or p.startswith("<"))


def summarize_stack(fatal: dict | None) -> dict | None:
    """The current thread of a fatal-signal dump (:func:`debugkit.io.distributed.read_fatal_stacks`):
    its innermost project frame (``where``), innermost torch.distributed function
    (``collective``) and the signal."""
    if not fatal:
        return None
    threads = fatal.get("threads") or []

    def has_project(t):
        return any(not _is_library(f["file"]) for f in t["frames"])

    def in_c10d(t):
        return any(f["file"].replace("\\", "/").endswith("distributed_c10d.py") for f in t["frames"])

    # The thread that raised the signal can be a helper (a timer, NCCL's watchdog): the
    # training thread is the one in a collective, else the one in the user's code.
    cur = (next((t for t in threads if in_c10d(t) and has_project(t)), None)
           or next((t for t in threads if t.get("current") and has_project(t)), None)
           or next((t for t in threads if has_project(t)), None)
           or next((t for t in threads if t.get("current")), threads[0] if threads else None))
    frames = (cur or {}).get("frames") or []
    project = next((f for f in frames if not _is_library(f["file"])), None)
    c10d = next((f["function"] for f in frames if f["file"].replace("\\", "/").endswith(
        "distributed_c10d.py") and f["function"] != "wrapper"), None)
    return {"signal": fatal.get("signal"), "file": fatal.get("file"),
            "where": (f"{project['file']}:{project['line']} in {project['function']}" if project else None),
            "where_line": (f"{project['file'].rsplit('/', 1)[-1]}:{project['line']}" if project else None),
            "collective": c10d, "thread": (cur or {}).get("id"), "frames": frames[:30]}


def _traceback_site(tb: str | None) -> str | None:
    """The innermost project frame of a Python traceback, ``file.py:line``."""
    sites = [(f, ln) for f, ln in re.findall(r'File "([^"]+)", line (\d+)', str(tb or ""))
             if not _is_library(f)]
    return f"{sites[-1][0].rsplit('/', 1)[-1]}:{sites[-1][1]}" if sites else None


# ------------------------------------------------------------------------------ detector
def _num(v):
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


SIGNALS = {"Aborted": "SIGABRT", "Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS",
           "Floating-point exception": "SIGFPE", "Illegal instruction": "SIGILL"}


def detect_lost_ranks(info, times, *, failures: list[dict] | None = None,
                      events: list[dict] | None = None, fatal: dict | None = None) -> list[Finding]:
    """``rank_crashed`` and ``rank_lost`` findings (severity error).

    Parameters
    ----------
    info : DataFrame
        :func:`debugkit.io.distributed.read_rank_info` (``rank, status, heartbeat_step,
        heartbeat_time, pid, world_size, crash_reason``).
    times : DataFrame
        :func:`debugkit.analysis.distributed.compute_rank_step_times` (``step, rank, ok``).
    failures, events : list of dict
        :meth:`Run.failures` and :meth:`Run.events`.
    fatal : dict
        rank -> :func:`debugkit.io.distributed.read_fatal_stacks` record.

    ``rank_crashed``: the rank's process is gone (or its heartbeat went stale) without a
    close record. ``rank_lost``: a rank still ``running`` whose last step is behind every
    other rank while those have all ended (it may be stuck or slow: the finding says it
    is unsure), or a rank of the job's world size that never wrote a rank folder.
    The finding's ``step`` is the step the rank was in when it last wrote its heartbeat;
    evidence lists the other ranks' collective errors it explains (``symptoms``).
    """
    failures = failures or []
    events = events or []
    fatal = fatal or {}
    if info is None or len(info) < 1:
        return []
    rows = info.to_dict("records")
    done = {}
    if times is not None and len(times):
        ok = times[times["ok"].astype(bool)]
        done = {int(r): int(s) for r, s in ok.groupby("rank")["step"].max().items()}
    ended = {int(r["rank"]): r["status"] != "running" for r in rows}
    reach = {}
    for r in rows:
        rk = int(r["rank"])
        hb = _num(r.get("heartbeat_step"))
        reach[rk] = max([v for v in (hb, done.get(rk)) if v is not None], default=None)
    out = []
    for r in rows:
        rk = int(r["rank"])
        status = r["status"]
        others = [o for o in reach if o != rk]
        if status == "crashed":
            kind = "rank_crashed"
        elif status == "running" and others and all(ended[o] for o in others) \
                and reach[rk] is not None and all(reach[o] is not None and reach[o] > reach[rk]
                                                  for o in others):
            kind = "rank_lost"
        else:
            continue
        out.append(_lost_finding(kind, r, done.get(rk), failures, events, fatal.get(rk)))
    out = _first_death_first(out)
    for i, f in enumerate(out):
        f.evidence["order"] = i
    world = max([_num(r.get("world_size")) or 0 for r in rows], default=0)
    present = {int(r["rank"]) for r in rows}
    for rk in range(world):
        if rk not in present and len(present) > 0:
            out.append(Finding(
                kind="rank_lost", step=None, rank=rk, layer=None, severity="error",
                message=(f"Rank {rk} of the job's {world} never wrote to this run (no rank folder): it "
                         "died or hung before creating its Recorder, or wrote elsewhere. Look at "
                         "that rank's own log."),
                evidence={"reason": "no rank folder", "world_size": world, "confidence": "probable",
                          "order": len(out),
                          "symptoms": _symptoms(rk, None, failures)}))
    return out


def _first_death_first(found: list[Finding]) -> list[Finding]:
    """Order crashed ranks by who went first: a fatal signal's stack, then the oldest last
    heartbeat. The later ones are marked as probably taken down by the launcher."""
    crashed = [f for f in found if f.kind == "rank_crashed"]
    if len(crashed) < 2:
        return found

    def key(f):
        hb = f.evidence.get("heartbeat_time")
        return (f.evidence.get("stack") is None, float(hb) if hb is not None else math.inf, f.rank)

    crashed.sort(key=key)
    first = crashed[0]
    for f in crashed[1:]:
        f.evidence["after_rank"] = first.rank
        if f.evidence.get("confidence") == "certain" and f.evidence.get("stack") is None:
            f.evidence["confidence"] = "probable"
        f.message += (f" It went away after rank {first.rank} did, so it was probably stopped because of "
                      f"rank {first.rank} (torchrun stops the other ranks when one dies; uncertain): "
                      f"start with rank {first.rank}.")
    rest = [f for f in found if f.kind != "rank_crashed"]
    return crashed + rest


def _symptoms(rank: int, since: int | None, failures: list[dict]) -> list[dict]:
    """Collective errors of the other ranks at or after ``since``."""
    out = []
    for f in failures:
        if f.get("rank") == rank:
            continue
        if since is not None and f.get("step") is not None and f["step"] < since:
            continue
        info = parse_collective_error(f.get("message"), f.get("traceback"))
        if info is None:
            continue
        out.append({"failure": f.get("id"), "rank": f.get("rank"), "step": f.get("step"),
                    "collective": info, "site": _traceback_site(f.get("traceback"))})
    return out


def _lost_finding(kind, row, last_done, failures, events, fatal) -> Finding:
    rk = int(row["rank"])
    step = _num(row.get("heartbeat_step"))
    if step is None:
        step = None if last_done is None else last_done + 1
    in_step = step is not None and (last_done is None or step > last_done)
    own = [e for e in events if e.get("rank") == rk]
    last_event = own[-1] if own else None
    stack = summarize_stack(fatal)
    symptoms = _symptoms(rk, last_done, failures)
    where = (f"in step {step}" if in_step else f"after step {step}") if step is not None else "before its first step"
    done_txt = f" (its last completed step is {last_done})" if last_done is not None and in_step else ""
    parts = []
    if kind == "rank_crashed":
        reason = row.get("crash_reason") or "heartbeat stale"
        confidence = "certain" if (reason == "process gone" or stack) else "probable"
        head = (f"Rank {rk} died {where}{done_txt} without a failure capture or a close record "
                f"({reason})")
        if stack and stack.get("signal"):
            sig = SIGNALS.get(stack["signal"], stack["signal"])
            head += f"; it was killed by {sig} ({stack['signal']})"
            if sig == "SIGABRT":
                head += ", as NCCL's watchdog or a C++ assertion (gloo's, for one) does"
        elif confidence != "certain":
            head += "; its process could not be checked from this host, so it may still be alive"
    else:
        confidence = "uncertain"
        head = (f"Rank {rk} stopped {where}{done_txt} while every other rank went further and "
                "ended; its process still looks alive, so it is stuck or very slow (uncertain "
                "which: see its hang dumps or py-spy it)")
    parts.append(head + ".")
    if stack and stack.get("where"):
        coll = f" inside torch.distributed.{stack['collective']}" if stack.get("collective") else ""
        parts.append(f"Its last stack: {stack['where']}{coll}.")
    elif last_event is not None:
        parts.append(f"Its last event: {last_event.get('kind')}"
                     + (f" at step {last_event['step']}" if last_event.get("step") is not None else "") + ".")
    if symptoms:
        descr = "; ".join(f"rank {s['rank']} at step {s['step']}: {describe_collective_error(s['collective'])}"
                          + (f" ({s['site']})" if s.get("site") else "") for s in symptoms[:4])
        parts.append(f"The other ranks' errors follow from it: {descr}.")
        sites = {s["site"] for s in symptoms if s.get("site")}
        if stack and stack.get("where_line") and stack.get("collective") and sites \
                and stack["where_line"] not in sites:
            parts.append(f"Rank {rk} was in a collective at {stack['where_line']}, the others at "
                         f"{', '.join(sorted(sites))}: the ranks were in different collective calls, so "
                         "look for a condition that differs between ranks (a counter, a data-dependent "
                         "branch) around them.")
    return Finding(
        kind=kind, step=step, rank=rk, layer=None, severity="error", message=" ".join(parts),
        evidence={"status": row.get("status"), "reason": row.get("crash_reason"), "confidence": confidence,
                  "in_step": in_step, "last_completed_step": last_done,
                  "heartbeat_time": row.get("heartbeat_time"), "pid": _num(row.get("pid")),
                  "last_event": ({k: last_event.get(k) for k in ("kind", "time", "step")}
                                 if last_event else None),
                  "stack": stack, "symptoms": symptoms})
