"""Reading a capture for replay: which one, its files' digests, batch paths, sample values."""

from __future__ import annotations

import json
import shutil

import pytest

from debugkit.errors import InvalidInputError, ReplayError
from debugkit.io.run import open_run
from debugkit.replay import loading as L

from .conftest import ROOT

SAMPLE = ROOT / "sample_runs" / "digits-bad-label"
FID = "r0-s0000075-exception"


@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(SAMPLE, dst)
    return dst


def test_select_failure_default_and_by_id():
    run = open_run(SAMPLE)
    assert L.select_failure(run)["id"] == FID
    assert L.select_failure(run, FID)["step"] == 75


@pytest.mark.parametrize("fid, match", [
    ("r0-s0000001-exception", r"no failure capture 'r0-s0000001-exception'; captures: r0-s0000075-exception"),
    ("../etc", r"failure id '../etc': expected an id like 'r0-s0000075-exception'"),
    ("r0-s75-exception", r"failure id 'r0-s75-exception': expected an id like"),
    ("", r"failure id '': expected"),
])
def test_select_failure_refuses(fid, match):
    with pytest.raises((ReplayError, InvalidInputError), match=match):
        L.select_failure(open_run(SAMPLE), fid)


def test_no_captures():
    with pytest.raises(ReplayError, match=r"digits-mlp: no failure captures"):
        L.select_failure(open_run(ROOT / "sample_runs" / "digits-mlp"))


def test_verify_files_of_a_good_capture():
    assert L.verify_files(open_run(SAMPLE).failure(FID)) == {"batch": True, "model": True, "rng": True}


def test_an_edited_batch_is_refused_and_left_alone(copy):
    p = copy / "failures" / FID / "batch.json"
    p.write_text(p.read_text().replace('"shape"', '"shape" '))
    before = p.read_bytes()
    with pytest.raises(ReplayError, match=r"batch.json: SHA-256 [0-9a-f]{16}… differs from the "
                                          r"[0-9a-f]{16}… that failure.json recorded"):
        L.verify_files(open_run(copy).failure(FID))
    assert p.read_bytes() == before


def test_a_missing_batch_file_is_refused(copy):
    (copy / "failures" / FID / "batch.safetensors").unlink()
    with pytest.raises(ReplayError, match=r"batch.safetensors: missing from the capture \(batch\)"):
        L.verify_files(open_run(copy).failure(FID))


def test_a_batch_that_was_not_captured_is_refused(copy):
    fj = copy / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    del rec["files"]["batch"]
    rec["capture_errors"] = {"batch": "RuntimeError: CUDA error: device-side assert triggered"}
    fj.write_text(json.dumps(rec))
    with pytest.raises(ReplayError, match=r"the batch was not captured \(RuntimeError: CUDA error"):
        L.verify_files(open_run(copy).failure(FID))


def test_a_missing_model_part_is_tolerated(copy):
    fj = copy / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    del rec["files"]["model"]
    fj.write_text(json.dumps(rec))
    assert L.verify_files(open_run(copy).failure(FID))["model"] is False


def test_refused_file_names(copy):
    fj = copy / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    rec["files"]["batch"] = ["../../manifest.json", "batch.json"]
    fj.write_text(json.dumps(rec))
    with pytest.raises(ReplayError, match="refused file name"):
        L.verify_files(open_run(copy).failure(FID))


@pytest.mark.parametrize("tokens, text", [
    ((), "batch"), ((1,), "batch[1]"), (("x", 0), "batch['x'][0]"),
    (("it's",), 'batch["it\'s"]'),
])
def test_paths_round_trip(tokens, text):
    assert L.format_path(tokens) == text
    assert L.parse_path(text) == tokens


@pytest.mark.parametrize("text", ["x[0]", "batch[", "batch[a]", "batch.x", 3])
def test_bad_paths(text):
    with pytest.raises(InvalidInputError, match="batch path"):
        L.parse_path(text)


def test_read_sample_values():
    rec = open_run(SAMPLE).failure(FID)
    label = L.read_sample(rec, "batch[1]", 6)
    assert list(label.columns) == ["position", "value", "finite"]
    assert label.to_dict("records") == [{"position": "()", "value": 12.0, "finite": True}]
    pixels = L.read_sample(rec, "batch[0]", 6)
    assert len(pixels) == 64 and pixels["position"].iloc[63] == "63"
    assert pixels["value"].between(0, 1).all()


@pytest.mark.parametrize("path, sample, match", [
    ("batch[1]", 32, r"sample 32: expected 0..31 for batch\[1\]"),
    ("batch[1]", -1, r"sample -1: expected 0..31"),
    ("batch[5]", 0, r"batch\[5\]: not in the batch"),
])
def test_read_sample_refuses(path, sample, match):
    with pytest.raises(InvalidInputError, match=match):
        L.read_sample(open_run(SAMPLE).failure(FID), path, sample)


def test_factory_kwargs_fall_back_to_the_manifest():
    run = open_run(SAMPLE)
    assert L.factory_kwargs(run.failure(FID), run.manifest) == {"hidden": 64}
    assert L.factory_kwargs({"factory_kwargs": {"a": 1}}, {"factory_kwargs": {"hidden": 64}}) == {"a": 1}
