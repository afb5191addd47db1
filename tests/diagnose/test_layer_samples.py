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


def test_the_nan_sample_records_the_failing_step():
    """digits-unscaled-init stops on a NaN loss at step 2: the growth finding names the
    failing step, and the layers table holds that step's weights and gradients."""
    r = open_run(SAMPLE_RUNS / "digits-unscaled-init")
    (fail,) = r.failures()
    step = fail["step"] if isinstance(fail, dict) else fail.step
    at = r.layer_stats()
    at = at[at["step"] == step]
    assert {"w_q50", "g_q50"} <= set(at["stat"])
