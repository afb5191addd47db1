"""The persisted run-list index: what each run's analyses found, kept until the run changes."""

from __future__ import annotations

import json
import shutil
import time
import uuid

import fsspec
import pytest
import torch

from debugkit import Recorder
from debugkit import format as fmt
from debugkit.diagnose import run_summaries as run_index
from debugkit.io import served_runs
from debugkit.io.fs import as_path, files_signature
from tests._training import train_step


def _record(run_dir, steps, *, fail_at=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        with Recorder(run_dir, model, optimizer=opt, flush_every_s=0.05) as rec:
            for s in range(steps):
                x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
                if fail_at == s:
                    y = torch.full((8,), 7)  # out of range for 2 classes: the step raises
                train_step(rec, model, opt, (x, y))
    except IndexError:
        assert fail_at is not None
    # The Recorder writes env.json (pip check) from a thread: wait for it, so that the
    # run does not change under the test.
    deadline = time.monotonic() + 120
    while not (run_dir / fmt.ENV_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (run_dir / fmt.ENV_FILE).exists()


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    _record(root / "healthy", 12)
    _record(root / "broken", 12, fail_at=5)
    return root


def _entries(root):
    return served_runs.find_runs([root])


def test_one_listing_gives_each_runs_files_signature(runs, sample_runs, tmp_path):
    sigs = run_index.store_signatures(runs)
    assert set(sigs) == {"healthy", "broken"}
    for name, sig in sigs.items():
        assert sig == files_signature(runs / name)
    shutil.copytree(sample_runs / "ddp-hang", tmp_path / "s" / "ddp-hang")
    assert run_index.store_signatures(tmp_path / "s")["ddp-hang"] == files_signature(tmp_path / "s" / "ddp-hang")


def test_rows_come_from_the_index_until_the_run_changes(runs, monkeypatch):
    before = {p: p.read_bytes() for p in runs.rglob("*") if p.is_file()}
    first = {r["id"]: r for r in run_index.summarize_runs(_entries(runs))}
    assert not first["healthy"]["cached"] and not first["broken"]["cached"]
    assert first["healthy"]["status"] == "finished" and first["healthy"]["steps"] == 12
    assert first["healthy"]["errors"] == first["healthy"]["failures"] == 0
    assert first["broken"]["status"] == "failed" and first["broken"]["steps"] == 6
    assert first["broken"]["failures"] == 1 and first["broken"]["errors"] >= 1
    assert first["broken"]["top"].startswith("step_failure: Step 5")

    # Unchanged runs are not analysed again: diagnose is not even called.
    import importlib

    diagnose_pkg = importlib.import_module("debugkit.diagnose")  # debugkit.diagnose is the function

    def boom(*a, **k):
        raise AssertionError("diagnose ran for an unchanged run")

    with monkeypatch.context() as m:
        m.setattr(diagnose_pkg, "diagnose", boom)
        second = {r["id"]: r for r in run_index.summarize_runs(_entries(runs))}
    assert second["healthy"]["cached"] and second["broken"]["cached"]
    for rid in ("healthy", "broken"):
        assert {k: v for k, v in second[rid].items() if k != "cached"} == \
            {k: v for k, v in first[rid].items() if k != "cached"}

    # The run's own change (a resumed recording appends rows) invalidates its entry only.
    _record(runs / "healthy", 3, fail_at=1)
    third = {r["id"]: r for r in run_index.summarize_runs(_entries(runs))}
    assert not third["healthy"]["cached"] and third["healthy"]["status"] == "failed"
    assert third["healthy"]["failures"] == 1 and third["healthy"]["errors"] >= 1
    assert third["broken"]["cached"]
    # The index never writes into the runs.
    after = {p: p.read_bytes() for p in (runs / "broken").rglob("*") if p.is_file()}
    assert after == {p: b for p, b in before.items() if "broken" in p.parts}


def test_a_torn_or_foreign_index_file_is_analysed_again(runs):
    (entry,) = [e for e in _entries(runs) if e.id == "healthy"]
    folder = run_index.index_dir()
    run_index.summarize_run(entry)
    (file,) = list(folder.glob("*.json"))
    file.write_text('{"version": 1, "row": ')  # torn
    row = run_index.summarize_run(entry)
    assert not row["cached"] and row["steps"] == 12
    data = json.loads(file.read_text())
    data["signature"] = "0" * 32  # written for other files
    data["row"]["steps"] = 999
    file.write_text(json.dumps(data))
    row = run_index.summarize_run(entry)
    assert not row["cached"] and row["steps"] == 12


def test_a_cached_running_status_is_read_again(runs):
    (entry,) = [e for e in _entries(runs) if e.id == "healthy"]
    run_index.summarize_run(entry)
    (file,) = list(run_index.index_dir().glob("*.json"))
    data = json.loads(file.read_text())
    data["row"]["status"] = "running"  # as if indexed while the run was live
    file.write_text(json.dumps(data))
    row = run_index.summarize_run(entry)
    assert row["cached"] and row["status"] == "finished"


def test_an_unreadable_run_gets_a_row_that_says_why(runs):
    (runs / "broken" / "manifest.json").write_text("{not json")
    rows = {r["id"]: r for r in run_index.summarize_runs(_entries(runs))}
    assert rows["broken"]["status"] == "unreadable" and rows["broken"]["errors"] is None
    assert rows["broken"]["top"].startswith("cannot analyse: ") and "manifest.json" in rows["broken"]["top"]
    assert rows["healthy"]["status"] == "finished"


def test_fsspec_store_is_listed_once_and_indexed(runs):
    fs = fsspec.filesystem("memory")
    root = f"dk-{uuid.uuid4().hex[:8]}"
    fs.put(str(runs / "healthy"), f"/{root}/runs/healthy", recursive=True)
    fs.put(str(runs / "broken"), f"/{root}/runs/broken", recursive=True)
    try:
        url = f"memory://{root}/runs"
        sigs = run_index.store_signatures(url)
        assert sigs["healthy"] == files_signature(as_path(f"{url}/healthy"))
        entries = served_runs.find_runs([as_path(url)])
        first = {r["id"]: r for r in run_index.summarize_runs(entries)}
        assert first["broken"]["failures"] == 1 and not first["broken"]["cached"]
        second = {r["id"]: r for r in run_index.summarize_runs(entries)}
        assert second["broken"]["cached"] and second["healthy"]["steps"] == 12
    finally:
        fs.rm(f"/{root}", recursive=True)
