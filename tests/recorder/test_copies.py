"""A recorded model or optimizer can be copied (``copy.deepcopy`` for an EMA or SWA copy,
``torch.save`` of a whole model), and the copy records nothing into the run."""

from __future__ import annotations

import copy
import io
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import debugkit
from debugkit.io.run import open_run


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _train_step(m, opt, x, y):
    loss = F.cross_entropy(m(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("how", ["recorder", "watch"])
def test_a_copy_of_a_recorded_model_trains_and_saves_without_recording(tmp_path, how):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    w = debugkit.watch(m, opt, run_dir=tmp_path / "r", capture_uncaught=False) if how == "watch" else None
    rec = w.recorder if w is not None else debugkit.Recorder(tmp_path / "r", m, optimizer=opt)
    ema = swa = None
    for i in range(4):
        if w is not None:
            _train_step(m, opt, x, y)
        else:
            with rec.step((x, y)):
                rec.log(loss=_train_step(m, opt, x, y))
        if i == 1:  # copies taken mid-run, as an EMA / SWA wrapper takes them
            ema = copy.deepcopy(m)
            swa = torch.optim.swa_utils.AveragedModel(m)
            ema_opt = torch.optim.SGD(ema.parameters(), lr=0.1)
            opt_copy = copy.deepcopy(opt)
            buf = io.BytesIO()
            torch.save(m, buf)
        if ema is not None:
            # the copies run forward, backward and optimizer steps, inside and outside
            # the recorded steps: none of it is the run's
            _train_step(ema, ema_opt, x[:2], y[:2])
            swa.update_parameters(m)
            swa(x)
            assert rec.current_step is None
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    loaded.train()
    _train_step(loaded, torch.optim.SGD(loaded.parameters(), lr=0.1), x, y)
    assert opt_copy.state_dict()["param_groups"][0]["lr"] == 0.1
    (w or rec).close()
    run = open_run(tmp_path / "r")
    assert list(run.steps()["step"]) == [0, 1, 2, 3]
    assert run.grad_norms().groupby("step").size().eq(5).all()  # 4 parameters + total
    assert run.status == "finished"


def test_a_nonfinite_capture_describes_the_recorded_models_output_not_a_copys(tmp_path):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rec = debugkit.Recorder(tmp_path / "r", m, optimizer=opt)
    ema = copy.deepcopy(m)  # with the Recorder's forward hook on it
    with torch.no_grad():
        ema[2].weight.fill_(float("inf"))  # the copy's output is not finite
    x = torch.randn(6, 4)
    with rec.step(x):
        out = m(x)
        ema(x)  # after the recorded model's forward, as an EMA evaluation would run
        loss = out.sum() * float("nan")  # the loss computation makes it NaN
        loss.backward()
        opt.step()
        rec.log(loss=loss)
    rec.close()
    (path,) = sorted((tmp_path / "r" / "failures").glob("*/failure.json"))
    outs = json.loads(path.read_text())["nonfinite"]["model_outputs"]
    assert outs["finite"] is True
    assert outs["absmax"] == pytest.approx(float(out.detach().abs().max()), rel=1e-6)


def _nan_step(rec, m, opt, x):
    """A step whose loss computation (not the model) makes the loss NaN; returns its output."""
    with rec.step(x):
        out = m(x)
        loss = out.sum() * float("nan")
        opt.zero_grad()
        loss.backward()
        rec.log(loss=loss)
        opt.step()
    return out


def _model_outputs(run_dir):
    (path,) = sorted((run_dir / "failures").glob("*/failure.json"))
    return json.loads(path.read_text())["nonfinite"]["model_outputs"]


def test_the_recorded_model_keeps_its_output_without_a_forward_hook_and_gets_its_class_back(tmp_path):
    """Issue 32 item 1: the model's output for a non-finite capture is kept by a class of
    the model's own (debugkit.recorder.keep_output), not a forward hook (which sends every
    forward through nn.Module's hook path); the class keeps the model's name, isinstance,
    forward and signature, copies and pickles are of the original class, and close()
    gives the class back."""
    import inspect

    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    sig = inspect.signature(m.forward)
    rec = debugkit.Recorder(tmp_path / "r", m, optimizer=opt)
    assert not m._forward_hooks and not m._forward_pre_hooks
    assert type(m) is not nn.Sequential and isinstance(m, nn.Sequential)
    assert (type(m).__name__, type(m).__qualname__, type(m).__module__) == (
        "Sequential", "Sequential", nn.Sequential.__module__)
    assert inspect.signature(m.forward) == sig
    ema = copy.deepcopy(m)
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    assert type(ema) is nn.Sequential and type(torch.load(buf, weights_only=False)) is nn.Sequential
    x = torch.randn(6, 4)
    out = _nan_step(rec, m, opt, x)
    rec.close()
    assert type(m) is nn.Sequential
    outs = _model_outputs(tmp_path / "r")
    assert outs["finite"] is True
    assert outs["absmax"] == pytest.approx(float(out.detach().abs().max()), rel=1e-6)


@pytest.mark.parametrize("order", ["last_first", "first_first"])
def test_two_recorders_on_one_model_each_keep_its_output_and_closing_restores_the_class(tmp_path, order):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    a = debugkit.Recorder(tmp_path / "a", m, optimizer=opt)
    b = debugkit.Recorder(tmp_path / "b", m)  # a second run of the same model
    y = m(torch.randn(3, 4))
    assert a._last_output is y and b._last_output is y
    for rec in ([b, a] if order == "last_first" else [a, b]):
        rec.close()
    assert type(m) is nn.Sequential
    y = m(torch.randn(3, 4))
    assert a._last_output is None or a._last_output is not y


def test_a_model_compiled_after_the_recorder_trains_and_a_capture_keeps_its_output(tmp_path):
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rec = debugkit.Recorder(tmp_path / "r", m, optimizer=opt)
    cm = torch.compile(m, backend="eager")
    x = torch.randn(6, 4)
    for _ in range(2):
        with rec.step(x):
            loss = cm(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            rec.log(loss=loss)
            opt.step()
    out = _nan_step(rec, cm, opt, x)
    rec.close()
    assert type(m) is nn.Sequential
    assert _model_outputs(tmp_path / "r")["absmax"] == pytest.approx(
        float(out.detach().abs().max()), rel=1e-6)
    assert list(open_run(tmp_path / "r").steps()["step"]) == [0, 1, 2]


@pytest.mark.parametrize("how", ["ddp_like", "own_call", "grads_hook_off"])
def test_models_that_do_not_take_a_class_keep_the_forward_hook(tmp_path, how):
    m = _model()
    if how == "own_call":
        class Own(nn.Sequential):
            def __call__(self, *a, **k):
                return super().__call__(*a, **k)

        m = Own(*m)
    given = m
    if how == "ddp_like":  # a wrapper whose .module the Recorder records
        given = nn.Module()
        given.module = m
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    rec = debugkit.Recorder(tmp_path / "r", given, optimizer=opt,
                            grads_hook=how != "grads_hook_off")
    assert type(m).__dict__.get("_debugkit_keeps") is None
    assert len(m._forward_hooks) == 1
    y = m(torch.randn(3, 4))
    assert rec._last_output is y
    rec.close()
    assert not m._forward_hooks
