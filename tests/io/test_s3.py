"""Runs read in place from a real S3 server (SeaweedFS on loopback, signed requests,
credentials only through AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_ENDPOINT_URL).

Every public reader gives the same answer on the run at an ``s3://`` URL as on the same
run on local disk, and the commands a user types work on the URL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from debugkit import open_run
from debugkit.errors import MissingDependencyError
from debugkit.location import as_path, is_local

from ..conftest import ROOT, SAMPLE_RUNS

CONSOLE = Path(sys.executable).with_name("debugkit")
#: One sample per kind of content: audits, py-spy profiles, checkpoints, failures with
#: replayable captures, hang dumps, rank traces, a memory leak.
RUNS = ["credit-audit", "digits-profiled", "digits-resumed", "digits-bad-label", "ddp-hang",
        "ddp-straggler", "memory-leak", "digits-exploding"]


def _frames_equal(a, b) -> bool:
    return a.reset_index(drop=True).equals(b.reset_index(drop=True))


@pytest.mark.parametrize("name", RUNS)
def test_every_public_reader_reads_the_url_like_the_local_run(s3, s3_samples, name):
    from debugkit.audit.stored_audits import list_audits, load_audit
    from debugkit.diagnose import diagnose
    from debugkit.io.distributed import read_hangs
    from debugkit.io.rank_traces import find_rank_traces, read_rank_traces
    from debugkit.io.run_memsnaps import list_snapshots
    from debugkit.io.run_profiles import get_profile, list_profiles, read_entry

    url = f"{s3_samples}/{name}"
    remote, local = open_run(url), open_run(SAMPLE_RUNS / name)
    assert not is_local(remote.path) and str(remote.path) == url
    assert (remote.name, remote.status, remote.ranks) == (local.name, local.status, local.ranks)
    for table in ("steps", "grad_norms", "scalars", "memory"):
        assert _frames_equal(getattr(remote, table)(), getattr(local, table)()), table
    assert [e["kind"] for e in remote.events()] == [e["kind"] for e in local.events()]
    assert [f["id"] for f in remote.failures()] == [f["id"] for f in local.failures()]
    for f in local.failures():
        assert {k: v for k, v in remote.failure(f["id"]).items() if k != "path"} == \
            {k: v for k, v in f.items() if k != "path"}
    assert remote.env() == local.env() and remote.datasets() == local.datasets()
    assert remote.batch_spec() == local.batch_spec()
    assert remote.row_counts() == local.row_counts()
    assert remote.time_span() == local.time_span()
    assert remote.heartbeats() == local.heartbeats()
    assert {p for p, *_ in remote.files_signature()} == {p for p, *_ in local.files_signature()}
    assert [d["id"] for d in read_hangs(remote)] == [d["id"] for d in read_hangs(local)]
    assert sorted(read_rank_traces(find_rank_traces(remote))) == \
        sorted(read_rank_traces(find_rank_traces(local)))
    assert list_snapshots(remote.path) == list_snapshots(local.path) == []
    # checkpoints (the page's table, verified by hash) and the profiles, read whole
    ck_r, ck_l = remote.checkpoints(), local.checkpoints()
    assert ck_r.drop(columns="path").equals(ck_l.drop(columns="path"))
    assert ck_r["ok"].all()
    profiles = list_profiles(remote)
    assert [p["id"] for p in profiles] == [p["id"] for p in list_profiles(local)]
    for p in profiles:
        assert read_entry(get_profile(remote, p["id"])) is not None
    # audits: listed, loaded (hash-verified) and their rows read
    audits = list_audits(remote.path)
    assert [a["id"] for a in audits] == [a["id"] for a in list_audits(local.path)]
    for a in audits:
        assert _frames_equal(load_audit(remote.path, a["id"]).rows,
                             load_audit(local.path, a["id"]).rows)
    # what `debugkit diagnose` finds, the same on both
    found = [json.dumps(f.to_dict(), sort_keys=True, default=str) for f in diagnose(remote)]
    assert [f.replace(url, "R") for f in found] == \
        [json.dumps(f.to_dict(), sort_keys=True, default=str).replace(str(local.path), "R")
         for f in diagnose(local)]


def test_the_sample_with_audits_and_the_one_with_profiles_are_covered(s3, s3_samples):
    """The readers above are walked over runs that hold what the bugs were in."""
    from debugkit.audit.stored_audits import list_audits
    from debugkit.io.run_profiles import list_profiles

    assert len(list_audits(as_path(f"{s3_samples}/credit-audit"))) == 2
    assert list_profiles(open_run(f"{s3_samples}/digits-profiled"))
    assert len(open_run(f"{s3_samples}/digits-resumed").checkpoints()) >= 2


def test_a_url_root_lists_its_runs(s3, s3_samples, monkeypatch):
    from debugkit.io import served_runs

    monkeypatch.setenv("DEBUGKIT_ROOTS", s3_samples)
    roots = served_runs.default_roots()
    assert [str(r) for r in roots] == [s3_samples]  # not "s3:/bucket/runs"
    ids = [e.id for e in served_runs.find_runs(roots)]
    assert ids == sorted(p.name for p in SAMPLE_RUNS.iterdir() if p.is_dir())


def dk(*args, env=None, timeout=300, cwd=None):
    return subprocess.run([str(CONSOLE), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def _env(s3, **extra):
    import os

    env = dict(os.environ, **s3.env(), **extra)
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.parametrize("name", ["credit-audit", "digits-profiled", "digits-resumed",
                                  "digits-bad-label"])
@pytest.mark.slow  # two console scripts per sample on S3: 10.3-16.0 CPU s each (tests._cputime)
def test_info_and_diagnose_on_a_url_print_what_they_print_locally(s3, s3_samples, tmp_path, name):
    env = _env(s3)
    for cmd in (["info"], ["diagnose", "--json"]):
        remote = dk(*cmd, f"{s3_samples}/{name}", env=env, cwd=tmp_path)
        local = dk(*cmd, str(SAMPLE_RUNS / name), env=env, cwd=tmp_path)
        assert remote.returncode == local.returncode, remote.stderr
        assert "Traceback" not in remote.stderr
        assert remote.stdout.replace(s3_samples, "R") == \
            local.stdout.replace(str(SAMPLE_RUNS), "R"), (cmd, remote.stderr)


@pytest.mark.slow
def test_replay_of_a_run_in_a_bucket(s3, s3_samples, tmp_path):
    """The capture's batch, model and RNG state are fetched for the replay's child process
    (it was "batch.safetensors: missing from the capture")."""
    env = _env(s3, DEBUGKIT_CODE_ROOTS=str(ROOT / "examples"))
    out = dk("replay", f"{s3_samples}/digits-bad-label", "--json", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["reproduced"] is True
    assert report["culprit"]["dataset_index"] == 1474  # the sample with label 12


def test_compare_a_url_with_a_local_run(s3, s3_samples, tmp_path):
    env = _env(s3)
    remote = dk("compare", f"{s3_samples}/digits-compare-base", f"{s3_samples}/digits-compare-lr",
                env=env, cwd=tmp_path)
    local = dk("compare", str(SAMPLE_RUNS / "digits-compare-base"),
               str(SAMPLE_RUNS / "digits-compare-lr"), env=env, cwd=tmp_path)
    assert remote.returncode == local.returncode == 0, remote.stderr
    assert remote.stdout.replace(s3_samples, "R") == local.stdout.replace(str(SAMPLE_RUNS), "R")


def test_a_missing_s3fs_says_what_to_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_s3fs(name, *args, **kwargs):
        if name == "s3fs":
            raise ImportError("No module named 's3fs'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_s3fs)
    with pytest.raises(MissingDependencyError, match=r"pip install 'debugkit\[s3\]'"):
        as_path("s3://bucket/runs/r1")


def test_the_run_list_rereads_a_run_changed_in_the_bucket(s3, tmp_path, monkeypatch):
    """One flat listing of the root finds the runs and their signatures; a run whose files
    change in the bucket is analysed again (its cached row is keyed on the listing), one
    added is listed, and the rows equal the local runs' rows."""
    import time

    from debugkit import objcache
    from debugkit.diagnose import run_summaries
    from debugkit.io import served_runs

    monkeypatch.setattr(objcache, "LISTING_TTL_S", 0.0)
    bucket = s3.new_bucket()
    fs = s3.filesystem()
    fs.put(f"{SAMPLE_RUNS / 'digits-mlp'}/", f"{bucket}/runs/a/", recursive=True)
    root = f"s3://{bucket}/runs"
    (row,) = run_summaries.summarize_runs(served_runs.find_runs([root]))
    assert (row["id"], row["status"], row["failures"], row["cached"]) == ("a", "finished", 0, False)
    assert row["path"] == f"{root}/a"
    (again,) = run_summaries.summarize_runs(served_runs.find_runs([root]))
    assert again["cached"] is True
    # the run changes in the bucket: it becomes digits-bad-label (a failure capture more)
    fs.rm(f"{bucket}/runs/a", recursive=True)
    time.sleep(1.1)  # object stores stamp to the second
    fs.put(f"{SAMPLE_RUNS / 'digits-bad-label'}/", f"{bucket}/runs/a/", recursive=True)
    fs.put(f"{SAMPLE_RUNS / 'digits-mlp'}/", f"{bucket}/runs/b/", recursive=True)
    rows = {r["id"]: r for r in run_summaries.summarize_runs(served_runs.find_runs([root]))}
    assert sorted(rows) == ["a", "b"]
    assert (rows["a"]["status"], rows["a"]["failures"], rows["a"]["cached"]) == ("failed", 1, False)
    local = run_summaries.summarize_runs([served_runs.RunEntry("a", SAMPLE_RUNS / "digits-bad-label", None)])[0]
    assert {k: rows["a"][k] for k in ("errors", "warnings", "top", "steps")} == \
        {k: local[k] for k in ("errors", "warnings", "top", "steps")}


