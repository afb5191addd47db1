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


def _spec(at):
    return at.get("plotly_chart")[0].proto.spec


def test_a_findings_show_button_sets_the_view_on_its_step_and_module(run):
    at = open_page("layers", run_path=run, stat="max_abs")
    assert '"focus"' not in _spec(at) and not at.dataframe
    (finding,) = [c for c in at.caption if "100% of its units output zero" in c.value]
    at.button(key="layers_show_0_0").click().run()
    assert not at.exception
    assert _qp(at, "stat") == "frac_dead_units" and _qp(at, "module") == "3"
    step = int(_qp(at, "step"))
    assert at.selectbox(key="layers_stat").value == "frac_dead_units"
    assert '"focus"' in _spec(at)  # the cell is outlined
    assert any(m.value.startswith(f"**Step {step} · `3`**") for m in at.markdown)
    table = at.dataframe[0].value
    assert table.loc["frac_dead_units", "value"] == "1"


def test_the_focus_is_read_from_the_url_and_a_bad_one_is_a_warning(run):
    at = open_page("layers", run_path=run, stat="mean", module="1", step="4")
    assert not at.warning and '"focus"' in _spec(at)
    assert set(at.dataframe[0].value.index) >= {"mean", "std", "max_abs", "frac_dead_units"}
    at = open_page("layers", run_path=run, stat="mean", module="1", step="999")
    assert any("no such cell" in w.value for w in at.warning)
    assert '"focus"' not in _spec(at) and not at.exception


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    from tests.distributed.harness import ROOT, torchrun

    out = tmp_path_factory.mktemp("layers_ddp") / "run"
    proc = torchrun(2, [str(ROOT / "tests/app/_layers_ddp_job.py")], out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_a_rank_picker_shows_each_ranks_statistics(ddp_run):
    at = open_page("layers", run_path=ddp_run, stat="max_abs")
    assert at.selectbox(key="layers_rank").options == ["0", "1"]
    r0 = _spec(at)
    at.selectbox(key="layers_rank").select(1).run()
    assert not at.exception and _qp(at, "rank") == "1"
    assert _spec(at) != r0
    at = open_page("layers", run_path=ddp_run, stat="max_abs", rank="1", module="0", step="0")
    assert at.selectbox(key="layers_rank").value == 1
    assert float(at.dataframe[0].value.loc["max_abs", "value"]) > 100  # inputs 1,000x rank 0's
    at = open_page("layers", run_path=ddp_run, rank="7")
    assert any("?rank=7" in w.value for w in at.warning)
