"""AppTest of the Scalars page: every logged scalar, the learning rate included, several at
once, smoothing and log scale (issue 17, item 7)."""

from __future__ import annotations

import numpy as np
from streamlit.testing.v1 import AppTest

from debugkit.analysis.scalars import smooth_ema
from debugkit.io.run import open_run
from pages._ui import key_for

from ..conftest import ROOT
from ._apptest import open_page

SAMPLE = ROOT / "sample_runs" / "digits-exploding"


def _open(**query) -> AppTest:
    return open_page("scalars", run="digits-exploding", **query)


def _arr(v) -> np.ndarray:
    """A plotly JSON array: a list, or numpy's typed array as base64 (``bdata``)."""
    if isinstance(v, dict) and "bdata" in v:
        import base64

        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
    return np.asarray(v, dtype=float)


def _traces(at, i=0):
    import json

    return json.loads(at.get("plotly_chart")[i].proto.spec)["data"]


def test_every_scalar_is_offered_and_loss_is_drawn_smoothed():
    at = _open()
    ms = at.multiselect[0]
    assert set(ms.options) == {"loss", "epoch", "lr"}  # the Recorder's lr is there too
    assert ms.value == ["loss"]
    raw, smooth, nan = _traces(at)
    assert raw["name"] == "loss (raw)" and smooth["name"] == "loss"
    assert nan["name"] == "loss: NaN/inf" and nan["customdata"] == ["NaN"] and list(_arr(nan["x"])) == [103]
    sc = open_run(SAMPLE).scalars()
    loss = sc[sc["key"] == "loss"].sort_values("step")["value"].to_numpy()
    expect = smooth_ema(loss, 0.6)
    finite = np.isfinite(expect)
    np.testing.assert_allclose(_arr(smooth["y"]), expect[finite], rtol=1e-6)


def test_several_series_log_scale_and_no_smoothing():
    at = _open()
    at.multiselect[0].set_value(["loss", "lr"]).run()
    at.slider[0].set_value(0.0).run()
    at.toggle[0].set_value(True).run()  # log scale
    assert not at.exception
    import json

    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = [t["name"] for t in spec["data"]]
    assert names == ["loss (raw)", "loss", "lr", "loss: NaN/inf"]  # the lr is drawn raw, once
    assert spec["layout"]["yaxis"]["type"] == "log"
    lr = next(t for t in spec["data"] if t["name"] == "lr")
    assert lr["yaxis"] == "y2" and spec["layout"]["yaxis2"]["side"] == "right"
    y = _arr(lr["y"])
    assert y[0] == 0.1 and y.max() == 10.0  # smoothing 0: the raw learning rate
    # one chart per series as well
    assert len(at.get("plotly_chart")) == 3


def test_a_key_in_the_url_is_validated():
    at = _open(key="lr")
    assert at.multiselect[0].value == ["lr"]
    at = _open(key="no-such-key")
    assert at.multiselect[0].value == ["loss"]
    assert ("?key='no-such-key' is not a scalar this run logged: showing the default instead."
            in [w.value for w in at.warning])
    at = _open(key=["lr", "nope"])
    assert at.multiselect[0].value == ["lr"]
    assert "?key='nope' is not a scalar this run logged: left out." in [w.value for w in at.warning]


def test_an_overlay_run_the_server_does_not_list_is_a_warning():
    at = _open(**{"with": ["digits-compare-base", "../secret"]})
    assert "?with='../secret' is not a run this server lists besides this one: left out." in \
        [w.value for w in at.warning]
    names = [t.get("name") for t in _spec(at)["data"]]
    assert any(str(n).endswith(" · digits-compare-base") for n in names)


def _spec(at, i=0):
    import json

    return json.loads(at.get("plotly_chart")[i].proto.spec)


