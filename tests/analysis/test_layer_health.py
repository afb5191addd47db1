"""Layer-health findings (dead_units, saturation, activation_growth, update_ratio) on real
training jobs with planted causes, their healthy twin, and through ``debugkit diagnose``."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from debugkit.analysis.layer_health import detect_layer_findings

from ..conftest import console_script
from ._layer_jobs import JOBS

LAYER_KINDS = {"dead_units", "saturation", "activation_growth", "update_ratio"}


def _diagnose(run) -> list[dict]:
    out = subprocess.run([console_script(), "diagnose", str(run), "--json"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)["findings"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("layer_jobs")
    return {name: job(base / name) for name, job in JOBS.items()}


@pytest.mark.parametrize("job, kind, layer", [
    ("dead_relu", "dead_units", "3"),
    ("saturated_tanh", "saturation", "1"),
    ("growing_activations", "activation_growth", "1"),
    ("update_too_large", "update_ratio", "2.weight"),
    ("update_too_small", "update_ratio", "0.weight"),
])
def test_planted_cause_is_found_and_named(runs, job, kind, layer):
    found = [f for f in _diagnose(runs[job]) if f["kind"] == kind]
    assert found, f"{job}: no {kind} in {_diagnose(runs[job])}"
    f = next((f for f in found if f["layer"] == layer), None)
    assert f is not None, [x["layer"] for x in found]
    assert f["severity"] == "warning" and f["step"] is not None and f["message"]
    if kind == "update_ratio":
        assert f["evidence"]["lr"] is not None and "learning rate" in f["message"]
        high = job == "update_too_large"
        assert (f["evidence"]["median_ratio"] > 0.1) == high
        assert (f["evidence"]["median_ratio"] < 1e-5) == (not high)
    if kind == "saturation":
        assert f["evidence"]["feeding_param"] == "0.weight"
    if kind == "dead_units":
        assert min(f["evidence"]["frac_dead_units"]) > 0.9 and f["evidence"]["samples"] >= 3


def test_healthy_twin_with_tied_frozen_accumulation_and_warmup_stays_clean(runs):
    found = _diagnose(runs["healthy"])
    assert not [f for f in found if f["kind"] in LAYER_KINDS], found
    assert not [f for f in found if f["severity"] != "info"], found


def test_each_planted_job_raises_only_its_own_layer_kinds(runs):
    # A dead-ReLU net does not also report saturation or growth, and so on.
    assert {f["kind"] for f in _diagnose(runs["dead_relu"])} & LAYER_KINDS == {"dead_units"}
    assert {f["kind"] for f in _diagnose(runs["update_too_small"])} & LAYER_KINDS == {"update_ratio"}
    assert {f["kind"] for f in _diagnose(runs["growing_activations"])} & LAYER_KINDS == {
        "activation_growth"}


def _frame(rows):
    return pd.DataFrame(rows, columns=["step", "rank", "order", "module", "module_type", "stat",
                                       "value"])


def test_growth_over_steps_names_the_first_module_and_the_nonfinite_that_follows():
    rows = []
    for i, step in enumerate(range(0, 60, 10)):
        for order, (mod, base) in enumerate([("embed", 1.0), ("block.0", 1.0), ("block.1", 2.0)]):
            grow = mod != "embed"
            v = base * (10.0 ** i if grow else 1.0) if i < 5 else float("nan")
            rows.append((step, 0, order, mod, "Linear", "max_abs", v))
            rows.append((step, 0, order, mod, "Linear", "frac_nonfinite",
                         1.0 if i == 5 and mod == "block.0" else 0.0))
    (f,) = detect_layer_findings(_frame(rows))
    assert f.kind == "activation_growth" and f.layer == "block.0" and f.step == 10
    assert f.evidence["first_nonfinite_step"] == 50
    assert f.evidence["first_nonfinite_module"] == "block.0"


def test_one_bad_batch_of_dead_units_is_not_persistent():
    rows = [(s, 0, 1, "act", "ReLU", "frac_dead_units", 0.95 if s in (10, 30) else 0.2)
            for s in range(0, 60, 10)]
    assert detect_layer_findings(_frame(rows)) == []
    assert detect_layer_findings(_frame(rows), config={"dead_samples": 1})[0].step == 10


def test_thresholds_are_set_through_the_cli(runs):
    out = subprocess.run([console_script(), "diagnose", str(runs["update_too_small"]), "--json",
                          "--set", "layers.update_low=1e-9"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode in (0, 1), out.stderr
    assert not [f for f in json.loads(out.stdout)["findings"] if f["kind"] == "update_ratio"]
