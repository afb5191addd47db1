"""`debugkit diagnose` on the golden sample runs finds the planted problem at the right
step and layer group, and nothing of severity warning or error on the healthy run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from debugkit.cli import main
from debugkit.diagnose import diagnose
from debugkit.io.run import open_run

from ..conftest import ROOT, SAMPLE_RUNS


def _by_kind(findings):
    out = {}
    for f in findings:
        out.setdefault(f.kind, []).append(f)
    return out


def test_healthy_run_has_no_warning_or_error():
    found = diagnose(open_run(SAMPLE_RUNS / "digits-mlp"))
    assert [f for f in found if f.severity in ("error", "warning")] == []


def test_exploding_run():
    found = diagnose(open_run(SAMPLE_RUNS / "digits-exploding"))
    k = _by_kind(found)
    # The StepLR typo takes the learning rate to 10 at step 90 (epoch 3); the first
    # gradients taken after an update at lr 10 are step 91's.
    ex = k["exploding_grad"]
    assert [(f.step, f.layer, f.evidence["reason"]) for f in ex] == [(91, "10.bias", "jump")]
    assert ex[0].evidence["factor"] == pytest.approx(14.632, abs=0.001)
    ng = k["nonfinite_grad"]
    assert [(f.step, f.layer, f.severity) for f in ng] == [(103, "0.weight", "error")]
    assert len(ng[0].evidence["layers"]) == 14
    assert ng[0].evidence["loss_finite"] is False
    # one fact, one finding: the loss and the Recorder's capture of step 103 are its evidence
    assert "nonfinite_loss" not in k and "step_failure" not in k
    rel = {r["kind"]: r for r in ng[0].evidence["related"]}
    assert list(rel) == ["nonfinite_loss", "step_failure"]
    assert rel["nonfinite_loss"]["evidence"]["value"] == "nan"
    assert rel["step_failure"]["evidence"]["failure"] == ng[0].evidence["failure"] == "r0-s0000103-nonfinite"
    assert [f.step for f in k["loss_spike"]] == [94, 98]
    assert [f.step for f in found] == sorted(f.step for f in found)


def test_vanishing_run_names_the_early_layers():
    found = diagnose(open_run(SAMPLE_RUNS / "digits-vanishing"))
    assert [f.kind for f in found if f.severity != "info"] == ["vanishing_grad"]
    f = found[0]
    assert (f.step, f.layer) == (0, "0.weight")
    # Below 1e-4 of the largest layer: the first six Linear layers' weights and biases,
    # except 10.weight (the largest of those, just above the ratio).
    assert f.evidence["layers"] == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias",
                                    "6.weight", "6.bias", "8.weight", "8.bias", "10.bias"]
    assert f.evidence["largest_layer"] == "20.weight"


def test_cli_json_shape_and_order(capsys):
    assert main(["diagnose", str(SAMPLE_RUNS / "digits-exploding"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"run", "status", "findings"}
    assert out["run"] == "digits-exploding" and out["status"] == "failed"
    steps = [f["step"] for f in out["findings"]]
    assert steps == sorted(steps)
    first = out["findings"][0]
    assert set(first) == {"kind", "step", "rank", "layer", "severity", "message", "evidence"}
    assert first["kind"] == "exploding_grad"


def test_cli_overrides_thresholds(capsys):
    run = str(SAMPLE_RUNS / "digits-exploding")
    assert main(["diagnose", run, "--json", "--set", "gradients.explode_factor=100000"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    # Only the 1.5e5x jump of step 100 clears a 1e5 factor.
    assert [(f["step"], f["layer"]) for f in found if f["kind"] == "exploding_grad"] == [(100, "8.weight")]


@pytest.mark.parametrize("arg,match", [
    ("gradients.explode_factr=3", "unknown key 'explode_factr'"),
    ("explode_factor=3", "expected SOURCE.KEY=VALUE"),
    ("nosuch.x=1", "unknown source 'nosuch'"),
    ("gradients.vanish_window=1", "vanish_window=1: expected an integer >= 2"),
])
def test_cli_bad_override_is_one_line_and_exit_2(arg, match, capsys):
    assert main(["diagnose", str(SAMPLE_RUNS / "digits-mlp"), "--set", arg]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_cli_table_runs_as_a_subprocess():
    proc = subprocess.run([sys.executable, "-m", "debugkit", "diagnose", str(SAMPLE_RUNS / "digits-vanishing")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "digits-vanishing: finished, 1 finding(s)"
    assert lines[1].split() == ["step", "rank", "severity", "kind", "layer", "message"]
    assert lines[2].split()[:5] == ["0", "0", "warning", "vanishing_grad", "0.weight"]
