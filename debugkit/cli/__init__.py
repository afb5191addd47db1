"""The ``debugkit`` command.

Each sub-command lives in its own module under :mod:`debugkit.cli` with a
``register(subparsers)`` function that adds its parser and sets ``func`` (called with
the parsed arguments; returns the exit code). To add a command, write the module and
add its name to :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import DebugkitError

COMMANDS = [
    "ui",
    "info",
    "diagnose",
    "importcmd",
    "replay",
    "audit",
    "share",
    "profile",
    "dump",
    "profile_summary",
    "sync",
    "scan_dataset",
    "compare",
]

EXIT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="debugkit",
        description="Debug PyTorch training runs: from symptom to root cause.",
    )
    parser.add_argument("--version", action="version", version=f"debugkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 bad input, 1 unexpected error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    try:
        return int(args.func(args) or 0)
    except DebugkitError as exc:
        print(f"debugkit: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("debugkit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
