"""The layer-statistics samples (examples/layer_health.py, docs/layers.md): each shows its
finding through ``debugkit diagnose --json``, and only the layer findings it was made for."""

from __future__ import annotations

import json
import subprocess

import pytest

from debugkit.io.run import open_run

from ..conftest import SAMPLE_RUNS, console_script

LAYER_KINDS = {"dead_units", "saturation", "activation_growth", "update_ratio"}
# sample -> (layer finding kind, the modules or parameters it names)
EXPECTED = {
    "digits-dead-relu": ("dead_units", {"1", "3", "5", "7"}),
    "digits-saturated-sigmoid": ("saturation", {"3", "5"}),
    "digits-unscaled-init": ("activation_growth", {"2"}),
    "digits-adam-lr-typo": ("update_ratio", {"0.weight", "2.weight", "4.weight"}),
}


@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_sample_shows_its_layer_finding(sample):
    run = SAMPLE_RUNS / sample
    p = subprocess.run([console_script(), "diagnose", str(run), "--json"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    findings = json.loads(p.stdout)["findings"]
    kind, where = EXPECTED[sample]
    layer = [f for f in findings if f["kind"] in LAYER_KINDS]
    assert {f["kind"] for f in layer} == {kind}, [(f["kind"], f["layer"]) for f in layer]
    assert {f["layer"] for f in layer} == where
    r = open_run(run)
    assert r.manifest["layer_stats_every"] == 10
    df = r.layer_stats()
    assert len(df) and 0 in set(df["step"])


def test_the_nan_sample_records_the_outputs_of_the_failing_step():
    """digits-unscaled-init stops on a NaN loss at step 2, an unsampled step (every 10):
    the capture ran that step's forward again with the hooks, so the layers table holds
    its module outputs (the first non-finite one in module 4) with its weights and
    gradients, and the growth finding names where the NaN was born."""
    p = subprocess.run([console_script(), "diagnose", str(SAMPLE_RUNS / "digits-unscaled-init"),
                        "--json"], capture_output=True, text=True, timeout=300)
    (growth,) = [f for f in json.loads(p.stdout)["findings"] if f["kind"] == "activation_growth"]
    assert growth["evidence"]["first_nonfinite_step"] == 2
    assert growth["evidence"]["first_nonfinite_module"] == "4"
    at = open_run(SAMPLE_RUNS / "digits-unscaled-init").layer_stats()
    at = at[at["step"] == 2]
    assert {"w_q50", "g_q50"} <= set(at["stat"])
    outs = at[at["module_type"] != "param"].pivot(index="module", columns="stat", values="value")
    assert len(outs) == 17 and outs.loc["0", "frac_nonfinite"] == 0
    assert outs.loc["4", "frac_nonfinite"] > 0
