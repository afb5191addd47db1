"""Gradient norms without overflow: only a NaN/Inf element makes a norm non-finite."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from debugkit import NonFiniteError, Recorder, open_run
from debugkit.recorder.norms import GradNormComputer, safe_norm


def _params(*grads):
    out = []
    for g in grads:
        p = nn.Parameter(torch.zeros(3 if g is None else g.shape, dtype=torch.float32 if g is None else g.dtype))
        p.grad = g
        out.append(p)
    return out


def test_float32_elements_past_1e19_give_the_true_norm():
    big = torch.full((10,), 1e20)
    assert math.isinf(torch._foreach_norm([big])[0].item())  # what the plain fused norm gives
    vals = GradNormComputer(_params(big, torch.ones(4), None)).compute()
    f32 = float(torch.tensor(1e20))  # 1e20 as float32 holds it
    assert vals[0] == pytest.approx(f32 * math.sqrt(10), rel=1e-12)
    assert vals[1] == 2.0 and vals[2] == 0.0
    assert vals[3] == pytest.approx(math.sqrt(vals[0] ** 2 + 4.0), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_gradients(dtype):
    value = 1e30 if dtype == torch.bfloat16 else 6e4
    g = torch.full((100,), value, dtype=dtype)
    (v, total) = GradNormComputer(_params(g)).compute()
    assert v == pytest.approx(float(g[0].float()) * 10.0, rel=1e-6) and total == v


def test_float64_norm_past_1e154_is_finite():
    g = torch.full((4,), 1e200, dtype=torch.float64)
    (v, total) = GradNormComputer(_params(g)).compute()
    assert v == pytest.approx(2e200) and total == pytest.approx(2e200)


@pytest.mark.parametrize("bad,expect", [(float("nan"), "nan"), (float("inf"), "inf"), (-float("inf"), "inf")])
def test_a_nonfinite_element_is_reported(bad, expect):
    g = torch.full((5,), 1e20)
    g[2] = bad
    vals = GradNormComputer(_params(torch.ones(2), g)).compute()
    assert vals[0] == pytest.approx(math.sqrt(2))
    assert str(vals[1]) == expect and str(vals[2]) == expect
    assert str(safe_norm(g)) == expect


def _lstm_step(rec, model, opt, scale):
    x = torch.randn(4, 5, 3, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 0, 1])
    with rec.step((x, y)):
        out, _ = model[0](x)
        loss = F.cross_entropy(model[1](out[:, -1]), y)
        opt.zero_grad()
        (loss * scale).backward()
        rec.log(loss=loss)
        opt.step()


@pytest.mark.slow  # an LSTM recorded until it halts: 5.7 CPU s (tests._cputime)
def test_recorder_halts_only_on_a_truly_nonfinite_gradient(tmp_path):
    torch.manual_seed(0)
    model = nn.ModuleList([nn.LSTM(3, 6, batch_first=True), nn.Linear(6, 2)])
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    rec = Recorder(tmp_path / "r", model, optimizer=opt, halt_on_nonfinite=True)
    with pytest.raises(NonFiniteError, match="gradient norm of '0.weight_ih_l0' is non-finite"):
        with rec:
            _lstm_step(rec, model, opt, 1e24)   # elements ~1e23: finite, huge
            _lstm_step(rec, model, opt, 1e40)   # the scale itself overflows float32: inf
    run = open_run(tmp_path / "r")
    g = run.grad_norms()
    step0 = g[g["step"] == 0]
    assert step0["grad_norm"].map(math.isfinite).all() and step0["grad_norm"].max() > 1e22
    assert [(f["kind"], f["step"]) for f in run.failures()] == [("nonfinite", 1)]
