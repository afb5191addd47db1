"""``debugkit profile RUN_DIR -- cmd ...`` / ``debugkit profile RUN_DIR --pid PID``:
record a py-spy profile into a run."""

from __future__ import annotations

import argparse
import sys

from ..errors import InvalidInputError


def _add_options(p) -> None:
    p.add_argument("--pid", type=int, default=None, help="attach to this running process instead")
    p.add_argument("--duration", type=float, default=None,
                   help="seconds to sample (default with --pid: 30; with a command: until it exits)")
    p.add_argument("--name", default=None, help="the profile's name in the run (default: speedscope-<time>)")
    p.add_argument("--label", default=None, help="a note shown next to the profile (e.g. 'before the fix')")
    p.add_argument("--rate", type=int, default=100, help="samples per second (default 100)")
    p.add_argument("--format", choices=["speedscope", "raw"], default="speedscope",
                   help="py-spy output format (default speedscope)")
    p.add_argument("--native", action="store_true", help="also sample native (C/C++/CUDA) frames")
    p.add_argument("--no-idle", dest="idle", action="store_false",
                   help="drop samples of waiting threads (hides time spent waiting for data)")
    p.add_argument("--gil", action="store_true", help="only sample threads holding the GIL")
    p.add_argument("--no-subprocesses", dest="subprocesses", action="store_false",
                   help="with --pid: do not sample the process's children (DataLoader workers)")


def register(sub) -> None:
    p = sub.add_parser(
        "profile", help="record a py-spy profile of a command (or a running process) into a run",
        description="Run COMMAND under `py-spy record` (speedscope, --subprocesses so DataLoader "
                    "workers are sampled, --idle so waiting is sampled too) and store the profile in "
                    "RUN_DIR/profiles/, listed in its manifest. Exits with the command's status.",
        epilog="examples:\n"
               "  debugkit profile runs/r1 -- python train.py --out runs/r1\n"
               "  debugkit profile runs/r1 --pid 4242 --duration 30",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_options(p)
    p.add_argument("run", metavar="RUN_DIR", help="run directory to store the profile in "
                   "(created if missing)")
    # Everything after RUN_DIR: more options, then `--` and the command. argparse cannot
    # mix a positional, options and a `--` command reliably, so this part is split here.
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="[options] -- COMMAND ...",
                   help="the command to profile, after `--`")
    p.set_defaults(func=run)


def split_rest(args) -> list[str]:
    """Parse options given after RUN_DIR into ``args``; return the command."""
    rest = list(args.rest or [])
    if "--" in rest:
        i = rest.index("--")
        opts, command = rest[:i], rest[i + 1:]
    elif rest and not rest[0].startswith("-"):
        opts, command = [], rest  # argparse already took the `--` right after RUN_DIR
    else:
        opts, command = rest, []
    if opts:
        extra = argparse.ArgumentParser(prog="debugkit profile RUN_DIR", add_help=False)
        _add_options(extra)
        ns, unknown = extra.parse_known_args(opts)
        if unknown:
            raise InvalidInputError(f"debugkit profile: unexpected {' '.join(unknown)!r} "
                                    "(put the command after `--`)")
        defaults = vars(extra.parse_args([]))
        for k, v in vars(ns).items():
            if v != defaults[k]:
                setattr(args, k, v)
    return command


def run(args) -> int:
    from . import _pyspy as pyspy

    command = split_rest(args)
    if args.pid is not None and command:
        raise InvalidInputError("debugkit profile: give either --pid PID or a command after `--`, not both")
    if args.pid is None and not command:
        raise InvalidInputError("debugkit profile: give a command after `--` "
                                "(debugkit profile RUN_DIR -- python train.py) or --pid PID")
    if args.duration is not None and args.duration <= 0:
        raise InvalidInputError(f"--duration {args.duration}: expected a positive number of seconds")
    common = dict(name=args.name, format_name=args.format, rate=args.rate, idle=args.idle, native=args.native,
                  gil=args.gil, label=args.label)
    if args.pid is not None:
        entry = pyspy.record_pid(args.run, args.pid, duration=args.duration or 30,
                                 subprocesses=args.subprocesses, **common)
        status = 0
    else:
        if not args.subprocesses:
            raise InvalidInputError("--no-subprocesses only applies with --pid: a command runs under "
                                    "debugkit's launcher, so its subprocesses are always sampled "
                                    "(filter threads on the Profiler page)")
        entry, status = pyspy.record_command(args.run, command, duration=args.duration, **common)
    s = entry.get("summary") or {}
    print(f"debugkit: stored profile {entry['id']!r} in {args.run} "
          f"({s.get('samples', 0):,} samples, {s.get('threads', 0)} threads) -> {entry['file']}",
          file=sys.stderr)
    if entry.get("created_run"):
        print(f"debugkit: {args.run} had no manifest.json (the program did not record a debugkit run); "
              "created a minimal one so the dashboard can open it", file=sys.stderr)
    return status
