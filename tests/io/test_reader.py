"""open_run on good, live, zipped and broken runs."""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from debugkit import Recorder, RunDirError, SchemaVersionError, open_run
from debugkit import format as fmt
from debugkit.errors import DebugkitError
from tests._training import train_step

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"


def _record(run_dir, steps=5, flush=0.05, close=True):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(run_dir, model, optimizer=opt, flush_every_s=flush, name="tiny")
    for _ in range(steps):
        x, y = torch.randn(4, 4), torch.randint(0, 2, (4,))
        train_step(rec, model, opt, (x, y))
    if close:
        rec.close()
    return rec


def test_golden_healthy_sample():
    run = open_run(SAMPLES / "digits-mlp")
    assert run.status == "finished"
    assert run.failures() == []
    counts = run.row_counts()
    n_steps = counts["steps"]
    assert n_steps == 45 + 57 + 57  # 1437 stage-1 rows, then 1797 rows, batch 32, 3 epochs
    assert counts["grads"] == n_steps * 7  # 6 parameters + total
    assert counts["memory"] == n_steps
    assert run.layers() == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]


def test_golden_crashed_sample():
    run = open_run(SAMPLES / "digits-bad-label")
    assert run.status == "failed"
    (f,) = run.failures()
    assert (f["kind"], f["step"], f["rank"], f["error_type"]) == ("exception", 75, 0, "IndexError")
    assert f["message"] == "Target 12 is out of bounds."
    assert 1474 in f["dataset_indices"]
    assert run.row_counts()["steps"] == 76


def test_live_run_is_readable_while_written(tmp_path):
    run_dir = tmp_path / "live"
    rec = _record(run_dir, steps=3, flush=0.05, close=False)
    try:
        time.sleep(0.3)
        run = open_run(run_dir)
        assert run.status == "running"
        n1 = len(run.steps())
        assert n1 == 3
        model = rec.model
        for _ in range(4):
            with rec.step(None):
                model(torch.randn(2, 4)).sum().backward()
        time.sleep(0.3)
        assert len(open_run(run_dir).steps()) == 7
    finally:
        rec.close()
    assert open_run(run_dir).status == "finished"


def test_stale_heartbeat_of_another_host_means_crashed(tmp_path):
    run_dir = tmp_path / "r"
    _record(run_dir, steps=2)
    hb_path = run_dir / "ranks" / "0" / fmt.HEARTBEAT
    hb = json.loads(hb_path.read_text())
    hb.update(state="running", host="some-other-host", time=time.time() - 3600)
    hb_path.write_text(json.dumps(hb))
    assert open_run(run_dir).status == "crashed"
    hb.update(time=time.time())
    hb_path.write_text(json.dumps(hb))
    assert open_run(run_dir).status == "running"  # fresh heartbeat from elsewhere


def test_zip_of_a_run_opens_without_changing_the_zip(tmp_path):
    z = tmp_path / "run.zip"
    src = SAMPLES / "digits-bad-label"
    with zipfile.ZipFile(z, "w") as zf:
        for p in src.rglob("*"):
            if p.is_file():
                zf.write(p, Path("digits-bad-label") / p.relative_to(src))
    before = z.read_bytes()
    run = open_run(z)
    assert run.status == "failed" and len(run.failures()) == 1
    assert run.row_counts() == open_run(src).row_counts()
    assert z.read_bytes() == before


def _bad_manifest(tmp_path, text):
    d = tmp_path / "bad"
    shutil.copytree(SAMPLES / "digits-mlp", d)
    (d / "manifest.json").write_text(text)
    return d


@pytest.mark.parametrize("make,exc,match", [
    (lambda t: t / "missing", RunDirError, r"missing: no such file or directory"),
    (lambda t: (t / "empty").mkdir() or t / "empty", RunDirError,
     r"empty: not a debugkit run directory \(no manifest.json\)"),
    (lambda t: _bad_manifest(t, '{"schema_version": "9.0"}'), SchemaVersionError,
     r"manifest.json: schema_version '9.0' is newer than this debugkit \(1.x\); .*upgrade debugkit"),
    (lambda t: _bad_manifest(t, '{"schema_version": "one"}'), SchemaVersionError,
     r"schema_version 'one' is not of the form 'MAJOR.MINOR'"),
    (lambda t: _bad_manifest(t, '{"name": "x"}'), SchemaVersionError,
     r"schema_version None is not of the form"),
    (lambda t: _bad_manifest(t, '{"schema_version": "1.0", "na'), RunDirError,
     r"manifest.json is not valid JSON"),
    (lambda t: _bad_manifest(t, "[1, 2]"), RunDirError, r"manifest.json field '\(root\)' must be a JSON object"),
    (lambda t: _bad_manifest(t, '{"schema_version": "1.0", "config": 3}'), RunDirError,
     r"field 'config' must be a JSON object"),
    (lambda t: _bad_manifest(t, os.urandom(64).decode("latin-1")), RunDirError, r"not valid JSON"),
    (lambda t: (t / "f.txt").write_text("x") and t / "f.txt", RunDirError,
     r"f.txt: expected a run directory or a .zip of one"),
])
def test_bad_runs_raise_clear_errors(tmp_path, make, exc, match):
    path = make(tmp_path)
    with pytest.raises(exc, match=match):
        open_run(path)


