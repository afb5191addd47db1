"""Every page that shows findings gets them one way (``pages._data.findings``: `debugkit
diagnose`, kept to the page's area) and draws them one way (``pages._ui.show_findings``):
its cards come in the order ``debugkit diagnose`` prints (issue 31, item 9)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from ..conftest import ROOT, console_script
from ._apptest import open_page

CARD = re.compile(r"^:material/(error|warning|info): \*\*(?P<kind>[^*]+)\*\*(?: · step (?P<step>\d+))?"
                  r"(?: · rank (?P<rank>\d+))?(?: · `(?P<layer>[^`]+)`)?")


def _diagnose(path) -> list[tuple]:
    """``debugkit diagnose --json``, through the installed console script."""
    out = subprocess.run([console_script(), "diagnose", str(path), "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    data = json.loads(out.stdout)
    found = data["findings"] if isinstance(data, dict) else data
    return [(f["kind"], f.get("step"), f.get("rank"), f.get("layer")) for f in found]


def _cards(at) -> list[tuple]:
    out = []
    for m in at.markdown:
        hit = CARD.match(m.value)
        if hit:
            out.append((hit["kind"].replace("\\_", "_"), int(hit["step"]) if hit["step"] else None,
                        int(hit["rank"]) if hit["rank"] else None, hit["layer"]))
    return out


def _check(page, path, kinds=None, **open_kw):
    expected = _diagnose(path)
    at = open_page(page, **open_kw)
    shown = _cards(at)
    want = [f for f in expected if kinds is None or f[0] in kinds]
    assert want, expected  # the case shows something
    assert shown == want, (shown, expected)


@pytest.mark.parametrize("page,run,kinds", [
    ("overview", "ddp-hang", None),
    ("overview", "digits-compare-lr", None),
    ("gradients", "digits-exploding", ("nonfinite_grad", "exploding_grad", "vanishing_grad",
                                       "dead_layer", "loss_spike", "nonfinite_loss", "step_failure")),
    ("gradients", "digits-compare-lr", ("exploding_grad", "loss_spike")),
    ("memory", "memory-leak", ("memory_leak", "memory_pressure", "fragmentation")),
    ("distributed", "ddp-straggler", ("rank_crashed", "rank_lost", "straggler", "hang", "rank_divergence")),
    ("distributed", "ddp-hang", ("rank_crashed", "rank_lost", "straggler", "hang", "rank_divergence")),
])
def test_a_page_shows_its_findings_in_the_order_debugkit_diagnose_prints(page, run, kinds):
    _check(page, ROOT / "sample_runs" / run, kinds, run=run)


def test_checkpoints_shows_its_findings_in_the_order_debugkit_diagnose_prints(tmp_path):
    from tests.checkpoint_factory import train_with_checkpoints

    train_with_checkpoints(tmp_path / "frozen", freeze_first=True)
    _check("checkpoints", tmp_path / "frozen", ("nonfinite_weights", "frozen_layer"),
           run_path=tmp_path / "frozen")


@pytest.mark.slow  # Home indexes every sample first: 6.2 CPU s (tests._cputime)
def test_a_new_server_shows_a_listed_runs_findings_from_the_index():
    """After Home has listed the runs (the index holds what every diagnose source found),
    a page on a new server (no Streamlit cache) shows the same cards without running a
    detector: no torch import for the capture's batch, no gradient analysis."""
    import importlib

    import streamlit as st

    failures_source = importlib.import_module("debugkit.diagnose.failures")
    gradient_source = importlib.import_module("debugkit.diagnose.gradients")

    run = "digits-exploding"
    expected = [f for f in _diagnose(ROOT / "sample_runs" / run)
                if f[0] in ("exploding_grad", "loss_spike", "nonfinite_grad", "step_failure")]
    open_page(None)  # Home: the run list fills the index
    st.cache_data.clear()
    st.cache_resource.clear()
    calls = []

    def refuse(*a, **k):
        calls.append(1)
        raise AssertionError("a detector ran")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(failures_source, "collect", refuse)
        mp.setattr(gradient_source, "collect", refuse)
        at = open_page("gradients", run=run)
        assert _cards(at) == expected
        assert not calls
    # changed thresholds are not what the index holds: the detectors run
    explode = next(n for n in at.number_input if n.label == "explode_factor")
    explode.set_value(12.0).run()
    assert not at.exception
    assert [k for k, *_ in _cards(at)].count("nonfinite_grad") == 1
