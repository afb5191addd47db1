"""The Recorder on a real model: norms, scalars, memory, steps, captures."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from debugkit import InvalidInputError, NonFiniteError, Recorder, open_run
from debugkit import format as fmt
from debugkit.tensortree import load_tree
from tests._training import train, train_step


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.ReLU(), nn.Linear(12, 4))


def _batches(n, seed=1, bs=8):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 6, generator=g), torch.randint(0, 4, (bs,), generator=g)) for _ in range(n)]


def _norm_rows(run):
    df = run.grad_norms()
    return {(int(s), str(l)): v for s, l, v in zip(df["step"], df["layer"], df["grad_norm"])}


def test_norms_equal_vector_norm_of_each_grad(tmp_path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    expected = {}
    with Recorder(tmp_path / "r", model, optimizer=opt, flush_every_s=0.05) as rec:
        for step, (x, y) in enumerate(_batches(6)):
            with rec.step((x, y)):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                # What the optimizer is about to apply: the norms must be of these.
                for name, p in model.named_parameters():
                    expected[(step, name)] = torch.linalg.vector_norm(p.grad).item()
                expected[(step, "__total__")] = torch.linalg.vector_norm(
                    torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()])).item()
                opt.step()
    run = open_run(tmp_path / "r")
    got = _norm_rows(run)
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key] == pytest.approx(want, rel=1e-6), key
    # total is the global L2 norm over every element of every gradient
    assert run.layers() == [n for n, _ in model.named_parameters()]
    cats = list(run.grad_norms()["layer"].cat.categories)
    assert cats == run.layers() + ["__total__"]


def test_norms_taken_before_the_optimizer_changes_grads(tmp_path):
    """An optimizer step pre-hook sees the raw gradients even if the user clips after."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    raw = {}
    with Recorder(tmp_path / "r", model, optimizer=opt) as rec:
        x, y = _batches(1)[0]
        with rec.step((x, y)):
            F.cross_entropy(model(x), y).backward()
            raw = {n: torch.linalg.vector_norm(p.grad).item() for n, p in model.named_parameters()}
            opt.step()
            for p in model.parameters():  # gradients changed after the step: must not matter
                p.grad.mul_(100.0)
    got = _norm_rows(open_run(tmp_path / "r"))
    for name, want in raw.items():
        assert got[(0, name)] == pytest.approx(want, rel=1e-6)


def test_without_optimizer_norms_at_end_of_step_and_log_every(tmp_path):
    model = _model()
    with Recorder(tmp_path / "r", model, log_every=3, flush_every_s=0.05) as rec:
        for x, y in _batches(7):
            with rec.step((x, y)):
                model.zero_grad()
                F.cross_entropy(model(x), y).backward()
    run = open_run(tmp_path / "r")
    assert sorted(run.grad_norms()["step"].unique().tolist()) == [0, 3, 6]
    assert len(run.steps()) == 7
    assert run.steps()["ok"].all()


def test_scalars_memory_steps_and_lr_rows(tmp_path):
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    with Recorder(tmp_path / "r", model, optimizer=opt, config={"lr": 3e-3}) as rec:
        train(rec, model, opt, _batches(4), acc=0.5, count=3)
    run = open_run(tmp_path / "r")
    sc = run.scalars()
    assert sorted(sc["key"].unique()) == ["acc", "count", "loss", "lr"]
    assert (sc[sc.key == "lr"]["value"] == 3e-3).all()
    assert len(sc[sc.key == "loss"]) == 4
    mem = run.memory()
    assert list(mem.columns) == ["step", "rank", "wall_time", "device", "allocated_bytes",
                                 "reserved_bytes", "peak_bytes", "rss_bytes"]
    assert (mem["device"] == "cpu").all() and (mem["rss_bytes"] > 10_000_000).all()
    assert mem["allocated_bytes"].isna().all()
    st = run.steps()
    assert st["step"].tolist() == [0, 1, 2, 3]
    assert (st["step_time_s"] > 0).all()
    assert st["data_wait_s"].isna().tolist() == [True, False, False, False]
    assert run.status == "finished"
    assert run.manifest["config"] == {"lr": 3e-3}
    assert run.manifest["schema_version"] == fmt.SCHEMA_VERSION == "1.3"


def test_none_grad_is_recorded_as_zero_and_frozen_params_skipped(tmp_path):
    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _model()
            self.unused = nn.Linear(3, 3)  # never used in forward: its grad stays None

        def forward(self, x):
            return self.net(x)

    model = WithUnused()
    model.net[0].bias.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    with Recorder(tmp_path / "r", model, optimizer=opt) as rec:
        x, y = _batches(1)[0]
        with rec.step((x, y)):
            F.cross_entropy(model(x), y).backward()
            opt.step()
    run = open_run(tmp_path / "r")
    got = _norm_rows(run)
    assert "net.0.bias" not in run.layers()
    assert got[(0, "unused.weight")] == 0.0 and got[(0, "unused.bias")] == 0.0
    assert got[(0, "net.0.weight")] > 0


