"""Replay of captured failing inference requests through the console script: the request
is called as the service called the model (keyword tensors, one tensor), forward only
under no_grad in eval mode, and the culprit is named as a service sees it (the input
field, the token id and its position, the shape)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from tests.serve_fixtures import record_service, tagger_traffic, write_project

from .conftest import ROOT, check, replay_json, run_cli
from .test_repro import run_repro


@pytest.fixture
def sproj(tmp_path, monkeypatch):
    root = write_project(tmp_path / "proj")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(root))
    return root


@pytest.fixture
def tagger_run(tmp_path, sproj):
    return record_service(tmp_path / "tagger", factory="sproj.model:build_tagger",
                          traffic=tagger_traffic(12, bad_at=5, bad_token=150))


def test_token_id_out_of_range_is_named_with_its_field_and_position(tagger_run, sproj):
    r = replay_json(tagger_run, "--device", "cpu", env_extra={"PYTHONPATH": str(sproj)})
    assert r["failure"] == "r0-000-req0000005-error"
    assert r["original"]["type"] == "IndexError"
    assert r["original"]["request"] == 5
    assert (r["reproduced"], r["same_error"]) == (True, True)
    assert r["replay"]["type"] == "IndexError"
    assert r["ran"]["mode"] == "request"
    assert r["ran"]["detail"].startswith("model(**inputs) under torch.no_grad() in eval mode")
    q = r["request"]
    assert (q["field"], q["token_id"], q["position"], q["vocab_size"]) == ("input_ids", 150, 3, 100)
    assert (q["shape"], q["dtype"], q["call"]) == ([1, 8], "int64", "kwargs")
    assert q["signature"] == "input_ids:int64[1,8];attention_mask:int64[1,8]"
    assert q["detail"] == ("input field `input_ids` holds token id 150 at position 3, outside "
                           "the vocabulary [0, 100) of `emb`")
    c = r["culprit"]
    assert (c["module"], c["input"], c["sample_index"]) == ("emb", "batch['input_ids']", 0)
    assert check(r, "captured_state")["ok"] is None  # no weights captured, no weights hash
    assert check(r, "embedding_indices")["ok"] is False
    assert check(r, "labels") == {"name": "labels", "ok": None,
                                  "detail": "not applicable: a request carries no labels (inference)"}
    assert check(r, "finite_backward")["ok"] is None
    assert any("vocabulary" in a for a in r["advice"])
    assert any("at the service's edge" in a for a in r["advice"])
    assert r["cross_check"] is None


def test_text_output_names_the_request_and_its_culprit(tagger_run, sproj):
    proc = run_cli("replay", tagger_run, "--device", "cpu", env_extra={"PYTHONPATH": str(sproj)})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "failure:    r0-000-req0000005-error (request 5)" in out
    assert "request:    input_ids:int64[1,8];attention_mask:int64[1,8] called as model(**inputs)" in out
    assert "culprit:    input field `input_ids` holds token id 150 at position 3" in out


def test_shape_and_nonfinite_requests_of_a_one_tensor_model(tmp_path, sproj):
    import torch

    good = [torch.randn(1, 4) for _ in range(4)]
    nan = torch.randn(1, 4)
    nan[0, 2] = float("nan")
    traffic = good[:2] + [torch.randn(1, 5)] + good[2:] + [nan]
    run = record_service(tmp_path / "reg", factory="sproj.model:build_regressor", traffic=traffic)
    env = {"PYTHONPATH": str(sproj)}
    r = replay_json(run, "--device", "cpu", "--failure", "r0-000-req0000002-error", env_extra=env)
    assert (r["reproduced"], r["same_error"]) == (True, True)
    assert r["replay"]["message"] == "mat1 and mat2 shapes cannot be multiplied (1x5 and 4x8)"
    q = r["request"]
    assert (q["field"], q["shape"], q["dtype"], q["call"]) == ("inputs", [1, 5], "float32", "single")
    assert q["detail"] == "the input has shape [1, 5]; `0` expects last dimension 4 (in_features)"
    assert r["ran"]["detail"].startswith("model(inputs) under torch.no_grad()")

    r = replay_json(run, "--device", "cpu", "--failure", "r0-000-req0000005-nonfinite", env_extra=env)
    assert r["original"]["type"] == "NonFiniteError" and r["original"]["outcome"] == "nonfinite"
    assert r["replay"]["type"] == "NonFiniteError"
    assert r["replay"]["message"] == "output holds nan (1 of 1 values)"
    assert (r["reproduced"], r["same_error"]) == (True, True)
    assert check(r, "finite_inputs")["ok"] is False
    assert r["request"]["field"] == "inputs"
    assert r["request"]["detail"] == "the input holds NaN/Inf (shape [1, 4])"
    assert r["culprit_positions"] == [2]


def test_a_request_whose_model_draws_random_numbers_is_replayed_with_its_draws(tmp_path, sproj):
    """The capture holds the CPU generator's state at the request's start: the replay draws
    what the request drew (the error message carries its first draw), not what a fresh or
    a later state gives; every request before it drew too, so the start state is the one
    those draws left."""
    import torch

    traffic = [torch.rand(1, 4) for _ in range(3)] + [-torch.rand(1, 4)] + [torch.rand(1, 4)]
    run = record_service(tmp_path / "sampler", factory="sproj.model:build_sampler", traffic=traffic)
    r = replay_json(run, "--device", "cpu", env_extra={"PYTHONPATH": str(sproj)})
    assert r["failure"] == "r0-000-req0000003-error"
    assert r["original"]["type"] == r["replay"]["type"] == "ValueError"
    assert r["original"]["message"].startswith("negative input; first draw ")
    assert r["replay"]["message"] == r["original"]["message"]
    assert (r["reproduced"], r["same_error"]) == (True, True)
    # the draw is the request's own: neither the state the recording started from nor the
    # state after the request
    torch.manual_seed(0)
    fresh = f"{torch.randn(1, 4).flatten()[0].item():.8f}"
    assert not r["original"]["message"].endswith(fresh)


def test_a_gpu_request_replayed_on_the_cpu_says_so(tmp_path, sproj):
    """No GPU here: the capture's device is set to cuda:0 after recording on the CPU, and
    its CPU replay takes the cross-check's 'already on the CPU' branch (the 'replay again
    on the CPU' branch needs CUDA: tests/replay/test_cross_check_plan below)."""
    run = record_service(tmp_path / "gpu", factory="sproj.model:build_tagger",
                         traffic=tagger_traffic(8, bad_at=2))
    rec_path = run / "failures" / "r0-000-req0000002-error" / "failure.json"
    rec = json.loads(rec_path.read_text())
    assert rec["device"] == "cpu" and rec["kind"] == "request"
    rec_path.write_text(json.dumps(dict(rec, device="cuda:0")))
    r = replay_json(run, "--device", "cpu", env_extra={"PYTHONPATH": str(sproj)})
    assert r["device"] == "cpu" and r["cross_check"] is None
    assert any(n.startswith("the request ran on cuda:0; this replay ran on the CPU") for n in r["notes"])
    assert r["request"]["token_id"] == 150


