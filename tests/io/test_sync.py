"""`debugkit sync`: a locally written run copied incrementally to another store."""

from __future__ import annotations

import json
import shutil
import uuid

import fsspec
import pytest
import torch

from debugkit import Recorder, open_run, runpack
from debugkit.cli import main as cli_main
from debugkit.errors import RunDirError
from debugkit.io.sync import MSG_DEST_INSIDE, sync_run, watch_run
from tests._training import train_step


def _train(run_dir, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(run_dir, model, optimizer=opt, name="sync-test", flush_every_s=0.05) as rec:
        for _ in range(steps):
            x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
            train_step(rec, model, opt, (x, y))


@pytest.fixture
def memory_dest():
    root = f"dk-sync-{uuid.uuid4().hex[:8]}"
    yield f"memory://{root}/job"
    fsspec.filesystem("memory").rm(f"/{root}", recursive=True)


def test_copy_reads_like_the_source_and_second_pass_copies_nothing(tmp_path, memory_dest):
    src = tmp_path / "run"
    _train(src, 5)
    first = sync_run(src, memory_dest)
    assert first.unchanged == 0 and "manifest.json" in first.uploaded
    # heartbeats after every data file, the manifest just before them, and the run having
    # ended, the pack of its small files after everything (an extra copy, see runpack)
    assert first.uploaded[-1] == runpack.PACK
    kinds = ["h" if p.endswith("heartbeat.json") else "m" if p == "manifest.json" else "d"
             for p in first.uploaded[:-1]]
    assert kinds == sorted(kinds, key="dmh".index)
    members = runpack.read_pack(fsspec.open(f"{memory_dest}/{runpack.PACK}").open().read())
    assert sorted(members) == sorted(first.uploaded[:-1])
    assert all(m["data"] == (src / name).read_bytes() for name, m in members.items())
    remote, local = open_run(memory_dest), open_run(src)
    assert remote.status == local.status == "finished"
    assert remote.grad_norms().equals(local.grad_norms())
    assert remote.scalars().equals(local.scalars())
    again = sync_run(src, memory_dest, first.state)
    # nothing changed: no file and no pack again
    assert again.uploaded == [] and again.bytes == 0 and again.unchanged == len(first.uploaded) - 1


def test_resumed_run_uploads_only_what_changed(tmp_path, memory_dest):
    src = tmp_path / "run"
    _train(src, 3)
    first = sync_run(src, memory_dest)
    _train(src, 4)  # a restarted job: a new segment in the same run directory
    second = sync_run(src, memory_dest, first.state)
    assert second.uploaded, "the new segment must be copied"
    assert all("001" in p or p.endswith(("heartbeat.json", "manifest.json", runpack.PACK))
               for p in second.uploaded), second.uploaded
    assert not [p for p in second.uploaded if "000" in p], "segment 0 did not change"
    # the heartbeat after the data, then a new pack (the old one is stale)
    assert second.uploaded[-2].endswith("heartbeat.json") and second.uploaded[-1] == runpack.PACK
    # the second attempt restarted at step 0, so it supersedes the first one's 3 steps
    # (issue 17: attempts are kept apart; both stay on disk and in the copy)
    assert len(open_run(memory_dest).steps()) == len(open_run(src).steps()) == 4
    assert [a["first_step"] for a in open_run(memory_dest).attempts()] == [0, 0]


def test_local_destination_and_cli_json(tmp_path, capsys):
    src, dest = tmp_path / "run", tmp_path / "shared" / "run"
    _train(src, 2)
    before = {p.relative_to(src): p.read_bytes() for p in src.rglob("*") if p.is_file()}
    assert cli_main(["sync", str(src), str(dest), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bytes"] > 0 and "manifest.json" in out["uploaded"]
    assert open_run(dest).grad_norms().equals(open_run(src).grad_norms())
    # the source is only read, and no temporary file is left at the destination
    assert {p.relative_to(src): p.read_bytes() for p in src.rglob("*") if p.is_file()} == before
    assert not [p for p in dest.rglob("*") if p.name.endswith(".tmp")]


def test_watch_stops_when_the_run_has_ended(tmp_path, memory_dest):
    src = tmp_path / "run"
    _train(src, 2)
    passes = []
    res = watch_run(src, memory_dest, every_s=0.01, on_pass=passes.append,
                    sleep=lambda s: pytest.fail("a finished run needs no second pass"))
    assert len(passes) == 1 and res.uploaded


@pytest.mark.parametrize("make_src, match", [
    (lambda tmp: tmp, "not a debugkit run directory to sync"),
    (lambda tmp: "s3://bucket/run", "sync reads a run on this machine's disk"),
])
def test_bad_source(tmp_path, make_src, match):
    with pytest.raises(RunDirError, match=match):
        sync_run(make_src(tmp_path), tmp_path / "out")


def test_destination_inside_the_source_is_refused(tmp_path, sample_runs):
    src = tmp_path / "run"
    shutil.copytree(sample_runs / "digits-mlp", src)
    with pytest.raises(RunDirError, match="lies inside the run being synced"):
        sync_run(src, src / "copy")
    assert not (src / "copy").exists()
    assert cli_main(["sync", str(src), str(src / "x")]) == 2
    assert MSG_DEST_INSIDE.startswith("{dest}")
