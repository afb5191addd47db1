"""The report builder's rules, on hand-made observations (no child process)."""

from __future__ import annotations

import math
import os

import pytest

from debugkit.child_harness import ChildOutcome
from debugkit.replay import plan_cross_check
from debugkit.replay.advice import advice_for
from debugkit.replay.report import build_report, crash_of, judge, last_frame, normalize_message, original_of, replay_of

STDLIB = os.path.dirname(os.__file__)
EXC = {"id": "r0-s0000003-exception", "kind": "exception", "step": 3, "error_type": "IndexError",
       "message": "Target 12 is out of bounds.", "dataset_indices": [10, 11, 12, 13]}
NF = {"id": "r0-s0000004-nonfinite", "kind": "nonfinite", "step": 4, "error_type": None,
      "message": "step 4: gradient norm of 'a.weight' is non-finite (2 layers in all)",
      "nonfinite": {"loss_keys": [], "layers": ["a.weight", "a.bias"], "loss_finite": True}}


def raw(**over):
    base = {"device": "cpu", "ran": {"mode": "cross_entropy", "detail": "…"}, "n_batch": 4,
            "state": {"loaded": True, "missing": [], "unexpected": [], "mismatched": [],
                      "nonfinite_params": [], "tensors": 2},
            "n_embeddings": 0, "target_path": [1], "labels": None, "inputs_nonfinite": [],
            "diagnosis": {"embeddings": [], "mismatches": [], "shape_findings": [],
                          "forward_born": None, "forward_entry": None, "backward": None},
            "anomaly": None,
            "outcome": {"error": None, "loss": 0.5, "loss_finite": True, "grads_nonfinite": [],
                        "seconds": 0.01234567, "backward_ran": True}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return base


def err(t, msg, frame=None):
    return {"type": t, "message": msg, "traceback": "", "module_stack": [], "raising_frame": frame}


def test_original_of_a_nonfinite_capture_is_named_like_the_recorder_error():
    assert original_of(NF) == {"type": "NonFiniteError", "message": NF["message"], "step": 4}


def test_exception_reproduced_and_same_message():
    r = raw(outcome={"error": err("IndexError", "Target 12 is out of bounds.")})
    rep = replay_of(r)
    assert judge(EXC, original_of(EXC), rep, r) == (True, True)


def test_same_type_other_message():
    r = raw(outcome={"error": err("IndexError", "Target 13 is out of bounds.")})
    assert judge(EXC, original_of(EXC), replay_of(r), r) == (True, False)


def test_other_type_is_not_reproduced():
    r = raw(outcome={"error": err("RuntimeError", "x")})
    assert judge(EXC, original_of(EXC), replay_of(r), r) == (False, False)


def test_clean_replay_is_not_reproduced():
    r = raw()
    assert replay_of(r) is None
    assert judge(EXC, original_of(EXC), None, r) == (False, False)


@pytest.mark.parametrize("grads, loss_finite, expected", [
    (["a.weight", "a.bias"], True, (True, True)),
    (["a.weight"], True, (True, False)),
    (["a.weight", "a.bias"], False, (True, False)),
    ([], True, (False, False)),
])
def test_nonfinite_judgement(grads, loss_finite, expected):
    r = raw(outcome={"grads_nonfinite": grads, "loss_finite": loss_finite,
                     "loss": 0.5 if loss_finite else math.nan})
    assert judge(NF, original_of(NF), replay_of(r), r) == expected


def test_nonfinite_replay_message_uses_the_recorders_words():
    r = raw(outcome={"grads_nonfinite": ["a.weight", "a.bias"], "loss_finite": False, "loss": math.nan})
    assert replay_of(r)["message"] == "loss is nan; gradient norm of 'a.weight' is non-finite (2 layers in all)"


def test_messages_compare_without_addresses_and_spacing():
    assert normalize_message("bad ptr 0x7f00ab  at\n x") == normalize_message("bad ptr 0x1234 at x")


def test_labels_culprit_outranks_the_error_module():
    r = raw(labels={"path": [1], "num_classes": 10, "source": "num_classes", "count": 1, "total": 4,
                    "samples": [{"sample": 2, "positions": [], "values": [12]}], "n_samples": 1},
            outcome={"error": err("IndexError", "Target 12 is out of bounds.")})
    rep = build_report(EXC, r, device="cpu")
    assert rep["culprit"] == {"module": None, "op": None, "input": "batch[1]", "sample_index": 2,
                              "dataset_index": 12,
                              "detail": "sample 2 (dataset index 12) has label 12, outside [0, 10); "
                                        "cross-entropy indexes the output with it (on CUDA a device-side "
                                        "assert, on the CPU 'Target 12 is out of bounds')"}
    assert rep["replay"] == {"type": "IndexError", "message": "Target 12 is out of bounds.", "seconds": 0.0123}
    assert list(rep["checks"][0]) == ["name", "ok", "detail"]
    assert advice_for(rep)[0].startswith("Validate labels in the dataset: sample 2 (dataset index 12) "
                                         "has label 12, outside [0, 10).")


def test_dataset_index_is_null_when_the_indices_do_not_match_the_batch():
    rec = dict(EXC, dataset_indices=[1, 2])
    r = raw(labels={"path": [1], "num_classes": 10, "source": "num_classes", "count": 1, "total": 4,
                    "samples": [{"sample": 2, "positions": [], "values": [12]}], "n_samples": 1})
    assert build_report(rec, r, device="cpu")["culprit"]["dataset_index"] is None


def test_no_check_failing_falls_back_to_the_raising_module():
    frame = {"module": "head.1", "type": "Custom", "inputs": []}
    r = raw(outcome={"error": err("KeyError", "'x'", frame)})
    c = build_report(EXC, r, device="cpu")["culprit"]
    assert c["module"] == "head.1" and c["op"] is None
    assert c["detail"] == "no check explains the error; it was raised in `head.1`: KeyError: 'x'"


def test_nothing_known_gives_an_all_null_culprit():
    c = build_report(EXC, raw(), device="cpu")["culprit"]
    assert all(v is None for v in c.values())


def test_dtype_error_without_a_mismatch_finding():
    frame = {"module": "fc", "type": "Linear", "inputs": []}
    r = raw(outcome={"error": err("RuntimeError", "mat1 and mat2 must have the same dtype, but got Double and Float", frame)})
    rep = build_report(EXC, r, device="cpu")
    dd = next(c for c in rep["checks"] if c["name"] == "dtype_device")
    assert dd["ok"] is False and dd["detail"].startswith("`fc` raised: mat1 and mat2 must have the same dtype")
    assert rep["culprit"]["module"] == "fc"


def test_a_crash_before_any_observation():
    out = ChildOutcome(status="crashed", signal_name="SIGSEGV", seconds=1.23456,
                       message="the replay process died of SIGSEGV",
                       stack='Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n'
                             f'  File "{STDLIB}/ctypes/__init__.py", line 519 in string_at\n'
                             '  File "/home/me/proj/model.py", line 14 in step\n')
    crash = crash_of(out)
    assert crash == {"type": "SIGSEGV", "seconds": 1.235,
                     "message": "the replay process died of SIGSEGV; it was at /home/me/proj/model.py:14 in step"}
    rep = build_report(EXC, None, device="cpu", crash=crash)
    assert rep["device"] == "cpu" and rep["reproduced"] is False
    assert {c["name"]: c["ok"] for c in rep["checks"]} == dict.fromkeys(
        ["captured_state", "labels", "embedding_indices", "finite_inputs", "shapes", "dtype_device",
         "finite_forward", "finite_backward"])
    assert advice_for(rep)[0].startswith("Native code crashed")


def test_timeout_report():
    out = ChildOutcome(status="timeout", seconds=5.0, message="the replay did not finish within 5 s and was stopped")
    assert crash_of(out)["type"] == "Timeout"
    assert crash_of(ChildOutcome(status="ok")) is None


def test_last_frame_without_project_frames():
    assert last_frame(f'Current thread 0x1 (most recent call first):\n  File "{STDLIB}/x.py", line 3 in f\n') \
        == f"{STDLIB}/x.py:3 in f"
    assert last_frame("") is None


@pytest.mark.parametrize("orig, used, plan", [
    ("cuda:0", "cuda:0", "cpu"), ("cuda:1", "cpu", "replayed_on_cpu"), ("cpu", "cpu", None),
    (None, "cuda:0", None), ("mps", "cpu", None),
])
def test_cross_check_plan(orig, used, plan):
    assert plan_cross_check(orig, used) == plan


def test_cross_check_culprit_fills_an_empty_one():
    cross = {"culprit": {"module": None, "op": None, "input": "batch[1]", "sample_index": 1,
                         "dataset_index": 11, "detail": "label 12"}}
    rep = build_report(EXC, raw(), device="cuda:0", cross_check=cross)
    assert rep["culprit"]["sample_index"] == 1
    assert rep["culprit"]["detail"] == "label 12 (found by the CPU cross-check)"
