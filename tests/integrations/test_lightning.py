"""The Lightning callback on a real two-layer LightningModule (examples/lightning_train.py):
a healthy run, an out-of-range label, a NaN, each checked through `debugkit diagnose` and
`debugkit replay`, and a 2-process DDP run on the CPU."""

from __future__ import annotations

import json

import pytest

from debugkit.io.run import open_run

from .conftest import checks, debugkit, diagnose, kinds, related, replay, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("lightning")


@pytest.fixture(scope="module")
def healthy(work):
    proc = train(work, "lightning_train", "healthy")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return "healthy"


@pytest.fixture(scope="module")
def bad_label(work):
    proc = train(work, "lightning_train", "bad-label", "--corrupt-label", "12")
    assert proc.returncode == 1 and "IndexError: Target 12 is out of bounds." in proc.stderr
    return "bad-label"


@pytest.fixture(scope="module")
def nan(work):
    proc = train(work, "lightning_train", "nan", "--data", "cancer")
    assert proc.returncode == 1 and "NonFiniteError" in proc.stderr
    return "nan"


def test_healthy_run_records_every_step_norms_and_logged_values(work, healthy):
    rep = diagnose(work, healthy)
    assert rep["status"] == "finished"
    assert kinds(rep) == []
    run = open_run(work / healthy)
    steps = run.steps()
    assert list(steps["step"]) == list(range(40))  # 2 epochs x 20 batches of 32
    assert bool(steps["ok"].all())
    grads = run.grad_norms()
    assert sorted(set(grads["layer"])) == sorted(["net.0.weight", "net.0.bias", "net.2.weight",
                                                  "net.2.bias", "__total__"])
    assert grads.groupby("layer").size().eq(40).all()
    scalars = run.scalars()
    assert {"train_loss", "train_acc", "lr"} <= set(scalars["key"])
    assert "loss" not in set(scalars["key"])  # the module logs its loss as train_loss
    loss = scalars[scalars["key"] == "train_loss"].sort_values("step")["value"].tolist()
    assert len(loss) == 40 and loss[-1] < loss[0]
    m = run.manifest
    assert m["model_factory"] == "examples.lightning_train:Classifier"
    assert m["factory_kwargs"] == {"n_features": 64, "num_classes": 10, "hidden": 32, "lr": 0.1}
    assert m["step_fn"] == "debugkit.integrations.lightning:replay_training_step"
    assert m["num_classes"] == 10
    assert m["config"]["trainer"]["max_epochs"] == 2
    # A run without a failure has nothing to replay: the CLI says so, exit status 2.
    proc = debugkit(work, "replay", healthy, "--json")
    assert proc.returncode == 2 and "debugkit: error:" in proc.stderr


def test_out_of_range_label_is_captured_and_replayed(work, bad_label):
    rep = diagnose(work, bad_label)
    assert rep["status"] == "failed"
    (f,) = [f for f in rep["findings"] if f["kind"] == "step_failure"]
    ev = f["evidence"]
    assert ev["error_type"] == "IndexError" and ev["capture_kind"] == "exception"
    assert 37 in ev["dataset_indices"] and len(ev["dataset_indices"]) == 32
    r = replay(work, bad_label)
    assert r["failure"] == ev["failure"]
    assert r["reproduced"] is True and r["same_error"] is True
    assert r["original"] == {"type": "IndexError", "message": "Target 12 is out of bounds.",
                             "step": f["step"]}
    assert r["replay"]["type"] == "IndexError"
    c = r["culprit"]
    assert (c["input"], c["dataset_index"]) == ("batch[1]", 37)
    assert c["detail"].startswith(f"sample {c['sample_index']} (dataset index 37) has label 12")
    assert checks(r)["labels"] is False and checks(r)["captured_state"] is True
    assert r["ran"]["mode"] == "step_fn"
    assert [(x["role"], x["spec"], x["status"]) for x in r["code"]] == [
        ("model_factory", "examples.lightning_train:Classifier", "verified"),
        ("step_fn", "debugkit.integrations.lightning:replay_training_step", "verified")]


def test_nan_gradients_are_captured_before_the_optimizer_step(work, nan):
    rep = diagnose(work, nan)
    assert rep["status"] == "failed"
    ks = [k for k, _ in kinds(rep)]
    # one fact, one finding: the capture is the NaN gradients' evidence, not a second finding
    assert "nonfinite_grad" in ks and "step_failure" not in ks
    assert "step_failure" in related(rep, "nonfinite_grad")
    run = open_run(work / nan)
    (rec,) = [json.loads(p.read_text()) for p in (work / nan / "failures").glob("*/failure.json")]
    assert rec["kind"] == "nonfinite"
    assert rec["nonfinite"]["state_after_optimizer_step"] is False
    assert rec["nonfinite"]["loss_keys"] == ["train_loss"]  # the logged loss was seen in time
    assert rec["nonfinite"]["detected"].startswith("after backward (record_grads)")
    assert len(rec["dataset_indices"]) == 32
    assert sorted(rec["files"]) == ["batch", "batch_spec", "model", "optimizer", "rng"]
    # Every NaN in the batch is in the 0/0 feature (column 30) of a tumour without concavity.
    r = replay(work, nan)
    assert r["reproduced"] is True
    assert checks(r)["finite_inputs"] is False
    assert r["culprit"]["input"] == "batch[0]"
    assert r["culprit"]["dataset_index"] in rec["dataset_indices"]
    assert r["original"]["step"] == rec["step"] == run.steps()["step"].max()


def test_two_process_ddp_run_records_each_rank(work):
    proc = train(work, "lightning_train", "ddp", "--devices", "2", "--epochs", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = open_run(work / "ddp")
    assert run.manifest["world_size"] == 2
    assert run.manifest["distributed"]["backend"] == "gloo"
    steps = run.steps()
    # DistributedSampler: each rank gets 320 of the 640 images, 10 batches of 32.
    assert steps.groupby("rank").size().to_dict() == {0: 10, 1: 10}
    mem = run.memory()
    assert sorted(set(mem["rank"])) == [0, 1] and bool((mem["rss_bytes"] > 0).all())
    assert sorted(set(run.grad_norms()["rank"])) == [0, 1]
    rep = diagnose(work, "ddp")
    assert rep["status"] == "finished"