def test_log_accepts_numbers_and_0d_tensors_only(tmp_path):
    model = _model()
    with Recorder(tmp_path / "r", model) as rec:
        with rec.step(None):
            rec.log(a=1, b=2.5, c=torch.tensor(3.0), d=torch.tensor([4.0]))
            with pytest.raises(InvalidInputError, match=r"rec.log\(e=...\): expected a Python number or a 0-d tensor, got a tensor of shape \(2,\)"):
                rec.log(e=torch.ones(2))
            with pytest.raises(InvalidInputError, match=r"got a tensor of shape \(0, 3\)"):
                rec.log(g=torch.ones(0, 3))
            with pytest.raises(InvalidInputError, match="expected a Python number"):
                rec.log(f="high")
    sc = open_run(tmp_path / "r").scalars()
    assert dict(zip(sc.key, sc.value)) == {"a": 1.0, "b": 2.5, "c": 3.0, "d": 4.0}


def test_exception_in_step_is_captured_and_propagates_unchanged(tmp_path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(tmp_path / "r", model, optimizer=opt, num_classes=4,
                   model_factory="tests.recorder.test_recorder:_model")
    batches = _batches(3)
    batches[2][1][5] = 9  # a label out of range
    with pytest.raises(IndexError, match="Target 9 is out of bounds") as ei:
        with rec:
            for x, y in batches:
                with rec.step({"x": x, "y": y, "meta": ("a", 3)}):
                    F.cross_entropy(model(x), y).backward()
                    opt.step()
    run = open_run(tmp_path / "r")
    assert run.status == "failed"
    (f,) = run.failures()
    assert f["kind"] == "exception" and f["step"] == 2 and f["rank"] == 0
    assert f["error_type"] == "IndexError" and f["message"] == str(ei.value)
    assert "Target 9 is out of bounds" in f["traceback"] and "cross_entropy" in f["traceback"]
    assert f["capture_errors"] == {}
    assert f["code"]["model_factory"]["sha256"] and f["code"]["model_factory"]["file"].endswith("test_recorder.py")
    d = tmp_path / "r" / "failures" / f["id"]
    batch = load_tree(d / "batch.safetensors", d / "batch.json")
    assert batch["meta"] == ("a", 3)
    assert torch.equal(batch["y"], batches[2][1]) and torch.equal(batch["x"], batches[2][0])
    steps = run.steps()
    assert steps["ok"].tolist() == [True, True, False]


def test_nonfinite_capture_once_and_training_continues(tmp_path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(tmp_path / "r", model, optimizer=opt) as rec:
        for i, (x, y) in enumerate(_batches(5)):
            if i >= 2:
                x = x.clone()
                x[0, 0] = float("nan")
            train_step(rec, model, opt, (x, y))
    run = open_run(tmp_path / "r")
    assert run.status == "finished"
    (f,) = run.failures()
    assert f["kind"] == "nonfinite" and f["step"] == 2
    assert f["nonfinite"]["loss_keys"] == ["loss"] and f["nonfinite"]["loss_finite"] is False
    assert f["nonfinite"]["layers"][0] == "0.weight"
    assert f["nonfinite"]["state_after_optimizer_step"] is False
    # the captured weights are those before the NaN update was applied
    d = tmp_path / "r" / "failures" / f["id"]
    from safetensors.torch import load_file

    w = load_file(str(d / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in w.values())
    assert len(run.steps()) == 5
    ev = [e["kind"] for e in run.events()]
    assert ev.count("nonfinite") == 1


def test_halt_on_nonfinite_raises_inside_the_step(tmp_path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rec = Recorder(tmp_path / "r", model, optimizer=opt, halt_on_nonfinite=True)
    x, y = _batches(1)[0]
    x[1, 2] = float("inf")
    with pytest.raises(NonFiniteError, match=r"step 0: gradient norm of '0.weight' is non-finite"):
        with rec:
            with rec.step((x, y)):
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                rec.log(loss=loss)
                opt.step()
    # the optimizer step never ran
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    run = open_run(tmp_path / "r")
    assert [f["kind"] for f in run.failures()] == ["nonfinite"]
    assert run.status == "failed"


def test_finite_loss_with_nonfinite_grad_names_first_layer(tmp_path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(tmp_path / "r", model, optimizer=opt) as rec:
        x, y = _batches(1)[0]
        with rec.step((x, y)):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            model[2].weight.grad[0, 0] = float("nan")  # a broken backward
            rec.log(loss=loss)
            opt.step()
    (f,) = open_run(tmp_path / "r").failures()
    assert f["nonfinite"]["loss_finite"] is True
    assert f["nonfinite"]["layers"] == ["2.weight"]
    assert math.isnan(_norm_rows(open_run(tmp_path / "r"))[(0, "__total__")])


def test_track_records_dataset_indices_with_workers(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    ds = TensorDataset(torch.randn(40, 6), torch.randint(0, 4, (40,)))
    ds.tensors[1][17] = 11
    model = _model()
    rec = Recorder(tmp_path / "r", model)
    g = torch.Generator().manual_seed(3)
    loader = rec.track(DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, generator=g))
    with pytest.raises(IndexError):
        with rec:
            for x, y in loader:
                with rec.step((x, y)):
                    F.cross_entropy(model(x), y).backward()
    (f,) = open_run(tmp_path / "r").failures()
    assert 17 in f["dataset_indices"] and len(f["dataset_indices"]) == 8
    d = tmp_path / "r" / "failures" / f["id"]
    x, y = load_tree(d / "batch.safetensors", d / "batch.json")
    pos = f["dataset_indices"].index(17)
    assert int(y[pos]) == 11 and torch.equal(x[pos], ds.tensors[0][17])


def test_reopening_a_run_starts_a_new_segment(tmp_path):
    for _ in range(2):
        model = _model()
        with Recorder(tmp_path / "r", model) as rec:
            for x, y in _batches(2):
                with rec.step((x, y)):
                    F.cross_entropy(model(x), y).backward()
    run = open_run(tmp_path / "r")
    # the script ran twice from step 0: the second attempt supersedes the first (issue 17)
    assert run.steps()["step"].tolist() == [0, 1]
    assert sorted(p.name for p in (tmp_path / "r" / "ranks" / "0").glob("steps-*")) == \
        ["steps-000.arrows", "steps-001.arrows"]
    assert len(run.manifest["resumed_at"]) == 1
    assert run.attempts() == [
        {"attempt": 1, "segment": 0, "first_step": 0, "last_step": 1, "superseded_from": 0},
        {"attempt": 2, "segment": 1, "first_step": 0, "last_step": 1, "superseded_from": None}]
    from debugkit.io.run import MSG_ATTEMPT_RESTART

    assert MSG_ATTEMPT_RESTART.format(rank=0, attempt=2, seg=1, step=0) in run.warnings


def test_a_resumed_attempt_takes_over_from_its_first_step(tmp_path):
    """A job resumed from a checkpoint at step 3 after it logged steps 0-4: steps 0-2 come
    from the first attempt, 3-6 from the second; two failures at the same step in two
    attempts are told apart."""
    model = _model()
    with pytest.raises(RuntimeError):
        with Recorder(tmp_path / "r", model) as rec:
            for i, (x, y) in enumerate(_batches(5)):
                with rec.step((x, y)):
                    F.cross_entropy(model(x), y).backward()
                    if i == 4:
                        raise RuntimeError("died at step 4")
    model = _model()
    with pytest.raises(RuntimeError):
        with Recorder(tmp_path / "r", model) as rec:
            for i, (x, y) in enumerate(_batches(2), start=3):
                with rec.step((x, y), step=i):
                    F.cross_entropy(model(x), y).backward()
                    rec.log(attempt=2.0)
                    if i == 4:
                        raise RuntimeError("died at step 4 again")
    run = open_run(tmp_path / "r")
    steps = run.steps()
    assert steps["step"].tolist() == [0, 1, 2, 3, 4]
    sc = run.scalars()
    assert sorted(sc.loc[sc["key"] == "attempt", "step"].tolist()) == [3, 4]
    fails = run.failures()
    assert [(f["step"], f["attempt"]) for f in fails] == [(4, 1), (4, 2)]
    assert [a["superseded_from"] for a in run.attempts()] == [3, None]


def test_bad_log_every():
    with pytest.raises(InvalidInputError, match="log_every=0: expected an integer >= 1"):
        Recorder("/tmp/never-created-debugkit", _model(), log_every=0)


def test_tags_are_stored_in_the_manifest_and_kept_on_resume(tmp_path):
    from debugkit import format as fmt

    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with Recorder(tmp_path / "r", model, optimizer=opt, tags=["baseline", "lr-sweep", "baseline"]) as rec:
        train(rec, model, opt, _batches(2))
    assert fmt.read_manifest(tmp_path / "r")["tags"] == ["baseline", "lr-sweep"]
    with Recorder(tmp_path / "r", model, optimizer=opt) as rec:  # resumed without tags
        train(rec, model, opt, _batches(1))
    assert fmt.read_tags(fmt.read_manifest(tmp_path / "r")) == ["baseline", "lr-sweep"]
    from debugkit.io.served_runs import RunEntry, summarize

    assert summarize(RunEntry("r", tmp_path / "r", tmp_path))["tags"] == ["baseline", "lr-sweep"]


@pytest.mark.parametrize("tags", ["baseline", [""], ["x" * 65], [3], ["a\nb"], ["t"] * 33])
def test_bad_tags_are_refused_before_anything_is_written(tmp_path, tags):
    from debugkit.format import MAX_TAGS

    assert MAX_TAGS == 32
    with pytest.raises(InvalidInputError, match=r"tags=.*expected a list of at most 32 strings"):
        Recorder(tmp_path / "r", _model(), tags=tags)
    assert not (tmp_path / "r").exists()


def test_a_stranger_s_manifest_tags_are_read_safely():
    from debugkit.format import read_tags

    assert read_tags({"tags": ["ok", 3, None, "", "x" * 99, "ok", "two words"]}) == ["ok", "two words"]
    assert read_tags({"tags": "not-a-list"}) == [] and read_tags({}) == []