def test_ui_serves_a_bucket_given_on_the_command_line(s3, s3_samples, tmp_path):
    """`debugkit ui s3://bucket/runs` exited 2 ("no such file or directory"); it serves now."""
    import os
    import signal
    import socket
    import urllib.request

    from .._polling import wait_for

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env(s3)
    proc = subprocess.Popen([str(CONSOLE), "ui", s3_samples, "--port", str(port), "--host",
                             "127.0.0.1", "--headless"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def healthy():
        assert proc.poll() is None, proc.stdout.read()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_for(healthy, "the dashboard to serve the bucket", timeout_s=120, interval_s=0.5)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)
    missing = dk("ui", f"{s3_samples}/no-such-folder", env=env, cwd=tmp_path, timeout=120)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr
    # an allow-list that does not name the bucket refuses it (issue 28's rule)
    refused = dk("ui", s3_samples, env=dict(env, DEBUGKIT_ALLOWED_ROOTS=str(tmp_path)),
                 cwd=tmp_path, timeout=120)
    assert refused.returncode == 2 and "outside the folders this server may open" in refused.stderr


def test_prefetched_runs_stay_within_the_cache_bound(s3, s3_samples, tmp_path, monkeypatch):
    """A run opened at a URL has its small files fetched into the cache; with
    DEBUGKIT_CACHE_MAX_MB=1 the fetched objects of many runs never exceed the bound
    (least recently used ones are evicted), and each run still reads like the local one."""
    from debugkit._fsutil import cache_dir, cache_entries

    monkeypatch.setenv("DEBUGKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DEBUGKIT_CACHE_MAX_MB", "1")
    names = sorted(p.name for p in SAMPLE_RUNS.iterdir() if p.is_dir())[:10]
    for name in names:
        remote = open_run(f"{s3_samples}/{name}")
        local = open_run(SAMPLE_RUNS / name)
        assert remote.steps().equals(local.steps()), name
        assert sum(b for _, b, _ in cache_entries()) <= 1 << 20  # disk blocks, as the bound counts
    assert any((cache_dir() / "objects").iterdir())  # the files were cached, not read in place


def test_a_bad_listing_lifetime_is_refused(monkeypatch):
    from debugkit import objcache
    from debugkit.errors import InvalidInputError

    monkeypatch.setenv("DEBUGKIT_LISTING_TTL_S", "soon")
    with pytest.raises(InvalidInputError, match=r"DEBUGKIT_LISTING_TTL_S='soon': expected a number"):
        objcache.listing_ttl_s()
    monkeypatch.setenv("DEBUGKIT_LISTING_TTL_S", "30")
    assert objcache.listing_ttl_s() == 30.0


def test_a_fresh_listing_answers_in_the_calling_thread(s3, s3_samples, tmp_path, monkeypatch):
    """Once a run is listed and prefetched, its readers' questions (is this a folder, which
    ranks, open this file) are answered in the calling thread: no hop to fsspec's event
    loop thread (a cold run list asked ~110 per run, each a thread switch)."""
    import fsspec.asyn

    monkeypatch.setenv("DEBUGKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DEBUGKIT_LISTING_TTL_S", "600")
    run = open_run(f"{s3_samples}/digits-bad-label")  # the listing and the batch fetch
    hops: list[str] = []
    real = fsspec.asyn.sync

    def counted(loop, func, *args, **kwargs):
        hops.append(getattr(func, "__name__", str(func)))
        return real(loop, func, *args, **kwargs)

    monkeypatch.setattr(fsspec.asyn, "sync", counted)
    assert run.status == "failed" and run.ranks == [0]
    assert len(run.steps()) and len(run.grad_norms()) and len(run.scalars()) and len(run.memory())
    assert [f["id"] for f in run.failures()] == ["r0-s0000075-exception"]
    assert run.events() and run.heartbeats() and run.batch_spec() is not None
    # only the two globs (events, batch specs) still go through fsspec's own glob; every
    # exists/isdir/ls/info/open is answered here (before: 112 hops per run on Home)
    assert hops == ["_glob", "_glob"], hops


def test_child_names_lists_a_folder_alike_on_disk_and_in_the_bucket(s3, s3_samples):
    """``io.fs.child_names``: the entries of a run folder and whether each is a folder, the
    same from the bucket as from disk, with no path object or question per entry (the
    readers' rank and segment scans use it); nothing for a missing folder or a file."""
    from debugkit.io.fs import child_names

    for rel in ("", "ranks", "ranks/0", "failures", "failures/r0-s0000075-exception"):
        local = SAMPLE_RUNS / "digits-bad-label" / rel
        remote = as_path(f"{s3_samples}/digits-bad-label/{rel}".rstrip("/"))
        expected = sorted((p.name, p.is_dir()) for p in local.iterdir())
        assert sorted(child_names(local)) == sorted(child_names(remote)) == expected, rel
    for rel in ("nope", "manifest.json"):
        assert child_names(SAMPLE_RUNS / "digits-bad-label" / rel) == []
        assert child_names(as_path(f"{s3_samples}/digits-bad-label/{rel}")) == []