def test_an_exploding_run_opens_on_a_log_axis_and_a_healthy_one_on_a_linear_one():
    assert _spec(_open())["layout"]["yaxis"]["type"] == "log"  # 2.2 .. 2.1e9
    healthy = open_page("scalars", run="digits-mlp")
    assert healthy.toggle[0].value is False
    assert _spec(healthy)["layout"]["yaxis"].get("type", "linear") == "linear"


def test_the_learning_rate_is_drawn_as_logged_at_any_smoothing():
    at = _open(key="lr")
    assert at.slider[0].value == 0.6
    lr = next(t for t in _spec(at)["data"] if t["name"] == "lr")
    sc = open_run(SAMPLE).scalars()
    raw = sc[sc["key"] == "lr"].sort_values("step")["value"].to_numpy()
    np.testing.assert_array_equal(_arr(lr["y"]), raw)  # 10.0 stays 10.0, not an average


def test_nan_reads_nan_in_the_table():
    at = _open()
    assert not at.dataframe  # a Markdown table: no data grid for the browser to load first
    (table,) = [m.value for m in at.markdown if m.value.startswith("| key |")]
    head, _, *rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in table.splitlines()]
    assert head == ["key", "rank", "last step", "last value", "last smoothed"]
    row = next(r for r in rows if r[0] == "loss")
    assert row[3] == "NaN" and row[2] == "103"


def test_the_view_round_trips_through_the_url():
    at = _open()
    at.multiselect[0].set_value(["loss", "epoch"]).run()
    at.slider[0].set_value(0.3).run()
    at.toggle[0].set_value(False).run()  # linear, against the default for this run
    at.toggle[1].set_value(False).run()  # no raw lines
    q = at.query_params
    assert q["key"] == ["loss", "epoch"] and q["smoothing"] == "0.3"
    assert q["log"] == "0" and q["raw"] == "0"
    # the link opened in a new session shows the same view
    again = open_page("scalars", run="digits-exploding", key=["loss", "epoch"], smoothing="0.3",
                      log="0", raw="0")
    assert again.multiselect[0].value == ["loss", "epoch"]
    assert again.slider[0].value == 0.3
    assert again.toggle[0].value is False and again.toggle[1].value is False
    spec = _spec(again)
    assert spec["layout"]["yaxis"].get("type", "linear") == "linear"
    assert not any(t["name"].endswith("(raw)") for t in spec["data"])
    bad = open_page("scalars", run="digits-exploding", smoothing="7", log="maybe")
    assert bad.slider[0].value == 0.6 and bad.toggle[0].value is True


def test_other_runs_are_drawn_over_this_one_and_kept_in_the_url():
    at = open_page("scalars", run="digits-compare-lr")
    at.multiselect(key=key_for("scalars_with", ROOT / 'sample_runs' / 'digits-compare-lr')) \
        .set_value(["digits-compare-base", "digits-compare-unlabelled"]).run()
    assert not at.exception
    names = [t["name"] for t in _spec(at)["data"]]
    assert names[:3] == ["loss", "loss · digits-compare-base", "loss · digits-compare-unlabelled"]
    assert at.query_params["with"] == ["digits-compare-base", "digits-compare-unlabelled"]
    again = open_page("scalars", run="digits-compare-lr", key=["loss", "lr"], **{"with": "digits-compare-base"})
    spec = _spec(again)
    by = {t["name"]: t for t in spec["data"]}
    assert {"loss", "loss · digits-compare-base", "lr", "lr · digits-compare-base"} <= set(by)
    assert by["lr · digits-compare-base"]["yaxis"] == "y2"  # every learning rate on its own axis
    bad = open_page("scalars", run="digits-compare-lr", **{"with": "../etc"})
    assert [t["name"] for t in _spec(bad)["data"]] == ["loss (raw)", "loss"]


def test_every_chart_has_a_csv_download():
    at = _open(key=["loss", "lr"])
    buttons = at.get("download_button")
    assert len(buttons) == len(at.get("plotly_chart")) == 3
    assert all(b.proto.label == "CSV" for b in buttons)
