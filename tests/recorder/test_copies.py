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
