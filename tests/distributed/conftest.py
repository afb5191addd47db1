"""Real torchrun jobs (gloo on CPU) recorded once per test session, each bounded in time."""

from __future__ import annotations

import pytest

from .harness import ROOT, torchrun


def _job(tmp_path_factory, name, nproc, target, expect_rc):
    out = tmp_path_factory.mktemp(name) / "run"
    proc = torchrun(nproc, target, out)
    assert proc.returncode == expect_rc, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


@pytest.fixture(scope="session")
def straggler_run(tmp_path_factory):
    """3 ranks, rank 1 loads every sample 3 ms slower; 4 steps traced by torch.profiler."""
    return _job(tmp_path_factory, "straggler", 3,
                ["-m", "examples.ddp_digits", "--slow-rank", "1", "--profile"], 0)


@pytest.fixture(scope="session")
def hang_run(tmp_path_factory):
    """2 ranks sharded unevenly: rank 0 hangs in the all-reduce rank 1 skipped."""
    return _job(tmp_path_factory, "hang", 2, ["-m", "examples.ddp_digits", "--uneven"], 1)


@pytest.fixture(scope="session")
def timeout_run(tmp_path_factory):
    return _job(tmp_path_factory, "timeout", 2, [str(ROOT / "tests/distributed/jobs.py"), "timeout"], 1)


@pytest.fixture(scope="session")
def desync_run(tmp_path_factory):
    return _job(tmp_path_factory, "desync", 2, [str(ROOT / "tests/distributed/jobs.py"), "desync"], 0)
