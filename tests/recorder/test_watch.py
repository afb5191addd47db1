"""debugkit.watch and the Recorder's begin_step/end_step/record_grads, in-process on a
tiny model (the framework tests in tests/integrations run whole scripts)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

import debugkit
from debugkit.io.run import open_run
from debugkit.recorder.tracking import track_in_place
from debugkit.recorder.watch import MSG_WATCH_MODEL, MSG_WATCH_OPTIMIZER


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _captures(run_dir):
    return [json.loads(p.read_text()) for p in sorted((run_dir / "failures").glob("*/failure.json"))]


def test_begin_end_step_records_what_rec_step_records(tmp_path):
    rows = {}
    for how in ("with", "begin"):
        m = _model()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        rec = debugkit.Recorder(tmp_path / how, m, opt, grads_hook=(how == "with"))
        x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
        for _ in range(3):
            if how == "with":
                with rec.step((x, y)):
                    loss = F.cross_entropy(m(x), y)
                    opt.zero_grad(); loss.backward(); opt.step()
            else:
                rec.begin_step((x, y))
                assert rec.current_step is not None and rec.current_step.batch[0] is x
                loss = F.cross_entropy(m(x), y)
                opt.zero_grad(); loss.backward()
                rec.record_grads()  # before the update, as the pre-hook would
                rec.record_grads()  # once per step: a second call changes nothing
                opt.step()
                rec.end_step()
            assert rec.current_step is None
        rec.close()
        run = open_run(tmp_path / how)
        rows[how] = (list(run.steps()["step"]), run.grad_norms()["grad_norm"].round(6).tolist())
    assert rows["with"] == rows["begin"]
    assert rows["with"][0] == [0, 1, 2]


def test_end_step_with_an_error_captures_it(tmp_path):
    m = _model()
    rec = debugkit.Recorder(tmp_path / "r", m)
    rec.begin_step(torch.ones(2, 4), indices=[7, 9])
    rec.end_step(ValueError("boom"))
    rec.end_step()  # no step open: nothing happens
    rec.close(failed=True)
    (cap,) = _captures(tmp_path / "r")
    assert (cap["kind"], cap["error_type"], cap["message"], cap["dataset_indices"]) == \
        ("exception", "ValueError", "boom", [7, 9])


def test_watch_steps_on_optimizer_steps_and_takes_the_latest_forward_inputs(tmp_path):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with debugkit.watch(m, opt, run_dir=tmp_path / "w") as w:
        for i in range(4):
            opt.zero_grad()
            for j in range(2):  # gradient accumulation: two micro-batches per step
                x = torch.full((3, 4), float(10 * i + j))
                F.cross_entropy(m(x), torch.tensor([0, 1, 2])).backward()
            assert w.recorder.current_step.batch is x
            with torch.no_grad():
                m(torch.zeros(1, 4))  # not a training forward: ignored
            opt.step()
            w.log(loss=1.0)
    assert sys.excepthook is not w._excepthook
    run = open_run(tmp_path / "w")
    assert list(run.steps()["step"]) == [0, 1, 2, 3]
    assert run.grad_norms().groupby("step").size().eq(5).all()  # 4 parameters + total
    assert run.status == "finished"


def test_watch_captures_a_forward_error_where_it_is_raised(tmp_path):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    w = debugkit.watch(m, opt, run_dir=tmp_path / "w", capture_uncaught=False)
    F.cross_entropy(m(torch.randn(2, 4)), torch.tensor([0, 1])).backward()
    opt.step()
    bad = torch.randn(2, 5)  # wrong width
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        m(bad)  # the loop catches it; the capture was written in the forward hook
    (cap,) = _captures(tmp_path / "w")
    assert (cap["kind"], cap["step"], cap["error_type"]) == ("exception", 1, "RuntimeError")
    assert cap["optimizer_stepped"] is False
    w.close()


def test_watch_context_manager_captures_an_error_outside_the_model(tmp_path):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        with debugkit.watch(m, opt, run_dir=tmp_path / "w", capture_uncaught=False):
            x = torch.randn(2, 4)
            F.cross_entropy(m(x), torch.tensor([0, 7]))
    (cap,) = _captures(tmp_path / "w")
    assert (cap["kind"], cap["step"], cap["error_type"]) == ("exception", 0, "IndexError")
    assert cap["files"]["batch"] == ["batch.safetensors", "batch.json"]
    assert open_run(tmp_path / "w").status == "failed"


@pytest.mark.parametrize("model, optimizer, message", [
    ("not a model", None, MSG_WATCH_MODEL.format(type="str")),
    (nn.Linear(2, 2), "not an optimizer", MSG_WATCH_OPTIMIZER.format(type="str")),
])
def test_watch_rejects_what_it_cannot_hook(tmp_path, model, optimizer, message):
    with pytest.raises(debugkit.InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        debugkit.watch(model, optimizer, run_dir=tmp_path / "w")
    assert not (tmp_path / "w").exists()  # nothing written


def test_track_in_place_survives_a_rebuilt_batch_sampler():
    ds = TensorDataset(torch.arange(10).float())
    loader = DataLoader(ds, batch_size=4)
    sink = track_in_place(loader)
    assert [b[0].long().tolist() for b in loader] == [sink.popleft() for _ in range(3)]
    # What Lightning does under DDP: type(batch_sampler)(new_sampler, batch_size, drop_last).
    bs = type(loader.batch_sampler)(SequentialSampler(range(6)), batch_size=3, drop_last=False)
    assert isinstance(bs, BatchSampler)
    assert list(bs) == [[0, 1, 2], [3, 4, 5]] and list(sink) == [[0, 1, 2], [3, 4, 5]]
    assert track_in_place(loader) is sink  # tracking twice keeps one deque