def test_repro_of_a_request_runs_without_debugkit(tagger_run, sproj, tmp_path):
    zpath = tmp_path / "out" / "repro.zip"
    proc = run_cli("replay", tagger_run, "--device", "cpu", "--repro", zpath,
                   env_extra={"PYTHONPATH": str(sproj)})
    assert proc.returncode == 0, proc.stderr
    dest = tmp_path / "unzipped"
    with zipfile.ZipFile(io.BytesIO(zpath.read_bytes())) as z:
        z.extractall(dest)
    top = dest / "r0-000-req0000005-error-repro"
    script = (top / "repro.py").read_text()
    assert "request 5" in script
    config = json.loads(eval(script.split("CONFIG = json.loads(", 1)[1].split(")\n", 1)[0]))
    assert (config["mode"], config["call"], config["training"]) == ("request", "kwargs", False)
    run = run_repro(top, "--device", "cpu")
    assert run.returncode == 1
    assert "IndexError: index out of range in self" in run.stderr
    assert "calling model(**inputs) for request 5" in run.stdout


@pytest.mark.parametrize("factory, match", [("sproj.model:build_fixed_tagger", True),
                                            ("sproj.model:build_tagger", False)])
def test_the_factory_s_weights_are_checked_against_the_served_ones(tmp_path, sproj, factory, match):
    run = record_service(tmp_path / "noweights", factory=factory, traffic=tagger_traffic(6, bad_at=4),
                         hash_weights=True)
    r = replay_json(run, "--device", "cpu", env_extra={"PYTHONPATH": str(sproj)})
    assert not (run / "failures" / r["failure"] / "model.safetensors").exists()
    state = check(r, "captured_state")
    assert state["ok"] is match
    if match:
        assert state["detail"].startswith("the factory rebuilt the served model's weights (SHA-256 ")
    else:
        assert "not the served model's" in state["detail"]
    assert r["request"]["token_id"] == 150 and r["reproduced"] is True
    assert any(n.startswith("the request capture holds no weights: the replay used the model the "
                            "factory builds (checked against") for n in r["notes"])


