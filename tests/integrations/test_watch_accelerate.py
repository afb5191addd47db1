"""debugkit.watch on an unedited loop, and the plain Recorder under Accelerate
(prepare, accumulate, bf16): healthy, out-of-range label, NaN."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from debugkit.io.run import open_run

from .conftest import ROOT, checks, diagnose, kinds, related, replay, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("loops")


def _capture(path):
    (rec,) = [json.loads(p.read_text()) for p in (path / "failures").glob("*/failure.json")]
    return rec


def test_importing_debugkit_imports_no_framework():
    code = ("import sys, debugkit; debugkit.watch; import debugkit.integrations; "
            "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'transformers', "
            "'accelerate', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("script", ["watch_loop", "accelerate_loop"])
def test_healthy(work, script):
    out = f"{script}-healthy"
    proc = train(work, script, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = diagnose(work, out)
    assert rep["status"] == "finished" and kinds(rep) == []
    run = open_run(work / out)
    n = {"watch_loop": 40, "accelerate_loop": 80}[script]  # 640 images, batches of 32 / 16
    assert list(run.steps()["step"]) == list(range(n))
    assert run.grad_norms().groupby("layer").size().eq(n).all()
    if script == "accelerate_loop":
        assert run.manifest["config"] == {"mixed_precision": "bf16", "gradient_accumulation_steps": 2,
                                          "num_processes": 1, "distributed_type": "NO",
                                          "device": "cpu"}
        assert "loss" in set(run.scalars()["key"])


def test_watch_captures_a_label_error_outside_the_model(work):
    proc = train(work, "watch_loop", "watch-bad", "--corrupt-label", "12")
    assert proc.returncode == 1 and "IndexError: Target 12 is out of bounds." in proc.stderr
    rep = diagnose(work, "watch-bad")
    (f,) = [f for f in rep["findings"] if f["kind"] == "step_failure"]
    rec = _capture(work / "watch-bad")
    assert rec["kind"] == "exception" and rec["error_type"] == "IndexError"
    assert 37 in rec["dataset_indices"]  # w.track(loader)
    assert rec["files"]["batch"] == ["batch.safetensors", "batch.json"]
    # The documented limit: the target never reached the model, so the capture holds the
    # inputs only and replay's forward/backward runs cleanly (not reproduced).
    r = replay(work, "watch-bad")
    assert r["original"] == {"type": "IndexError", "message": "Target 12 is out of bounds.",
                             "step": f["step"]}
    assert r["reproduced"] is False and r["replay"] is None
    assert r["ran"]["mode"] == "forward"
    assert checks(r)["captured_state"] is True and checks(r)["labels"] is None


def test_watch_captures_nan_gradients(work):
    proc = train(work, "watch_loop", "watch-nan", "--data", "cancer")
    assert proc.returncode == 1 and "NonFiniteError" in proc.stderr
    rec = _capture(work / "watch-nan")
    assert rec["kind"] == "nonfinite" and rec["nonfinite"]["detected"] == "optimizer pre-step hook"
    r = replay(work, "watch-nan")
    assert r["reproduced"] is True
    assert checks(r)["finite_inputs"] is False
    c = r["culprit"]
    assert c["input"] == "batch" and c["dataset_index"] in rec["dataset_indices"]
    assert c["detail"].endswith("holds NaN in feature 30")  # the 0/0 ratio column


def test_accelerate_label_error_and_nan(work):
    proc = train(work, "accelerate_loop", "acc-bad", "--corrupt-label", "12")
    assert proc.returncode == 1
    r = replay(work, "acc-bad")
    assert r["reproduced"] is True and r["same_error"] is True
    assert r["original"]["type"] == "IndexError"
    assert r["culprit"]["input"] == "batch[1]"
    assert r["culprit"]["detail"].startswith(f"sample {r['culprit']['sample_index']} has label 12")
    proc = train(work, "accelerate_loop", "acc-nan", "--data", "cancer")
    assert proc.returncode == 1 and "NonFiniteError" in proc.stderr
    rep = diagnose(work, "acc-nan")
    # one fact, one finding: the NaN step is one nonfinite_grad, the loss and the capture its evidence
    assert "nonfinite_grad" in {k for k, _ in kinds(rep)}
    assert not {"nonfinite_loss", "step_failure"} & {k for k, _ in kinds(rep)}
    assert related(rep, "nonfinite_grad") == ["nonfinite_loss", "step_failure"]
    rec = _capture(work / "acc-nan")
    assert rec["nonfinite"]["loss_keys"] == ["loss"]
    r = replay(work, "acc-nan")
    assert r["reproduced"] is True and checks(r)["finite_inputs"] is False
