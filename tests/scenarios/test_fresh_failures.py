"""Issue 30's acceptance scenarios: fresh failing jobs (tests/scenarios/jobs/), recorded by
real runs and checked end to end through the installed ``debugkit`` console script, run
from another folder with relative paths (see test_scenarios.py for the conventions)."""

from __future__ import annotations

import json

import pytest

from tests.scenarios.test_scenarios import _job, _kinds, debugkit, findings, replay


# ---------------------------------------------------------------------- saturation
@pytest.fixture(scope="module")
def sigmoid_run(tmp_path_factory):
    return _job(tmp_path_factory, "sigmoid_saturation", 0)


@pytest.mark.slow
def test_saturated_sigmoid_layer_is_named_with_its_step(sigmoid_run):
    fs = findings(sigmoid_run)
    dead = [f for f in fs if f["kind"] == "dead_layer"]
    assert [(f["step"], f["rank"], f["layer"]) for f in dead] == [(30, 0, "0.weight")]
    ev = dead[0]["evidence"]
    assert ev["went_to_zero"] == {"0.weight": 30, "0.bias": 30}
    assert ev["last_nonzero_step"] == {"0.weight": 29, "0.bias": 29}
    assert ev["zero_in_every_logged_step"] == []
    assert "saturated" in dead[0]["message"] and "from step 30" in dead[0]["message"]
    text = debugkit(sigmoid_run, "diagnose", "run").stdout
    assert "dead_layer" in text and "'0.weight', '0.bias'" in text
