"""AppTest of the Compare page (``?run=A&base=B``) and its entry on the Home page."""

from __future__ import annotations

import pytest


def _texts(at):
    out = []
    for kind in ("title", "subheader", "markdown", "caption", "error", "warning", "info", "success"):
        out += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(out)


def _table(at, first_column, value=None):
    """The records of the dataframe whose first column is ``first_column`` (and whose first
    row holds ``value`` there, when given)."""
    for df in at.dataframe:
        v = df.value
        if list(v.columns)[:1] == [first_column] and (value is None or v.iloc[0, 0] == value):
            return v.to_dict("records")
    raise AssertionError(f"no table starting with column {first_column!r}")


def _open(app, **query):
    at = app(**query)
    at.switch_page("pages/compare.py")
    at.run()
    assert not at.exception
    return at


def test_deep_link_shows_the_sections_in_order(app):
    at = _open(app, run="digits-compare-lr", base="digits-compare-base")
    assert [s.value for s in at.subheader] == ["1. What differs before step 0", "2. Where they diverge",
                                               "3. Findings in one and not the other"]
    (warning,) = at.warning
    assert warning.value.startswith("The run leaves the base run's band at step 12; the first layer "
                                    "to diverge is '0.weight' (step 12); the loss diverges at step 36.")
    assert _table(at, "name", "lr") == [{"name": "lr", "run": "0.5", "base": "0.1", "status": "differs"}]
    text = _texts(at)
    assert ":orange-badge[:material/difference: config: differs]" in text
    assert "curves: diverges @ step 12]" in text
    assert "What follows: finding **exploding_grad** at step 14" in text
    charts = at.get("plotly_chart")
    assert len(charts) == 2  # the loss and the first diverging layer's gradient norm
    assert at.selectbox(key="compare_base_digits-compare-base").value == "digits-compare-base"
    assert at.query_params["base"] == "digits-compare-base"


def test_more_runs_are_overlaid(app):
    at = _open(app, run="digits-compare-lr", base="digits-compare-base")
    at.multiselect(key="compare_extra").set_value(["digits-compare-unlabelled"]).run()
    assert not at.exception
    import json

    fig = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = [t.get("name") for t in fig["data"]]
    assert names[2:5] == ["digits-compare-lr", "digits-compare-base", "digits-compare-unlabelled"]


def test_label_corrupted_pair_shows_the_batch_spec_difference(app):
    at = _open(app, run="digits-compare-unlabelled", base="digits-compare-base")
    spec = _table(at, "tensor")
    assert spec == [{"tensor": "1", "field": "range", "run": "[-100, 10]", "base": "[0, 10]",
                     "status": "differs"}]
    data = _table(at, "dataset")
    assert data[0]["name"] == "fingerprint" and data[0]["status"] == "differs (3 of 16 sampled items)"
    assert at.success[0].value.startswith("No divergence")


def test_older_run_shows_unknown_not_equal(app):
    # digits-vanishing was recorded before the Recorder kept the full package list and the
    # data fingerprint (an older debugkit's run)
    at = _open(app, run="digits-vanishing", base="digits-compare-base")
    text = _texts(at)
    assert "**Environment** :material/help: `unknown`" in text
    assert "**Data** :material/help: `unknown`" in text
    assert "the others are unknown, not equal" in text


def test_bad_base_param_is_an_error_and_the_page_stays_up(app):
    at = _open(app, run="digits-compare-lr", base="../etc")
    assert "run id '../etc': expected letters" in at.error[0].value
    assert at.info[0].value.startswith("Pick the base run")
    at = _open(app, run="digits-compare-lr", base="no-such-run")
    assert at.error[0].value == "base run 'no-such-run': no such run besides this one; pick one below"
    at = _open(app, run="digits-compare-lr")
    assert not at.error and at.info[0].value.startswith("Pick the base run")


def test_home_picks_two_runs_and_opens_the_comparison(app):
    at = app()
    at.run()
    at.selectbox(key="home_compare_run").set_value("digits-compare-unlabelled").run()
    at.selectbox(key="home_compare_base").set_value("digits-compare-base").run()
    at.button(key="home_compare").click().run()
    assert not at.exception
    assert at.title[0].value == "Compare runs"
    assert at.query_params["run"] == "digits-compare-unlabelled"
    assert at.query_params["base"] == "digits-compare-base"


