"""Audit figures: traces and layout built from a stored audit's data."""

from __future__ import annotations

import json

import numpy as np
import pytest

from debugkit.audit import list_audits, load_audit
from debugkit.charts.audit import (
    beeswarm_offsets,
    build_disparity_figure,
    build_group_metrics_figure,
    build_mean_abs_figure,
    short,
)

from ..conftest import SAMPLE_RUNS


@pytest.fixture(scope="module")
def doc():
    run = SAMPLE_RUNS / "credit-audit"
    e = next(e for e in list_audits(run) if "Gradient" in e["name"])
    return load_audit(run, e["id"]).doc


def test_disparity_figure_has_one_trace_per_compared_group_and_the_band(doc):
    a = doc["sensitive"]["age_in_years"]
    fig = build_disparity_figure(a, band=(0.8, 1.25))
    assert [t.name for t in fig.data] == ["<25 vs 25-34", "35-44 vs 25-34", "45-59 vs 25-34", "60+ vs 25-34"]
    lt25 = fig.data[0]
    sel = a["disparities"]["<25"]["selection_rate"]
    assert lt25.x[0] == pytest.approx(sel["ratio"])
    assert lt25.error_x.arrayminus[0] == pytest.approx(sel["ratio"] - sel["ratio_ci"][0])
    assert fig.layout.xaxis.type == "log"
    rect = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rect) == 1 and (rect[0].x0, rect[0].x1) == (0.8, 1.25)
    assert 0.8 in fig.layout.xaxis.tickvals and 1.25 in fig.layout.xaxis.tickvals


def test_group_metrics_figure_bars_and_intervals(doc):
    a = doc["sensitive"]["sex"]
    fig = build_group_metrics_figure(a)
    assert [t.name for t in fig.data] == ["female (n=124)", "male (n=276) · reference"]
    female = fig.data[0]
    assert female.y[1] == pytest.approx(a["groups"]["female"]["selection_rate"])
    assert female.error_y.array[1] == pytest.approx(a["groups_ci"]["female"]["selection_rate"][1] -
                                                    a["groups"]["female"]["selection_rate"])


def test_mean_abs_marks_sensitive_features(doc):
    fig = build_mean_abs_figure(doc["shap"]["mean_abs"], sensitive={"age_in_years"},
                                proxies={"housing": "age_in_years"})
    names = {t.name: list(t.y) for t in fig.data}
    assert names["sensitive feature"] == ["age_in_years"] and names["likely proxy"] == ["housing"]
    assert fig.data[0].marker.color == "#C0392B"


def test_beeswarm_offsets_spread_ties_symmetrically():
    off = beeswarm_offsets(np.zeros(5), nbins=10, width=0.4)
    assert sorted(off.tolist()) == pytest.approx([-0.4, -0.2, 0.0, 0.2, 0.4])
    assert beeswarm_offsets(np.array([])).shape == (0,)


def test_short_labels():
    assert short("number_of_people_being_liable_to_provide_maintenance_for") == "number_of_peopl…_maintenance_for"
    assert short("age") == "age"


def test_beeswarm_names_each_feature_once_and_sends_compact_points():
    """The SHAP beeswarm, the audit page's largest figure: one trace per feature with its
    name once (``meta``, shown on hover), the two kinds in one legend entry each, and
    float32 coordinates, so the figure sent to the browser stays small (issue 35 item 9)."""
    import pandas as pd

    from debugkit.charts.audit import build_beeswarm_figure

    rng = np.random.default_rng(0)
    n = 400
    values = pd.DataFrame({"credit_amount_in_deutsche_mark": rng.normal(3000, 900, n),
                           "duration_in_month": rng.integers(4, 72, n),
                           "status_of_existing_checking_account": rng.choice(["... < 0 DM", "no checking account"], n)})
    shap = pd.DataFrame({c: rng.normal(0, 0.2, n) for c in values})
    fig = build_beeswarm_figure(shap, values, list(values), sensitive=())
    assert [t.meta for t in fig.data] == list(values)
    assert [t.name for t in fig.data if t.showlegend] == ["numeric feature", "categorical feature (value on hover)"]
    assert all("%{meta} = " in t.hovertemplate for t in fig.data)
    assert fig.data[0].customdata[0] == pytest.approx(values.iloc[0, 0], rel=1e-6)
    assert list(fig.data[2].text[:2]) == list(values.iloc[:2, 2])
    # no per-point text repeats a feature's name; the points' bytes on the wire
    spec = fig.to_json()
    assert "status_of_existing_checking_account = " not in spec
    per_point = len(json.dumps(json.loads(spec)["data"])) / (3 * n)
    assert per_point < 35, per_point  # 71 when every point carried "<feature> = <value>", float64 x, y


def test_beeswarm_colours_numeric_points_by_rank_in_small_integers():
    """A numeric feature's points are coloured by their rank among its values (low blue,
    high red): sent as uint16 ranks on a scale to the last rank, not float64 fractions
    (the beeswarm is most of the audit page's figure JSON)."""
    import pandas as pd

    from debugkit.charts.audit import build_beeswarm_figure

    values = pd.DataFrame({"age": [30.0, 20.0, 50.0, 40.0, 20.0]})
    shap = pd.DataFrame({"age": [0.1, -0.2, 0.3, 0.0, -0.1]})
    fig = build_beeswarm_figure(shap, values, ["age"])
    m = fig.data[0].marker
    assert np.asarray(m.color).dtype == np.uint16
    assert list(m.color) == [2, 0, 4, 3, 1] and (m.cmin, m.cmax) == (0, 4)  # ties: in row order
    assert list(m.colorbar.tickvals) == [0, 4] and list(m.colorbar.ticktext) == ["low", "high"]
