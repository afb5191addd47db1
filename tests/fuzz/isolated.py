"""Run one fuzz input in a child process, so that a reader that crashes the interpreter
(a segfault in pyarrow, an abort) is one failed input, not a dead test run.

The child builds the input itself (a structure-aware mutation of a target's seed may
need the very code under test to build it; see :mod:`tests.fuzz.arrowmut`), writes it
to ``<out>`` before feeding it to the target (so an input that kills the child is kept),
and says how it went through its exit status:

    python -m tests.fuzz.isolated <target> <mutation> <salt> <out>

``mutation``: ``arrow`` (one :func:`tests.fuzz.arrowmut.mutate_stream` lie, kind drawn
from ``salt``), ``arrow:<kind>`` (that kind), or ``bytes`` (:func:`tests.fuzz.targets.mutate`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPENED, REFUSED, BROKE, NO_INPUT = 0, 10, 20, 30
#: A pseudo target whose reader dereferences a null pointer (tests the runner itself).
SEGFAULT_TARGET = "_segfault"
#: Seconds one child may take (imports included) before it counts as hung.
CHILD_TIMEOUT_S = 120


@dataclass
class Outcome:
    """How one input went: ``opened``, ``refused``, ``broke`` (another exception, a hang or
    a crash; ``detail`` says which), or ``no_input`` (the mutation could not be built)."""

    outcome: str
    detail: str
    data: bytes | None


def build(target: str, mutation: str, salt: int) -> bytes:
    import random

    from tests.fuzz import arrowmut
    from tests.fuzz.targets import mutate, seed

    rng = random.Random(salt)
    data = seed(target)
    if mutation.startswith("arrow"):
        kind = mutation.split(":", 1)[1] if ":" in mutation else None
        return arrowmut.mutate_stream(data, rng, kind)
    return mutate(data, rng)


def run_isolated(target: str, mutation: str, salt: int) -> Outcome:
    """Build and run one input in a child process; see the module docstring."""
    fd, out = tempfile.mkstemp(prefix="dk-fuzz-input-")
    os.close(fd)
    os.unlink(out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run([sys.executable, "-m", "tests.fuzz.isolated", target, mutation, str(salt), out],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=CHILD_TIMEOUT_S)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        rc, tail = None, f"no result after {CHILD_TIMEOUT_S} s"
    data = Path(out).read_bytes() if os.path.exists(out) else None
    if os.path.exists(out):
        os.unlink(out)
    if rc == OPENED:
        return Outcome("opened", "", data)
    if rc == REFUSED:
        return Outcome("refused", tail.strip().splitlines()[-1] if tail.strip() else "", data)
    if rc == NO_INPUT:
        return Outcome("no_input", tail, None)
    why = (f"killed by signal {-rc}" if rc is not None and rc < 0 else
           f"exit status {rc}" if rc is not None else "hung")
    return Outcome("broke", f"{target} {mutation} salt={salt}: {why}\n{tail}", data)


def _main(argv: list[str]) -> int:
    import faulthandler

    faulthandler.enable()  # a crash prints the C-level stack to stderr for the report
    target, mutation, salt, out = argv[0], argv[1], int(argv[2]), argv[3]
    if target == SEGFAULT_TARGET:  # proves a crashing reader is reported, not fatal
        import ctypes

        Path(out).write_bytes(b"")
        ctypes.string_at(0)
    try:
        data = build(target, mutation, salt)
    except Exception as exc:  # noqa: BLE001 - the generator's problem, not the reader's
        print(f"could not build the input: {type(exc).__name__}: {exc}")
        return NO_INPUT
    Path(out).write_bytes(data)
    from tests.fuzz.targets import run_target

    try:
        outcome = run_target(target, data)
    except BaseException as exc:  # noqa: BLE001 - anything else breaks the contract
        import traceback

        traceback.print_exc()
        print(f"broke: {type(exc).__name__}: {exc}")
        return BROKE
    if outcome == "refused":
        print("refused")
    return OPENED if outcome == "opened" else REFUSED


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
