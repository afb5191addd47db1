"""Replay every sample failure through the CLI and check its JSON field by field.

Each expectation is backed by an independent look at the data the sample was made
from (the corrupted row, the 0/0 tumours, the singleton class, the unseen category).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import ROOT, check, replay_json, run_cli

SAMPLES = ROOT / "sample_runs"
KEYS = ["failure", "device", "reproduced", "same_error", "original", "replay", "culprit", "checks"]


@pytest.fixture(scope="module")
def reports():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = replay_json(SAMPLES / name, "--device", "cpu")
        return cache[name]
    return get


def oks(report):
    return {c["name"]: c["ok"] for c in report["checks"]}


def test_corrupted_label(reports):
    r = reports("digits-bad-label")
    assert list(r)[:len(KEYS)] == KEYS
    assert r["failure"] == "r0-s0000075-exception"
    assert r["device"] == "cpu"
    assert r["reproduced"] is True and r["same_error"] is True
    assert r["original"] == {"type": "IndexError", "message": "Target 12 is out of bounds.", "step": 75}
    assert r["replay"]["type"] == "IndexError"
    assert r["replay"]["message"] == "Target 12 is out of bounds."
    assert r["replay"]["seconds"] > 0
    c = r["culprit"]
    assert (c["module"], c["op"], c["input"], c["sample_index"], c["dataset_index"]) == \
        (None, None, "batch[1]", 6, 1474)
    assert c["detail"].startswith("sample 6 (dataset index 1474) has label 12, outside [0, 10)")
    # Dataset index 1474 is row 37 of the stage-2 data (stage 1 holds 80 % of 1797 rows).
    assert 1474 - int(0.8 * 1797) == 37
    assert oks(r) == {"captured_state": True, "labels": False, "embedding_indices": None,
                      "finite_inputs": True, "shapes": True, "dtype_device": True,
                      "finite_forward": True, "finite_backward": None}
    assert check(r, "labels")["detail"] == ("1 of 32 labels of batch[1] are outside [0, 10) "
                                            "(num_classes): sample 6 (dataset index 1474) has label 12")
    assert r["ran"]["mode"] == "cross_entropy"
    assert r["cross_check"] is None
    assert [(x["role"], x["status"]) for x in r["code"]] == [("model_factory", "verified")]


def test_shape_mismatch_from_a_missing_feature(reports):
    r = reports("wine-missing-feature")
    assert r["failure"] == "r0-s0000011-exception"
    assert (r["reproduced"], r["same_error"]) == (True, True)
    msg = "mat1 and mat2 shapes cannot be multiplied (16x12 and 13x32)"
    assert r["original"] == {"type": "RuntimeError", "message": msg, "step": 11}
    assert (r["replay"]["type"], r["replay"]["message"]) == ("RuntimeError", msg)
    c = r["culprit"]
    assert (c["module"], c["op"], c["input"], c["sample_index"], c["dataset_index"]) == \
        ("encoder.0", None, "batch[0]", None, None)
    assert c["detail"] == "`encoder.0` (Linear) expects last dimension 13 (in_features); got input of shape [16, 12]"
    assert oks(r)["shapes"] is False
    assert [k for k, v in oks(r).items() if v is False] == ["shapes"]


def test_nan_input_sample(reports):
    r = reports("cancer-nan-input")
    assert r["failure"] == "r0-s0000002-nonfinite"
    assert (r["reproduced"], r["same_error"]) == (True, True)
    assert r["original"]["type"] == "NonFiniteError"
    assert r["original"]["message"] == ("step 2: loss 'loss' is nan; gradient norm of '0.weight' "
                                        "is non-finite (6 layers in all)")
    assert r["replay"]["type"] == "NonFiniteError"
    assert r["replay"]["message"] == "loss is nan; gradient norm of '0.weight' is non-finite (6 layers in all)"
    c = r["culprit"]
    assert (c["module"], c["op"], c["input"], c["sample_index"], c["dataset_index"]) == \
        ("0", None, "batch[0]", 8, 568)
    assert c["detail"] == "sample 8 (dataset index 568) of batch[0] holds NaN in feature 30"
    assert r["culprit_positions"] == [30]
    # Tumour 568 is one of the 13 whose concavity and concave points are both exactly 0.
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer(as_frame=True).data
    assert d.loc[568, "mean concavity"] == 0 and d.loc[568, "mean concave points"] == 0
    assert oks(r)["finite_inputs"] is False
    assert oks(r)["finite_backward"] is None  # not judged: the forward was already NaN


def test_nan_born_in_sqrt_backward(reports):
    r = reports("digits-metric-zero-distance")
    assert r["failure"] == "r0-s0000022-nonfinite"
    assert (r["reproduced"], r["same_error"]) == (True, True)
    assert r["original"]["message"] == ("step 22: gradient norm of 'embed.0.weight' is non-finite "
                                        "(4 layers in all)")
    assert r["replay"]["message"] == "gradient norm of 'embed.0.weight' is non-finite (4 layers in all)"
    c = r["culprit"]
    assert (c["module"], c["op"], c["input"], c["sample_index"], c["dataset_index"]) == \
        ("distance", "SqrtBackward0", None, 7, 533)
    assert "torch.sqrt(((a - b) ** 2).sum(dim=1))" in c["detail"]
    assert oks(r) == {"captured_state": True, "labels": None, "embedding_indices": None,
                      "finite_inputs": True, "shapes": True, "dtype_device": True,
                      "finite_forward": True, "finite_backward": False}
    assert r["ran"]["mode"] == "step_fn"
    # Sample 7's class has no other sample in the batch, so it was paired with itself.
    from debugkit.io.run import open_run
    from debugkit.replay.loading import load_batch

    x, y = load_batch(open_run(SAMPLES / "digits-metric-zero-distance").failure(r["failure"]))
    assert int((y == y[7]).sum()) == 1


def test_embedding_index_out_of_range(reports):
    r = reports("credit-unseen-category")
    assert r["failure"] == "r0-s0000025-exception"
    assert (r["reproduced"], r["same_error"]) == (True, True)
    assert r["original"] == {"type": "IndexError", "message": "index out of range in self", "step": 25}
    c = r["culprit"]
    assert (c["module"], c["op"], c["input"], c["sample_index"], c["dataset_index"]) == \
        ("encoder.embeds.personal_status_and_sex", None, "batch['categorical']", 2, 961)
    assert c["detail"] == ("sample 2 (dataset index 961) at position 5 of batch['categorical'] holds "
                           "index 3, outside [0, 3) of `encoder.embeds.personal_status_and_sex`")
    assert r["culprit_positions"] == [5]
    assert check(r, "embedding_indices")["detail"] == (
        "`encoder.embeds.personal_status_and_sex` (Embedding, num_embeddings=3) got index 3 in "
        "sample 2 (dataset index 961) at position 5 of batch['categorical']; 7 of 32 indices are "
        "outside [0, 3) in 7 sample(s)")
    # Position 5 of the codes is the sixth categorical column of the CSV.
    # Application 961 is one of the later ones, with the category the first 800 never had.
    import pandas as pd

    frame = pd.read_csv(Path(__file__).resolve().parents[2] / "examples" / "data" / "german_credit.csv")
    categorical = [k for k in frame.columns if k != "creditability"
                   and not pd.api.types.is_numeric_dtype(frame[k])]
    assert categorical[5] == "personal_status_and_sex"
    assert frame.loc[961, "personal_status_and_sex"] == "male : married/widowed"
    assert "male : married/widowed" not in set(frame.loc[:799, "personal_status_and_sex"])
    assert [x["role"] for x in r["code"]] == ["model_factory", "step_fn"]


def test_text_output_names_the_culprit_and_what_to_do():
    proc = run_cli("replay", SAMPLES / "digits-bad-label", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "reproduced: yes (same error)" in proc.stdout
    assert "input=batch[1], sample_index=6, dataset_index=1474" in proc.stdout
    assert "to do:      Validate labels in the dataset: sample 6 (dataset index 1474) has label 12" in proc.stdout
    assert proc.stderr == ""


def test_cuda_failure_replayed_on_this_cpu_says_so(tmp_path):
    """A device-side assert captured on CUDA, replayed on a machine without CUDA."""
    import shutil

    run = tmp_path / "cuda-run"
    shutil.copytree(SAMPLES / "digits-bad-label", run)
    fj = run / "failures" / "r0-s0000075-exception" / "failure.json"
    rec = json.loads(fj.read_text())
    rec.update(device="cuda:0", error_type="AcceleratorError", error_module="torch",
               message="CUDA error: device-side assert triggered\nCUDA kernel errors might be "
                       "asynchronously reported at some other API call")
    fj.write_text(json.dumps(rec))
    r = replay_json(run)
    assert r["device"] == "cpu"
    assert r["reproduced"] is False  # IndexError on the CPU, AcceleratorError on CUDA
    assert r["replay"]["type"] == "IndexError"
    assert (r["culprit"]["sample_index"], r["culprit"]["dataset_index"]) == (6, 1474)
    assert any("happened on cuda:0; this replay ran on the CPU" in n for n in r["notes"])
    assert r["cross_check"] is None
