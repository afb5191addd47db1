"""Replay from a checkpoint's weights, and the batch guard a capture suggests."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from debugkit import Recorder, open_run
from debugkit.checkpoints import DIR, read_index
from debugkit.errors import ReplayError
from debugkit.replay import replay
from debugkit.replay.guard_suggestion import suggest_guard
from tests.conftest import ROOT

SAMPLES = ROOT / "sample_runs"


def _run_with_checkpoints_then_bad_label(run_dir):
    """A real run of the tiny project's model: 4 healthy steps, a checkpoint after each
    even one, then a batch with label 7 for 2 classes."""
    import importlib

    torch.manual_seed(0)
    model = importlib.import_module("tproj.model").build_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    rec = Recorder(run_dir, model, optimizer=opt, model_factory="tproj.model:build_model",
                   num_classes=2, flush_every_s=0.1)
    with pytest.raises(IndexError):
        with rec:
            for s in range(5):
                x = torch.randn(6, 3)
                y = torch.randint(0, 2, (6,)) if s < 4 else torch.tensor([0, 1, 7, 0, 1, 1])
                with rec.step((x, y)):
                    loss = F.cross_entropy(model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                if s % 2 == 1:
                    rec.checkpoint(step=s + 1)
    return run_dir


def test_replay_with_a_checkpoints_weights(project, tmp_path):
    run = _run_with_checkpoints_then_bad_label(tmp_path / "r")
    plain = replay(run, device="cpu")
    assert plain["weights"] == {"from": "capture"}
    rep = replay(run, device="cpu", checkpoint=2)
    assert rep["weights"]["from"] == "checkpoint" and rep["weights"]["step"] == 2
    assert rep["weights"]["path"].endswith("checkpoints/000000002/model.safetensors")
    assert rep["reproduced"] and rep["culprit"]["sample_index"] == 2  # label 7 fails with any weights
    assert any("weights of the checkpoint at step 2" in n for n in rep["notes"])
    with pytest.raises(ReplayError, match=r"no checkpoint at that step \(it has: 2, 4\)"):
        replay(run, device="cpu", checkpoint=3)
    entry = [e for e in read_index(run) if e["step"] == 4][0]
    f = run / DIR / entry["dir"] / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(ReplayError, match="checkpoint at step 4: model.safetensors has"):
        replay(run, device="cpu", checkpoint=4)


def test_cli_replay_checkpoint(project, tmp_path):
    from tests.replay.conftest import replay_json, run_cli

    run = _run_with_checkpoints_then_bad_label(tmp_path / "r")
    rep = replay_json(run, "--device", "cpu", "--checkpoint", "4", cwd=project)
    assert rep["weights"]["step"] == 4
    proc = run_cli("replay", run, "--device", "cpu", "--checkpoint", "9", cwd=project)
    assert proc.returncode == 2 and "no checkpoint at that step" in proc.stderr


def test_capture_stores_the_spec_of_the_healthy_batches(project, tmp_path):
    run = open_run(_run_with_checkpoints_then_bad_label(tmp_path / "r"))
    f = run.failures()[0]
    g = suggest_guard(f)
    assert g.source == "healthy_batches" and g.healthy_batches == 4
    assert g.spec.tensors["1"].range == (0, 2) and g.catches
    v = g.violations[0]
    assert (v.tensor, v.sample, v.rule) == ("1", 2, "range") and "value 7 outside [0, 2)" in v.message


@pytest.mark.parametrize("sample, rule, needle", [
    ("digits-bad-label", "range", "dataset index 1474): value 12 outside [0, 10)"),
    ("cancer-nan-input", "finite", "contains NaN"),
    ("wine-missing-feature", "shape", "dim 1 is 12, expected 13"),
])
def test_samples_guard_would_have_stopped_the_batch(sample, rule, needle):
    run = open_run(SAMPLES / sample)
    g = suggest_guard(run.failures()[0], run.manifest.get("num_classes"))
    assert g.source == "healthy_batches" and g.healthy_batches > 0
    assert g.catches and g.violations[0].rule == rule and needle in str(g.violations[0])


@pytest.mark.parametrize("sample", ["digits-exploding", "digits-metric-zero-distance"])
def test_a_model_side_failure_passes_the_guard(sample):
    run = open_run(SAMPLES / sample)
    g = suggest_guard(run.failures()[0], run.manifest.get("num_classes"))
    assert g.source == "healthy_batches" and not g.catches and not g.problem


def test_a_capture_without_a_learned_spec_falls_back_to_the_batch(tmp_path):
    shutil.copytree(SAMPLES / "digits-bad-label", tmp_path / "r")
    run = open_run(tmp_path / "r")
    f = run.failures()[0]
    (tmp_path / "r" / "failures" / f["id"] / "batch_spec.json").unlink()
    g = suggest_guard(f, run.manifest.get("num_classes"))
    assert g.source == "captured_batch" and g.catches
    assert str(g.violations[0]).endswith("value 12 outside [0, 10) [rule: range]")
