"""AppTest of the Scalars page: every logged scalar, the learning rate included, several at
once, smoothing and log scale (issue 17, item 7)."""

from __future__ import annotations

import numpy as np
from streamlit.testing.v1 import AppTest

from debugkit.analysis.scalars import smooth_ema
from debugkit.io.run import open_run

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
    raw, smooth = _traces(at)
    assert raw["name"] == "loss (raw)" and smooth["name"] == "loss"
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
    assert names == ["loss (raw)", "loss", "lr (raw)", "lr"]
    assert spec["layout"]["yaxis"]["type"] == "log"
    lr = next(t for t in spec["data"] if t["name"] == "lr")
    y = _arr(lr["y"])
    assert y[0] == 0.1 and y.max() == 10.0  # smoothing 0: the raw learning rate
    # one chart per series as well
    assert len(at.get("plotly_chart")) == 3


def test_a_key_in_the_url_is_validated():
    at = _open(key="lr")
    assert at.multiselect[0].value == ["lr"]
    at = _open(key="no-such-key")
    assert at.multiselect[0].value == ["loss"]
