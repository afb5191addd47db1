"""The HF Trainer callback on a tiny BertForSequenceClassification built from a config
(examples/hf_bert_digits.py, no download): healthy, out-of-range label, NaN target."""

from __future__ import annotations

import json

import pytest

from debugkit.io.run import open_run

from .conftest import checks, debugkit, diagnose, replay, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("hf")


def _capture(path):
    (rec,) = [json.loads(p.read_text()) for p in (path / "failures").glob("*/failure.json")]
    return rec


def test_healthy_run_records_steps_norms_and_trainer_logs(work):
    proc = train(work, "hf_bert_digits", "healthy", "--epochs", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = diagnose(work, "healthy")
    assert rep["status"] == "finished"
    assert not [f for f in rep["findings"] if f["kind"] in ("step_failure", "nonfinite_grad")]
    run = open_run(work / "healthy")
    steps = run.steps()
    assert list(steps["step"]) == list(range(20))  # 640 samples / 32 = 20 optimizer steps
    grads = run.grad_norms()
    assert grads.groupby("layer").size().eq(20).all()
    assert "bert.embeddings.word_embeddings.weight" in set(grads["layer"])
    keys = set(run.scalars()["key"])
    # The Trainer's AdamW has two parameter groups (with and without weight decay).
    assert {"loss", "grad_norm", "learning_rate", "epoch", "lr/0", "lr/1"} <= keys
    m = run.manifest
    assert m["model_factory"] == "debugkit.integrations.transformers:model_from_config"
    assert m["factory_kwargs"]["architecture"] == "BertForSequenceClassification"
    assert len(m["factory_kwargs"]["config"]["id2label"]) == 10  # num_labels, as the config stores it
    assert m["num_classes"] == 10
    assert debugkit(work, "replay", "healthy").returncode == 2


def test_out_of_range_label_is_captured_in_the_forward_and_replayed(work):
    proc = train(work, "hf_bert_digits", "bad-label", "--corrupt-label", "12")
    assert proc.returncode == 1 and "IndexError: Target 12 is out of bounds." in proc.stderr
    rep = diagnose(work, "bad-label")
    (f,) = [f for f in rep["findings"] if f["kind"] == "step_failure"]
    assert f["evidence"]["error_type"] == "IndexError"
    rec = _capture(work / "bad-label")
    assert rec["kind"] == "exception" and rec["step"] == f["step"]
    assert rec["optimizer_stepped"] is False
    r = replay(work, "bad-label")
    assert r["reproduced"] is True and r["same_error"] is True
    assert r["original"] == {"type": "IndexError", "message": "Target 12 is out of bounds.",
                             "step": f["step"]}
    assert r["replay"]["message"] == "Target 12 is out of bounds."
    assert checks(r)["captured_state"] is True and checks(r)["labels"] is False
    assert r["culprit"]["input"] == "batch['labels']"
    # the Trainer's sampler is tracked: the culprit names the dataset index (row 37)
    assert r["culprit"]["dataset_index"] == 37
    assert r["culprit"]["detail"].startswith(
        f"sample {r['culprit']['sample_index']} (dataset index 37) has label 12")
    assert [(x["role"], x["status"]) for x in r["code"]] == [("model_factory", "verified"),
                                                            ("step_fn", "verified")]


def test_nan_target_is_captured_before_the_optimizer_step_and_replayed(work):
    proc = train(work, "hf_bert_digits", "nan", "--missing-target")
    assert proc.returncode == 1 and "NonFiniteError" in proc.stderr
    rep = diagnose(work, "nan")
    assert "nonfinite_grad" in [f["kind"] for f in rep["findings"]]
    rec = _capture(work / "nan")
    assert rec["kind"] == "nonfinite"
    assert rec["nonfinite"]["state_after_optimizer_step"] is False
    r = replay(work, "nan")
    assert checks(r)["captured_state"] is True
    assert checks(r)["finite_inputs"] is False
    assert r["culprit"]["input"] == "batch['labels']"
    assert r["culprit"]["dataset_index"] == 37  # the Trainer's sampler is tracked
    assert r["culprit"]["detail"] == \
        f"sample {r['culprit']['sample_index']} (dataset index 37) of batch['labels'] holds NaN"
    assert r["reproduced"] is True
