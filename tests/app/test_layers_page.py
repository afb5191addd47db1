"""The Layers page (AppTest): a recorded dead-ReLU run's heatmap, fan chart and finding,
the choice carried in the URL, a bad URL value, and a run without layer statistics."""

from __future__ import annotations

import pytest

from tests.analysis._layer_jobs import dead_relu
from tests.conftest import SAMPLE_RUNS

from ._apptest import open_page


def _qp(at, name):
    v = at.query_params[name]
    return v[0] if isinstance(v, list) else v


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return dead_relu(tmp_path_factory.mktemp("layers") / "dead")


def test_layers_page_shows_the_heatmap_fan_chart_and_the_finding(run):
    at = open_page("layers", run_path=run)
    assert not at.error
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # the heatmap and the fan chart
    cards = " ".join(m.value for m in at.markdown)
    assert "**dead\\_units**" in cards or "**dead_units**" in cards, cards
    assert any("100% of its units output zero" in c.value for c in at.caption)
    assert _qp(at, "stat") == "frac_dead_units" and _qp(at, "param") == "0.weight"
    heat = charts[0].proto.spec
    assert "frac_dead_units" in heat


def test_the_choice_is_read_from_and_written_to_the_url(run):
    at = open_page("layers", run_path=run, stat="max_abs", param="2.weight", of="g")
    assert at.selectbox(key="layers_stat").value == "max_abs"
    assert at.selectbox(key="layers_param").value == "2.weight"
    assert at.selectbox(key="layers_of").value == "g"
    at.selectbox(key="layers_stat").select("frac_zero").run()
    assert not at.exception
    assert _qp(at, "stat") == "frac_zero"


def test_a_bad_url_value_is_a_warning_not_a_traceback(run):
    at = open_page("layers", run_path=run, stat="nope")
    assert any("'nope' is not one of" in w.value for w in at.warning)
    assert at.selectbox(key="layers_stat").value == "frac_dead_units"


def test_a_run_without_layer_statistics_says_how_to_record_them():
    at = open_page("layers", run_path=SAMPLE_RUNS / "digits-mlp")
    assert any(i.value.startswith("This run has no layer statistics.") for i in at.info)
