"""``debugkit replay RUN [--failure ID] [--device auto|cpu|cuda] [--allow-code] [--timeout S] [--checkpoint STEP] --json``

Re-run a captured failing step in a child process and say which sample, module and op
caused it. Exit status 0 when the replay ran (whatever it found: a crash or a hang of
the replayed step is part of the report), 2 when it could not run (no capture, code not
allowed, factory missing), with one line on stderr.
"""

from __future__ import annotations

import sys

from ._output import print_json

MARK = {True: "ok  ", False: "FAIL", None: "--  "}
CALL_TEXT = {"kwargs": "model(**inputs)", "args": "model(*inputs)", "single": "model(inputs)",
             "args_kwargs": "model(*args, **kwargs)"}


def register(sub) -> None:
    p = sub.add_parser("replay", help="replay a captured failing batch and point at its cause")
    p.add_argument("run", help="run directory or .zip")
    p.add_argument("--failure", metavar="ID", default=None,
                   help="which capture (default: the run's first; see `debugkit info RUN`)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where to replay (auto: CUDA where available, else the CPU)")
    p.add_argument("--allow-code", action="store_true",
                   help="run the capture's model code even if its file changed since the run "
                        "or has no recorded hash (it must still lie in an allowed folder)")
    p.add_argument("--code-root", action="append", default=[], metavar="DIR",
                   help="the project folder holding the capture's code: searched first for its "
                        "modules (no PYTHONPATH needed) and allowed to run (default: only "
                        "$DEBUGKIT_CODE_ROOTS, else the working directory; never debugkit, the "
                        "standard library or site-packages); repeatable")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="wall-clock limit of the replay process in seconds (default 120)")
    p.add_argument("--memory-mb", type=float, default=None, metavar="MB",
                   help="address-space cap of a CPU replay (default: half the machine's memory)")
    p.add_argument("--checkpoint", type=int, default=None, metavar="STEP",
                   help="replay with the weights of the run's checkpoint at STEP (rec.checkpoint()) "
                        "instead of the captured ones")
    p.add_argument("--repro", metavar="ZIP", default=None,
                   help="also write a minimal standalone repro (repro.py + the capture) to ZIP")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..io.run import open_run
    from ..replay import plan_identities, replay
    from ..replay.advice import advice_for
    from ..replay.loading import select_failure
    from ..replay.policy import cli_code_roots

    r = open_run(args.run)
    roots = cli_code_roots(args.code_root)
    progress = (lambda msg: print(f"  {msg}", file=sys.stderr)) if sys.stderr.isatty() else None
    report = replay(r, args.failure, device=args.device, allow_code=args.allow_code,
                    timeout_s=args.timeout, memory_mb=args.memory_mb, progress=progress,
                    checkpoint=args.checkpoint, code_roots=roots, import_roots=args.code_root)
    if args.repro:
        from pathlib import Path

        from .._fsutil import atomic_write_bytes
        from ..replay.repro import build_repro

        record = select_failure(r, report["failure"])
        data = build_repro(r, record, plan_identities(r, record, code_roots=roots,
                                                     import_roots=args.code_root), report)
        Path(args.repro).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(args.repro, data)
    report["advice"] = advice_for(report)
    if args.json:
        print_json(report)
        return 0
    _print_text(report, report["advice"], args.repro)
    return 0


def _print_text(rep: dict, advice: list[str], repro: str | None) -> None:
    o, p, c = rep["original"], rep["replay"], rep["culprit"]
    q = rep.get("request")
    if q:  # a captured inference request
        print(f"failure:    {rep['failure']} (request {q['request']})")
        print(f"request:    {q.get('signature') or '?'} called as "
              f"{CALL_TEXT.get(q.get('call') or '', 'model(inputs)')}")
    else:
        print(f"failure:    {rep['failure']} (step {o['step']})")
    print(f"original:   {o['type']}: {_first(o['message'])}")
    print(f"replay:     on {rep['device']}: "
          + (f"{p['type']}: {_first(p['message'])} ({p['seconds']} s)" if p else "no error"))
    print(f"ran:        {(rep.get('ran') or {}).get('detail', '-')}")
    w = rep.get("weights") or {}
    if w.get("from") == "checkpoint":
        print(f"weights:    checkpoint at step {w['step']} ({w['path']})")
    print(f"reproduced: {'yes' if rep['reproduced'] else 'no'}"
          + (" (same error)" if rep["same_error"] else ""))
    fields = [f"{k}={c[k]}" for k in ("module", "op", "input", "sample_index", "dataset_index")
              if c.get(k) is not None]
    if q:
        fields = [f"{k}={q[k]}" for k in ("field", "token_id", "value", "position", "shape", "dtype")
                  if q.get(k) is not None] + [f"module={c['module']}"] * bool(c.get("module"))
    detail = (q or {}).get("detail") or c.get("detail")
    print(f"culprit:    {detail or 'none found'}" + (f"\n            {', '.join(fields)}" if fields else ""))
    print("checks:")
    for ch in rep["checks"]:
        print(f"  {MARK[ch['ok']]} {ch['name']:<18} {ch['detail']}")
    if rep.get("cross_check"):
        x = rep["cross_check"]
        xr = x.get("replay")
        print(f"CPU cross-check: {xr['type'] + ': ' + _first(xr['message']) if xr else 'no error'}")
    for a in advice:
        print(f"to do:      {a}")
    for n in rep.get("notes") or []:
        print(f"note:       {_first(n)}")
    if repro:
        print(f"repro:      {repro}")


def _first(text) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""
