"""vanishing_grad must persist past the first steps and the warmup, and relative to the
layer's own later values (issue 30 item 7)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from debugkit.analysis.gradients.detectors import detect_gradient_findings, detect_vanishing_grad
from debugkit.analysis.gradients.matrix import pivot_grad_norms
from tests.analysis.test_gradients import grads_frame, healthy, healthy_loss, scalars_frame


def _vanishing(vals, scalars=None):
    return detect_vanishing_grad(pivot_grad_norms(grads_frame(vals))[0], scalars=scalars)


def test_tiny_from_the_start_of_a_short_run_is_not_vanishing():
    vals = healthy(n=18)
    vals["enc.0.weight"] = vals["enc.0.weight"] * 1e-8  # tiny over all 18 steps
    assert _vanishing(vals) == []
    longer = healthy(n=40)
    longer["enc.0.weight"] = longer["enc.0.weight"] * 1e-8  # still tiny 10+ steps after step 20
    assert [(f.step, f.layer) for f in _vanishing(longer)] == [(0, "enc.0.weight")]


def test_a_layer_that_grows_out_of_its_tiny_start_is_not_vanishing():
    vals = healthy(n=200)
    vals["enc.0.weight"][:60] *= 1e-8  # tiny for 60 steps, then as large as the others
    assert _vanishing(vals) == []


def test_tiny_through_a_short_run_still_in_its_lr_warmup_is_not_vanishing():
    vals = healthy(n=60)
    vals["enc.0.weight"] *= 1e-8  # tiny throughout
    assert [f.layer for f in _vanishing(vals)] == ["enc.0.weight"]  # 40 steps past step 20
    lr = pd.DataFrame({"step": np.arange(60), "rank": 0, "key": "lr",
                       "value": np.minimum(np.arange(60) / 55, 1.0) * 1e-3, "wall_time": 0.0})
    scalars = pd.concat([scalars_frame(healthy_loss(60)), lr])
    assert _vanishing(vals, scalars) == []  # the warmup ends at step 55: 5 steps after it
    assert [f.kind for f in detect_gradient_findings(grads_frame(vals), scalars)
            if f.kind == "vanishing_grad"] == []