def test_random_bytes_in_a_table_file_lose_nothing_else(tmp_path):
    run_dir = tmp_path / "r"
    _record(run_dir, steps=4)
    p = run_dir / "ranks" / "0" / "memory-000.arrows"
    original = os.urandom(300)
    p.write_bytes(original)
    run = open_run(run_dir)
    assert len(run.memory()) == 0  # unreadable from the start: nothing, and a warning
    assert any("memory-000.arrows" in w for w in run.warnings)
    assert len(run.steps()) == 4 and len(run.grad_norms()) == 4 * 5
    assert p.read_bytes() == original  # the reader never rewrites a file


def test_zip_that_is_not_a_zip(tmp_path):
    z = tmp_path / "x.zip"
    z.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(DebugkitError, match=r"'x.zip' is not a readable zip archive"):
        open_run(z)


def test_bad_layer_ids_are_an_error_not_garbage(tmp_path):
    import pyarrow as pa

    run_dir = tmp_path / "r"
    _record(run_dir, steps=1)
    p = run_dir / "ranks" / "0" / "grads-000.arrows"
    with pa.OSFile(str(p), "w") as sink:
        w = pa.ipc.new_stream(sink, fmt.table_schema("grads"))
        w.write_batch(pa.record_batch([pa.array([0], pa.int64()), pa.array([99], pa.int32()),
                                       pa.array([1.0], pa.float32())], schema=fmt.table_schema("grads")))
        w.close()
    with pytest.raises(RunDirError, match=r"grads data is unreadable \(layer_id outside 0..4\)"):
        open_run(run_dir).grad_norms()


def test_older_minor_is_upgraded_through_explicit_steps(tmp_path, monkeypatch):
    run_dir = tmp_path / "r"
    _record(run_dir, steps=1)
    m = json.loads((run_dir / "manifest.json").read_text())
    m["schema_version"] = "1.3"
    (run_dir / "manifest.json").write_text(json.dumps(m))
    monkeypatch.setattr(fmt, "SCHEMA_MINOR", 4)  # a future 1.4 without its step yet
    with pytest.raises(SchemaVersionError, match="no upgrade step from schema 1.3"):
        open_run(run_dir)
    monkeypatch.setitem(fmt.UPGRADES, (1, 3), lambda man: {**man, "upgraded": True})
    run = open_run(run_dir)
    assert run.manifest["upgraded"] is True and run.manifest["_read_as_version"] == "1.4"
    m["schema_version"] = "1.0"  # 1.0 goes through every step
    (run_dir / "manifest.json").write_text(json.dumps(m))
    assert open_run(run_dir).manifest["_read_as_version"] == "1.4"


def test_newer_minor_is_read(tmp_path):
    run_dir = tmp_path / "r"
    _record(run_dir, steps=2)
    m = json.loads((run_dir / "manifest.json").read_text())
    m["schema_version"] = "1.7"
    m["some_future_field"] = {"x": 1}
    (run_dir / "manifest.json").write_text(json.dumps(m))
    assert len(open_run(run_dir).steps()) == 2


def test_status_of_a_run_without_rank_folders(tmp_path):
    """A profile-only run has no writer to wait for; a Recorder's run without a rank
    folder died before its first heartbeat."""
    run_dir = tmp_path / "p"
    run_dir.mkdir()
    (run_dir / fmt.MANIFEST).write_text(json.dumps({"schema_version": fmt.SCHEMA_VERSION,
                                                     "name": "profile-only"}))
    assert open_run(run_dir).status == "finished"
    (run_dir / fmt.MANIFEST).write_text(json.dumps({"schema_version": fmt.SCHEMA_VERSION,
                                                     "name": "r", "model_class": "torch.nn.Linear"}))
    assert open_run(run_dir).status == "crashed"
