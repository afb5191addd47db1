"""Runs read in place through fsspec URLs (in-memory and local filesystems)."""

from __future__ import annotations

import shutil
import uuid

import fsspec
import pytest

from debugkit import open_run
from debugkit.errors import InvalidInputError, RunDirError
from debugkit.io import access, served_runs
from debugkit.io.distributed import read_hangs
from debugkit.io.fs import as_path, files_signature, split_roots
from debugkit.io.rank_traces import find_rank_traces, read_rank_traces


@pytest.fixture
def memory_root(sample_runs):
    fs = fsspec.filesystem("memory")
    root = f"dk-{uuid.uuid4().hex[:8]}"
    for name in ("ddp-hang", "ddp-straggler"):
        fs.put(str(sample_runs / name), f"/{root}/runs/{name}", recursive=True)
    yield f"memory://{root}/runs"
    fs.rm(f"/{root}", recursive=True)


def test_memory_url_reads_the_same_tables_as_the_local_run(memory_root, sample_runs):
    remote = open_run(f"{memory_root}/ddp-hang")
    local = open_run(sample_runs / "ddp-hang")
    assert remote.ranks == local.ranks == [0, 1]
    assert remote.status == local.status == "failed"
    assert remote.steps().equals(local.steps())
    assert remote.grad_norms().equals(local.grad_norms())
    assert remote.scalars().equals(local.scalars())
    assert [e["kind"] for e in remote.events()] == [e["kind"] for e in local.events()]
    assert [f["id"] for f in remote.failures()] == [f["id"] for f in local.failures()]
    assert [d["id"] for d in read_hangs(remote)] == [d["id"] for d in read_hangs(local)]
    sig = remote.files_signature()
    assert {p for p, *_ in sig} == {p for p, *_ in local.files_signature()}


def test_traces_and_diagnose_through_a_url(memory_root):
    from debugkit.diagnose import diagnose

    run = open_run(f"{memory_root}/ddp-straggler")
    assert sorted(read_rank_traces(find_rank_traces(run))) == [0, 1, 2, 3]
    kinds = sorted((f.kind, f.rank) for f in diagnose(run))
    assert ("straggler", 2) in kinds


def test_store_finds_runs_under_a_url_root(memory_root, monkeypatch):
    found = served_runs.find_runs([memory_root])
    assert [e.id for e in found] == ["ddp-hang", "ddp-straggler"]
    monkeypatch.setenv("DEBUGKIT_ROOTS", f"/nowhere:{memory_root}")
    roots = served_runs.default_roots()
    assert [str(r) for r in roots] == ["/nowhere", memory_root]
    entry = served_runs.resolve_run("ddp-straggler", roots)
    assert served_runs.summarize(entry)["status"] == "finished"


def test_file_url_is_a_plain_local_path(tmp_path, sample_runs):
    shutil.copytree(sample_runs / "ddp-hang", tmp_path / "r")
    run = open_run(f"file://{tmp_path / 'r'}")
    assert run.path == tmp_path / "r"
    assert files_signature(run.path) == run.files_signature()


def test_allow_list_applies_to_urls(memory_root, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_ALLOWED_ROOTS", memory_root)
    assert str(access.check_allowed(f"{memory_root}/ddp-hang")) == f"{memory_root}/ddp-hang"
    with pytest.raises(InvalidInputError, match="outside the folders this server may open"):
        access.check_allowed("memory://elsewhere/run")


def test_split_roots_keeps_urls_whole():
    assert split_roots("a:s3://b/runs::gs://c/d:/e") == ["a", "s3://b/runs", "gs://c/d", "/e"]


@pytest.mark.parametrize("url,match", [
    ("memory://no/such/run", "no such file or directory"),
    ("nosuchproto://bucket/run", "cannot open this URL"),
])
def test_bad_urls(url, match):
    with pytest.raises(RunDirError, match=match):
        open_run(url)


def test_as_path_keeps_local_paths_plain(tmp_path):
    assert type(as_path(str(tmp_path))) is type(tmp_path)
