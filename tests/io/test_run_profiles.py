"""Profiles inside a run directory: the manifest listing, ids, safety."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from debugkit.errors import InvalidInputError, ProfileFileError, RunDirError
from debugkit.format import SCHEMA_VERSION
from debugkit.io import run_profiles as ps
from debugkit.io.run import open_run

from ..conftest import SAMPLE_RUNS

RAW = "main (train.py:5);step (train.py:9) 7\nmain (train.py:5) 3\n"


@pytest.fixture
def run_dir(tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", dst)
    return dst


@pytest.fixture
def raw_file(tmp_path):
    f = tmp_path / "p.txt"
    f.write_text(RAW)
    return f


def test_add_keeps_every_manifest_field_and_lists_the_profile(run_dir, raw_file):
    before = json.loads((run_dir / "manifest.json").read_text())
    src_bytes = raw_file.read_bytes()
    e = ps.add_profile(run_dir, raw_file, name="before", origin="import", info={"label": "x"})
    after = json.loads((run_dir / "manifest.json").read_text())
    assert {k: v for k, v in after.items() if k != "profiles"} == before
    assert [p["id"] for p in after["profiles"]] == ["before"]
    listed = after["profiles"][0]
    assert listed["format"] == "raw" and listed["kind"] == "sampled"
    assert listed["file"] == "profiles/before.raw.txt.gz"
    assert listed["summary"] == {"samples": 10, "threads": 1, "duration_s": None, "rate_hz": None}
    assert listed["label"] == "x" and listed["original_name"] == "p.txt"
    stored = run_dir / "profiles" / "before.raw.txt.gz"
    assert gzip.decompress(stored.read_bytes()) == src_bytes
    assert raw_file.read_bytes() == src_bytes  # the source is untouched
    assert e["path"] == str(stored)
    assert sorted(p.name for p in (run_dir / "profiles").iterdir()) == ["before.raw.txt.gz"]
    run = open_run(run_dir)
    assert [p["id"] for p in run.profiles()] == ["before"]
    assert run.status == "finished"


def test_ids_are_made_unique(run_dir, raw_file):
    ids = [ps.add_profile(run_dir, raw_file, name="p")["id"] for _ in range(3)]
    assert ids == ["p", "p-2", "p-3"]
    assert [p["id"] for p in open_run(run_dir).profiles()] == ids


def test_a_broken_file_is_refused_before_anything_is_written(run_dir, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"$schema": "https://www.speedscope.app/file-format-schema.json", "profiles": [')
    m = (run_dir / "manifest.json").read_bytes()
    with pytest.raises(ProfileFileError, match="ends early"):
        ps.add_profile(run_dir, bad)
    assert (run_dir / "manifest.json").read_bytes() == m
    assert not (run_dir / "profiles").exists() or not any((run_dir / "profiles").iterdir())


def test_a_folder_without_manifest_becomes_a_minimal_run(tmp_path, raw_file):
    e = ps.add_profile(tmp_path / "new", raw_file)
    assert e["created_run"] is True
    run = open_run(tmp_path / "new")
    assert run.manifest["schema_version"] == SCHEMA_VERSION and len(run.profiles()) == 1


@pytest.mark.parametrize("name, match", [("../x", "profile name '../x'"), ("a b", "profile name 'a b'"),
                                         ("", "profile name ''")])
def test_bad_names(run_dir, raw_file, name, match):
    with pytest.raises(InvalidInputError, match=match):
        ps.add_profile(run_dir, raw_file, name=name) if name else ps.validate_profile_id(name)


def test_zip_runs_are_read_only(tmp_path, raw_file):
    z = tmp_path / "r.zip"
    z.write_bytes(b"PK")
    with pytest.raises(RunDirError, match="a zipped run is read-only"):
        ps.add_profile(z, raw_file)


def test_a_broken_manifest_is_not_overwritten(run_dir, raw_file):
    (run_dir / "manifest.json").write_text("{not json")
    with pytest.raises(RunDirError, match="manifest.json is not valid JSON.*not adding a profile"):
        ps.add_profile(run_dir, raw_file)
    assert (run_dir / "manifest.json").read_text() == "{not json"


def test_listing_skips_entries_pointing_outside_and_finds_unlisted_files(run_dir, raw_file, tmp_path):
    ps.add_profile(run_dir, raw_file, name="ok")
    m = json.loads((run_dir / "manifest.json").read_text())
    secret = tmp_path / "secret.raw.txt.gz"
    secret.write_bytes(gzip.compress(RAW.encode()))
    m["profiles"].append({"id": "evil", "kind": "sampled", "format": "raw", "file": "../../secret.raw.txt.gz"})
    m["profiles"].append({"id": "gone", "kind": "sampled", "format": "raw", "file": "profiles/gone.raw.txt.gz"})
    m["profiles"].append("junk")
    (run_dir / "manifest.json").write_text(json.dumps(m))
    (run_dir / "profiles" / "extra.raw.txt.gz").write_bytes(gzip.compress(RAW.encode()))
    run = open_run(run_dir)
    got = run.profiles()
    assert [(p["id"], p["origin"]) for p in got] == [("ok", "import"), ("extra", "unlisted")]
    text = "\n".join(run.warnings)
    assert "profiles[1] (evil): file '../../secret.raw.txt.gz' is missing or outside profiles/" in text
    assert "profiles[2] (gone)" in text and "profiles[3] is malformed" in text
    with pytest.raises(InvalidInputError, match=r"no profile 'evil' \(have: ok, extra\)"):
        ps.get_profile(run, "evil")


def test_a_resumed_recorder_keeps_the_profiles_listing(run_dir, raw_file):
    import torch

    from debugkit import Recorder

    ps.add_profile(run_dir, raw_file, name="kept")
    model = torch.nn.Linear(2, 1)
    with Recorder(run_dir, model, flush_every_s=0.1):
        pass
    m = json.loads((run_dir / "manifest.json").read_text())
    assert [p["id"] for p in m["profiles"]] == ["kept"] and m["resumed_at"]


def test_describe():
    e = {"id": "t", "kind": "sampled", "format": "speedscope", "summary": {"samples": 1234}, "label": "before"}
    assert ps.describe(e) == "t · py-spy · 1,234 samples · before"
    e = {"id": "tr", "kind": "trace", "format": "chrome-trace", "summary": {"events": 10}}
    assert ps.describe(e) == "tr · torch.profiler · 10 trace events"


def test_sample_run_lists_its_three_profiles():
    run = open_run(SAMPLE_RUNS / "digits-profiled")
    assert [(p["id"], p["format"]) for p in run.profiles()] == [
        ("train", "speedscope"), ("train-no-workers", "speedscope"), ("torch-trace", "chrome-trace")]
    assert not run.warnings
