"""Batch guards: BatchSpec inference and checks, and the Recorder's guard= (raise / skip)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import debugkit
from debugkit import BatchSpec, InvalidInputError, Recorder, open_run
from debugkit.errors import DebugkitWarning
from debugkit.recorder.batchspec import Dim, TensorSpec
from debugkit.tensortree import load_tree


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return torch.tensor(X, dtype=torch.float32) / 16.0, torch.tensor(y, dtype=torch.int64)


def _batches(X, y, bs=32):
    return [(X[i:i + bs], y[i:i + bs]) for i in range(0, len(X), bs)]


def test_infer_on_digits_accepts_healthy_and_names_label_12(digits):
    X, y = digits
    batches = _batches(X, y)
    assert len(batches[-1][0]) == len(X) % 32  # a short last batch is part of the data
    spec = BatchSpec.infer(batches[:20], num_classes=10)
    assert spec.tensors["0"] == TensorSpec("float32", (Dim("batch", 1, 32), 64), None, True)
    assert spec.tensors["1"] == TensorSpec("int64", (Dim("batch", 1, 32),), (0, 10), False)
    assert all(spec.check(b) == [] for b in batches)  # also the ones infer did not see
    bad_y = batches[3][1].clone()
    bad_y[7] = 12
    idx = list(range(96, 128))
    got = spec.check((batches[3][0], bad_y), dataset_indices=idx)
    assert [(v.tensor, v.sample, v.dataset_index, v.rule) for v in got] == [("1", 7, 103, "range")]
    assert "12" in got[0].message and "[0, 10)" in got[0].message
    with pytest.raises(InvalidInputError) as ei:
        spec.validate((batches[3][0], bad_y), dataset_indices=idx)
    msg = str(ei.value)
    assert "tensor '1'" in msg and "sample 7" in msg and "dataset index 103" in msg
    assert "rule: range" in msg


def test_infer_without_num_classes_uses_seen_range(digits):
    X, y = digits
    spec = BatchSpec.infer([(X[y < 5][:32], y[y < 5][:32])])
    assert spec.tensors["1"].range == (0, 5)
    assert [v.rule for v in spec.check((X[:1], torch.tensor([7])))] == ["range"]


def test_symbolic_dims_must_agree_across_tensors():
    spec = BatchSpec({"input_ids": dict(dtype="int64", shape=[("batch", 1, 8), ("seq", 1, 16)],
                                        range=(0, 100)),
                      "mask": dict(dtype="bool", shape=[("batch", 1, 8), ("seq", 1, 16)])})
    ok = {"input_ids": torch.randint(0, 100, (4, 10)), "mask": torch.ones(4, 10, dtype=torch.bool)}
    assert spec.check(ok) == []
    ragged = {"input_ids": torch.randint(0, 100, (4, 10)), "mask": torch.ones(4, 9, dtype=torch.bool)}
    (v,) = spec.check(ragged)
    assert (v.tensor, v.rule) == ("mask", "shape")
    assert "'seq'" in v.message and "input_ids" in v.message
    too_long = {"input_ids": torch.randint(0, 100, (4, 17)), "mask": torch.ones(4, 17, dtype=torch.bool)}
    assert {v.rule for v in spec.check(too_long)} == {"shape"}
    fixed = BatchSpec({0: dict(shape=[("batch", 1, 8), 64])})
    (v,) = fixed.check((torch.zeros(2, 63),))
    assert v.rule == "shape" and "63" in v.message and "64" in v.message


def test_infer_makes_varying_dims_symbolic_and_shares_equal_ones():
    bs = [{"ids": torch.zeros(4, n, dtype=torch.int64), "mask": torch.ones(4, n),
           "label": torch.zeros(4, dtype=torch.int64)} for n in (5, 9, 7)]
    spec = BatchSpec.infer(bs)
    ids, mask = spec.tensors["ids"].shape, spec.tensors["mask"].shape
    assert ids[0] == mask[0] == Dim("batch", 1, 4)
    assert isinstance(ids[1], Dim) and ids[1] == mask[1] and (ids[1].min, ids[1].max) == (5, 9)
    assert spec.check({"ids": torch.zeros(4, 6, dtype=torch.int64), "mask": torch.ones(4, 6),
                       "label": torch.zeros(4, dtype=torch.int64)}) == []
    bad = spec.check({"ids": torch.zeros(4, 6, dtype=torch.int64), "mask": torch.ones(4, 8),
                      "label": torch.zeros(4, dtype=torch.int64)})
    assert [(v.tensor, v.rule) for v in bad] == [("mask", "shape")]


def test_dtype_structure_and_nan(digits):
    X, y = digits
    spec = BatchSpec.infer(_batches(X, y)[:5], num_classes=10)
    (v,) = spec.check((X[:32].double(), y[:32]))
    assert (v.tensor, v.sample, v.rule) == ("0", None, "dtype") and "float64" in v.message
    (v,) = spec.check((X[:32], y[:32].int()))
    assert (v.tensor, v.rule) == ("1", "dtype")
    assert [v.rule for v in spec.check({"x": X[:4]})] == ["structure"]
    assert [v.rule for v in spec.check((X[:4],))] == ["structure", "structure"]
    x = X[:32].clone()
    x[3, 10] = float("nan")
    x[20, 0] = float("inf")
    got = spec.check((x, y[:32]), dataset_indices=range(500, 532))
    assert [(v.sample, v.dataset_index, v.rule) for v in got] == [(3, 503, "finite"), (20, 520, "finite")]
    assert "NaN" in got[0].message and "Inf" in got[1].message
    # Finite values whose sum overflows are not a violation (the fast path falls back).
    big = torch.full((4, 64), 3e38)
    assert spec.check((big, y[:4])) == []


def test_a_complex_batch_is_checked_for_finiteness_instead_of_raising(tmp_path):
    # A complex tensor's sum is complex: the finite rule once passed it to math.isfinite,
    # so a guarded Recorder on complex inputs died with "must be real number".
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 3, dtype=torch.complex64, generator=g)
    spec = BatchSpec.infer([x, x.clone()])
    assert spec.tensors["batch"].finite and spec.check(x) == []
    bad = x.clone()
    bad[5, 1] = complex(float("nan"), 0.0)
    (v,) = spec.check(bad, dataset_indices=range(100, 108))
    assert (v.sample, v.dataset_index, v.rule, v.message) == (5, 105, "finite", "contains NaN")
    with Recorder(tmp_path / "run", _model(), guard=spec, guard_action="skip") as rec:
        with rec.step(bad) as s:
            assert s.skipped


def test_json_round_trip(tmp_path, digits):
    X, y = digits
    spec = BatchSpec.infer(_batches(X, y)[:3], num_classes=10)
    again = BatchSpec.from_json(spec.to_json())
    assert again == spec and again.tensors == spec.tensors and again.structure == "sequence"
    spec.save(tmp_path / "spec.json")
    loaded = BatchSpec.load(tmp_path / "spec.json")
    assert loaded == spec
    assert json.loads((tmp_path / "spec.json").read_text())["tensors"]["1"]["range"] == [0, 10]
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(InvalidInputError, match="bad.json: not valid JSON"):
        BatchSpec.load(tmp_path / "bad.json")
    with pytest.raises(InvalidInputError, match="not a debugkit batch spec"):
        BatchSpec.from_json('{"tensors": 3}')
    with pytest.raises(InvalidInputError, match="cannot read"):
        BatchSpec.load(tmp_path / "missing.json")


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def _poisoned_loader(X, y, bad_at=100):
    y = y.clone()
    y[bad_at] = 12
    return DataLoader(TensorDataset(X, y), batch_size=32, shuffle=False)


def test_recorder_guard_raise_captures_failure_with_batch(tmp_path, digits):
    X, y = digits
    spec = BatchSpec.infer(_batches(X, y)[:10], num_classes=10)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ran = []
    with pytest.raises(InvalidInputError) as ei:
        with Recorder(tmp_path / "r", model, opt, flush_every_s=0.05, guard=spec) as rec:
            for xb, yb in rec.track(_poisoned_loader(X, y)):
                with rec.step((xb, yb)):
                    ran.append(rec._cur.step)
                    loss = F.cross_entropy(model(xb), yb)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    assert ran == [0, 1, 2]  # step 3 (samples 96..127) never ran its body
    msg = str(ei.value)
    assert "step 3" in msg and "sample 4" in msg and "dataset index 100" in msg
    run = open_run(tmp_path / "r")
    (f,) = run.failures()
    assert f["step"] == 3 and f["error_type"] == "InvalidInputError"
    assert f["dataset_indices"] == list(range(96, 128))
    p = Path(f["path"])
    xb, yb = load_tree(p / "batch.safetensors", p / "batch.json")
    assert int(yb[4]) == 12 and torch.equal(xb, X[96:128])
    assert run.status == "failed"
    assert [bool(o) for o in run.steps()["ok"]] == [True, True, True, False]


def test_recorder_guard_skip_finishes_and_counts(tmp_path, digits):
    X, y = digits
    spec = BatchSpec.infer(_batches(X, y)[:10], num_classes=10)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trained = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", DebugkitWarning)  # a correct loop gets no warning
        with Recorder(tmp_path / "r", model, opt, flush_every_s=0.05, guard=spec,
                      guard_action="skip") as rec:
            for xb, yb in rec.track(_poisoned_loader(X, y, bad_at=100)):
                with rec.step((xb, yb)) as s:
                    if s.skipped:
                        assert not s and s.violations[0].rule == "range"
                        continue
                    loss = F.cross_entropy(model(xb), yb)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    trained += 1
    n = len(_batches(X, y))
    assert rec.batches_skipped == 1 and trained == n - 1
    run = open_run(tmp_path / "r")
    assert run.status == "finished" and run.failures() == []
    steps = sorted(int(s) for s in run.steps()["step"])
    assert steps == [s for s in range(n) if s != 3]
    ev = run.events()
    (sk,) = [e for e in ev if e["kind"] == "batch_skipped"]
    assert sk["step"] == 3 and sk["skipped"] == 1 and sk["dataset_indices"] == list(range(96, 128))
    assert sk["violations"][0] == {"tensor": "1", "sample": 4, "dataset_index": 100,
                                   "rule": "range", "message": "value 12 outside [0, 10)"}
    (close,) = [e for e in ev if e["kind"] == "close"]
    assert close["skipped_batches"] == 1


def test_skip_without_checking_warns(tmp_path, digits):
    X, y = digits
    spec = BatchSpec.infer(_batches(X, y)[:3], num_classes=10)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    bad_y = y[:32].clone()
    bad_y[0] = 11
    with Recorder(tmp_path / "r", model, opt, guard=spec, guard_action="skip") as rec:
        with pytest.warns(DebugkitWarning, match="if s.skipped: continue"):
            with rec.step((X[:32], bad_y)):
                opt.zero_grad()
                F.mse_loss(model(X[:32]), torch.zeros(32, 10)).backward()
                opt.step()


def test_guard_arguments(tmp_path, digits):
    X, y = digits
    spec = BatchSpec.infer(_batches(X, y)[:2], num_classes=10)
    with pytest.raises(InvalidInputError, match="guard_action='ignore'"):
        Recorder(tmp_path / "a", _model(), guard=spec, guard_action="ignore")
    assert not (tmp_path / "a").exists()
    spec.save(tmp_path / "spec.json")
    with Recorder(tmp_path / "b", _model(), guard=tmp_path / "spec.json") as rec:
        assert rec._guard == spec
    assert debugkit.BatchSpec is BatchSpec


def test_guarded_sample_skipped_the_corrupted_label_batches_and_finished():
    from debugkit import open_run
    from tests.conftest import ROOT

    run = open_run(ROOT / "sample_runs" / "digits-guarded")
    assert run.status == "finished" and not run.failures()
    skipped = [e for e in run.events() if e["kind"] == "batch_skipped"]
    # the corrupted row is served once in each of epochs 2 and 3
    assert len(skipped) == 2 and all(e["dataset_indices"] and 1474 in e["dataset_indices"] for e in skipped)
    assert all(v["rule"] == "range" and v["dataset_index"] == 1474 for e in skipped for v in e["violations"])
    assert run.manifest["guard"]["action"] == "skip"
    close = [e for e in run.events() if e["kind"] == "close"][-1]
    assert close["skipped_batches"] == 2
