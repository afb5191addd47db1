"""``Recorder("s3://...")`` against a real S3 server: the run is written to a local spool
and uploaded after every flush, completely on close, and after a SIGKILL of the training
process the bucket holds every flush that completed (debugkit.recorder.spool)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from debugkit import Recorder, open_run, watch
from debugkit.errors import DebugkitError

from .._polling import wait_for
from .._training import train
from ..conftest import ROOT


def _batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(n)]


@pytest.fixture
def spool(tmp_path, monkeypatch):
    d = tmp_path / "spool"
    monkeypatch.setenv("DEBUGKIT_SPOOL", str(d))
    monkeypatch.chdir(tmp_path)
    return d


def test_a_run_recorded_to_a_url_is_in_the_bucket_after_close(s3, spool, tmp_path):
    url = f"s3://{s3.new_bucket()}/runs/r1"
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(url, model, opt, flush_every_s=0.2)
    assert rec.url == url and str(rec.run_dir).startswith(str(spool))
    train(rec, model, opt, _batches(12))
    rec.checkpoint(12)
    rec.close()
    run = open_run(url)  # read back from the bucket, nothing else
    assert run.status == "finished"
    assert sorted(run.steps()["step"].tolist()) == list(range(12))
    assert run.grad_norms().equals(open_run(rec.run_dir).grad_norms())
    assert run.checkpoints()["ok"].tolist() == [True]
    assert not (tmp_path / "s3:").exists()  # never a local folder named after the URL
    # the run has ended: its small files are in the bucket once more, packed in one object
    # (a cold reader's one GET), each member the file as uploaded
    from debugkit import runpack

    members = runpack.read_pack(s3.filesystem().cat(f"{url[len('s3://'):]}/{runpack.PACK}"), url)
    assert "manifest.json" in members and "ranks/0/heartbeat.json" in members
    assert all(m["data"] == (rec.run_dir / name).read_bytes() for name, m in members.items())


def test_watch_records_a_failure_capture_to_the_url(s3, spool):
    url = f"s3://{s3.new_bucket()}/runs/w1"
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    w = watch(model, opt, url, flush_every_s=0.2, capture_uncaught=False)
    x, y = _batches(1)[0]
    with pytest.raises(IndexError):
        with w.recorder.step((x, y)):
            torch.nn.functional.cross_entropy(model(x), torch.full_like(y, 7)).backward()
    w.close()
    run = open_run(url)
    (failure,) = run.failures()
    assert run.status == "failed" and failure["step"] == 0
    assert (run.path / "failures" / failure["id"] / "batch.safetensors").is_file()


@pytest.mark.slow  # a training job against S3: 12.2 CPU s (tests._cputime)
def test_a_bucket_that_cannot_be_written_fails_at_the_start(s3, spool, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    url = f"s3://{s3.new_bucket()}/runs/denied"
    with pytest.raises(DebugkitError, match=r"s3://.*/runs/denied: the run could not be uploaded"):
        Recorder(url, torch.nn.Linear(4, 3))


CHILD = textwrap.dedent("""
    import os, sys, time, torch
    from debugkit import Recorder
    from tests._training import train
    url, marker = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(url, model, opt, flush_every_s=0.2)
    batches = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(25)]
    train(rec, model, opt, batches)
    with open(marker + ".tmp", "w") as f:  # whole or absent: the test polls for it
        f.write(str(rec.run_dir))
    os.replace(marker + ".tmp", marker)
    time.sleep(600)  # killed here, never closed
""")


def test_after_sigkill_the_bucket_holds_every_completed_flush(s3, spool, tmp_path):
    url = f"s3://{s3.new_bucket()}/runs/killed"
    marker = tmp_path / "trained"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, str(marker)], cwd=tmp_path,
                             env=env, start_new_session=True)
    try:
        wait_for(marker.exists, "the child to train 25 steps", timeout_s=180)
        local = open_run(marker.read_text())
        # every step flushed to the spool (the writer flushes every 0.2 s)
        wait_for(lambda: len(local.steps()) == 25, "25 flushed steps in the spool")
        os.killpg(child.pid, signal.SIGKILL)  # the whole process group, as a scheduler does
        child.wait(30)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
    # the uploader (its own session) sees the writer gone, makes a last pass and exits
    remote = wait_for(lambda: (r := open_run(url)) and r.status == "crashed" and
                      len(r.steps()) == 25 and r, "the bucket to hold all 25 steps, crashed")
    assert sorted(remote.steps()["step"].tolist()) == list(range(25))


def test_a_multi_node_job_is_told_to_sync_per_node(spool, monkeypatch):
    from debugkit.errors import InvalidInputError
    from debugkit.recorder.spool import MSG_MULTI_NODE

    monkeypatch.setenv("GROUP_RANK", "1")
    url = "s3://bucket/runs/multi"
    with pytest.raises(InvalidInputError) as err:
        Recorder(url, torch.nn.Linear(4, 3))
    assert str(err.value) == MSG_MULTI_NODE.format(url=url, node=1)
    assert not spool.exists()  # nothing written