def test_extra_runs_and_the_layer_round_trip_through_the_url(app):
    import json

    at = _open(app, run="digits-compare-lr", base="digits-compare-base")
    at.multiselect(key="compare_extra").set_value(["digits-compare-unlabelled"]).run()
    layer_box = next(s for s in at.selectbox if s.label == "Layer")
    other = next(o for o in layer_box.options if o != layer_box.value)
    layer_box.set_value(other).run()
    assert not at.exception
    assert at.query_params["extra"] in ("digits-compare-unlabelled", ["digits-compare-unlabelled"])
    assert at.query_params["layer"] == other
    again = _open(app, run="digits-compare-lr", base="digits-compare-base",
                  extra="digits-compare-unlabelled", layer=other)
    assert again.multiselect(key="compare_extra").value == ["digits-compare-unlabelled"]
    assert next(s for s in again.selectbox if s.label == "Layer").value == other
    grad = json.loads(again.get("plotly_chart")[1].proto.spec)
    assert grad["layout"]["yaxis"]["title"]["text"] == f"grad norm: {other}"
    assert "digits-compare-unlabelled" in [t.get("name") for t in grad["data"]]


def test_home_compare_keeps_the_base_when_the_run_changes_and_refuses_the_same_run(app):
    at = app()
    at.run()
    at.selectbox(key="home_compare_base").set_value("digits-compare-base").run()
    # Picking the run to check afterwards leaves the base as chosen (its options do not change).
    at.selectbox(key="home_compare_run").set_value("digits-compare-lr").run()
    assert at.selectbox(key="home_compare_base").value == "digits-compare-base"
    assert not at.button(key="home_compare").disabled
    at.selectbox(key="home_compare_run").set_value("digits-compare-base").run()
    assert at.button(key="home_compare").disabled
    assert "Pick a base other than the run to check." in [c.value for c in at.caption]


def test_the_loss_scale_round_trips_through_the_url(app):
    import json

    at = _open(app, run="digits-compare-lr", base="digits-compare-base")
    toggle = at.toggle(key="cmp_log")
    assert toggle.value is False  # the losses span less than three decades: linear
    assert json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["yaxis"].get("type") != "log"
    toggle.set_value(True).run()
    assert not at.exception
    assert at.query_params["log"] == "1"
    again = _open(app, run="digits-compare-lr", base="digits-compare-base", log="1")
    assert again.toggle(key="cmp_log").value is True
    assert json.loads(again.get("plotly_chart")[0].proto.spec)["layout"]["yaxis"]["type"] == "log"
    again.toggle(key="cmp_log").set_value(False).run()
    assert "log" not in again.query_params  # back at the default: left out of the URL


def test_an_exploding_run_compares_on_a_log_loss_axis_by_default(app):
    import json

    at = _open(app, run="digits-exploding", base="digits-compare-base")
    assert at.toggle(key="cmp_log").value is True
    assert json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["yaxis"]["type"] == "log"
    assert "log" not in at.query_params


@pytest.mark.parametrize("query, warning", [
    ({"layer": "no.such.layer"}, "?layer='no.such.layer' is not a layer this comparison has: "
                                 "showing the default instead."),
    ({"log": "yes"}, "?log='yes' is not 0 or 1: showing the default instead."),
    ({"extra": "no-such-run"}, "?extra='no-such-run' is not a run this server lists besides the run "
                               "and its base: showing the default instead."),
])
def test_a_view_value_the_page_cannot_use_is_a_warning_and_the_default(app, query, warning):
    import json

    at = _open(app, run="digits-compare-lr", base="digits-compare-base", **query)
    assert warning in [w.value for w in at.warning]
    assert next(s for s in at.selectbox if s.label == "Layer").value == "0.weight"  # the first to diverge
    assert at.toggle(key="cmp_log").value is False
    assert at.multiselect(key="compare_extra").value == []
    names = [t.get("name") for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]]
    assert "no-such-run" not in names


def test_unknown_extra_runs_are_named_and_the_known_ones_drawn(app):
    at = _open(app, run="digits-compare-lr", base="digits-compare-base",
               extra=["digits-compare-unlabelled", "../etc", "digits-compare-lr"])
    assert at.multiselect(key="compare_extra").value == ["digits-compare-unlabelled"]
    assert ("?extra='../etc, digits-compare-lr' is not a run this server lists besides the run and its "
            "base: left out.") in [w.value for w in at.warning]