def test_failure_ids_of_requests_are_accepted_and_strangers_refused():
    from debugkit.errors import InvalidInputError
    from debugkit.replay.loading import validate_failure_id

    for ok in ("r0-000-req0000012-error", "r3-001-req0000000-nonfinite-2", "r0-s0000075-exception"):
        assert validate_failure_id(ok) == ok
    for bad in ("r0-000-req12-error", "r0-000-req0000012-../x", "r0-req0000012-error"):
        with pytest.raises(InvalidInputError, match="an inference request"):
            validate_failure_id(bad)


def test_cross_check_plan():
    from debugkit.replay import plan_cross_check

    assert plan_cross_check("cuda:0", "cuda:0") == "cpu"          # replay once more on the CPU
    assert plan_cross_check("cuda:1", "cpu") == "replayed_on_cpu"  # already there: a note
    assert plan_cross_check("cpu", "cpu") is None


SAMPLE = ROOT / "sample_runs" / "serve-leak"


def test_sample_serve_leak_bad_token_request():
    """sample_runs/serve-leak (examples/serve_leak.py, an HTTP service under load):
    request 310 carries token id 519 for a vocabulary of 512."""
    r = replay_json(SAMPLE, "--device", "cpu")
    assert r["failure"] == "r0-000-req0000310-error"
    assert (r["reproduced"], r["same_error"]) == (True, True)
    q = r["request"]
    assert (q["field"], q["token_id"], q["position"], q["vocab_size"], q["shape"]) == \
        ("input_ids", 519, 16, 512, [1, 32])
    state = check(r, "captured_state")
    assert state["ok"] is True and state["detail"].startswith("the factory rebuilt the served model's weights")


def test_sample_serve_leak_zero_temperature_request():
    """Request 707 of the sample: temperature 0 divides the logits; every module's inputs
    were finite, so the culprit is the op and the request field that reached it."""
    r = replay_json(SAMPLE, "--device", "cpu", "--failure", "r0-000-req0000707-nonfinite")
    assert (r["reproduced"], r["same_error"]) == (True, True)
    assert r["replay"]["message"] == "output holds inf (24576 of 24576 values)"
    q = r["request"]
    assert (q["field"], q["value"], q["shape"], q["dtype"]) == ("temperature", 0.0, [], "float32")
    assert q["detail"] == ("input field `temperature` = 0 reaches Tensor.div at serve_leak.py:64 "
                           "(`return logits if temperature is None else logits / temperature`), "
                           "which turns finite values into inf")
    assert check(r, "finite_forward")["ok"] is False and check(r, "finite_inputs")["ok"] is True
    assert any(a.startswith("Validate requests at the service's edge: refuse a `temperature` of 0 ")
               for a in r["advice"])
