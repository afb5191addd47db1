"""Run a real torchrun job (gloo on CPU) for a test, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN_TIMEOUT_S = 300


def torchrun(nproc: int, target: list[str], out: Path) -> subprocess.CompletedProcess:
    """Run ``python -m torch.distributed.run --standalone --nproc_per_node N <target> --out OUT``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           str(nproc), *target, "--out", str(out)]
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=TORCHRUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"torchrun {' '.join(target)} ran past {TORCHRUN_TIMEOUT_S} s:\n"
                    f"{(exc.stdout or b'')[-3000:]!r}")
