"""AppTest of the pages on an inference run recorded by ``debugkit.serve``: Home's row,
the Overview (requests on the x axis, rolling p50/p95/p99, errors), Memory (memory per
request, the service's thresholds) and Replay (a failing request's culprit)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from debugkit import open_run
from tests.conftest import SAMPLE_RUNS
from tests.serve_fixtures import record_service, tagger_traffic, write_project

from ._apptest import open_page

RUN = "svc"
FID = "r0-000-req0000040-error"


@pytest.fixture
def svc(tmp_path, monkeypatch):
    """A token tagger served 300 requests, one with token id 150 (vocabulary 100), and a
    handler that keeps 64 KiB per request alive; the project's folder is the operator's
    code root."""
    root = write_project(tmp_path / "proj")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(root))
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    return record_service(Path(os.environ["DEBUGKIT_STORE"]) / RUN, factory="sproj.model:build_tagger",
                          traffic=tagger_traffic(300, bad_at=40), leak_bytes_per_request=64 * 1024)


def _specs(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _arr(v) -> list:
    """A plotly JSON array: a list, or numpy's typed array as base64 (``bdata``)."""
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"])).tolist()
    return list(v)


def _texts(at) -> str:
    out = []
    for kind in ("title", "markdown", "caption", "code", "error", "warning", "info", "success"):
        out += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(out)


def test_overview_of_an_inference_run(svc):
    at = open_page("overview", run=RUN)
    assert at.title[0].value == RUN
    assert ":gray-badge[:material/stop_circle: stopped]" in [m.value for m in at.markdown]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == "300"
    assert metrics["Error rate"] == "0.33%"  # 1 of 300
    assert metrics["Captures"] == "1" and metrics["Fallbacks"] == "0"
    assert metrics["p50 latency"].endswith(" ms")
    latency, outcomes = _specs(at)
    assert [t["name"] for t in latency["data"]] == ["request latency", "p50", "p95", "p99", "error"]
    assert latency["layout"]["xaxis"]["title"]["text"] == "request"
    assert latency["layout"]["title"]["text"] == "Latency: rolling percentiles over 200 requests"
    err = latency["data"][4]
    assert _arr(err["x"]) == [40] and _arr(err["customdata"]) == [FID]
    assert outcomes["data"][0]["name"] == "error" and sum(_arr(outcomes["data"][0]["y"])) == 1
    text = _texts(at)
    assert "**request 40 · rank 0 · IndexError** · `input_ids:int64[1,8];attention_mask:int64[1,8]`" in text
    assert "index out of range in self" in text
    assert "- factory `sproj.model:build_tagger`" in text
    # a smaller rolling window redraws the percentiles
    at.select_slider(key="ov_latency_window").set_value(50).run()
    assert not at.exception
    assert _specs(at)[0]["layout"]["title"]["text"] == "Latency: rolling percentiles over 50 requests"


def test_memory_of_an_inference_run_is_per_request(svc):
    at = open_page("memory", run=RUN)
    assert at.title[0].value == f"Memory · {RUN}"
    (spec,) = _specs(at)
    assert spec["data"][0]["name"] == "Host memory"
    assert spec["layout"]["xaxis"]["title"]["text"] == "request"
    assert spec["layout"]["annotations"][0]["text"] == "Host memory after each request (process RSS)"
    assert max(_arr(spec["data"][0]["x"])) == 299
    assert "Thresholds of this service: GPU 80%, host 75%" in _texts(at)


def test_replay_of_a_failing_request_names_the_token(svc):
    at = open_page("replay", timeout=240, run=RUN, failure=FID)
    text = _texts(at)
    assert "**IndexError** at request 40, rank 0, on `cpu`" in text
    assert "called as `model(**inputs)`" in text
    assert not any("guard" in s.value.lower() for s in at.subheader)
    (box,) = at.checkbox  # a run outside the bundled samples: the visitor confirms its code
    box.check().run()
    at.button(key="replay_button").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Reproduced"] == "yes"
    assert (metrics["Input field"], metrics["Token id"], metrics["Position"], metrics["Shape"]) == \
        ("input_ids", "150", "3", "int64[1, 8]")
    assert "Dataset index" not in metrics  # a training sample's words, not a request's
    assert any(e.value == ("input field \\`input_ids\\` holds token id 150 at position 3, outside the "
                           "vocabulary [0, 100) of \\`emb\\`") for e in at.error)  # escaped Markdown
    assert any(w.value.startswith("Validate requests at the service's edge: reject token ids outside "
                                  "[0, 100) in \\`input_ids\\`") for w in at.warning), \
        [w.value for w in at.warning]


def test_home_lists_the_inference_run_with_its_own_status(svc):
    at = open_page(None)
    rows = {r["run"]: r for r in at.dataframe[0].value.to_dict("records")}
    row = rows[RUN]
    assert row["status"] == "stopped" and row["kind"] == "inference"
    assert row["requests"] == 300 and row["error_rate"] == pytest.approx(1 / 300)
    assert row["failures"] == 1
    assert rows["digits-mlp"]["kind"] == "training" and rows["digits-mlp"]["status"] == "finished"


# sample_runs/serve-leak: examples/serve_leak.py's HTTP service under a bounded load, with a
# handler that keeps every output (a leak), a bad token id and a zero temperature planted.

def test_memory_of_the_sample_shows_the_leak_and_its_projection():
    at = open_page("memory", run="serve-leak")
    (warn,) = [w.value for w in at.warning]
    assert warn.startswith("Rank 0: host RSS grows by 37.4 MiB per 1,000 requests from request 0")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Growth per 1,000 requests"] == "37.4 MiB"
    assert metrics["Requests to 75%"] == "474,077"
    (spec,) = _specs(at)
    names = [t["name"] for t in spec["data"]]
    assert names == ["Host memory", "leak: +37.4 MiB per 1,000 requests"]
    trend = spec["data"][1]
    assert _arr(trend["x"]) == [0, 1499]
    # 474,077 more requests: far beyond this run's 1,500, so named rather than drawn
    notes = [a["text"] for a in spec["layout"]["annotations"]]
    assert any(n.startswith("at this rate 75% (17.7 GiB) is reached at request ") and
               n.endswith("far right of this range") for n in notes), notes


def test_overview_of_the_sample_lists_its_failing_requests_and_fallbacks():
    at = open_page("overview", run="serve-leak")
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Requests"], metrics["Fallbacks"], metrics["Captures"]) == ("1,500", "59", "2")
    assert metrics["Error rate"] == "0.13%"  # 2 of 1,500
    latency, outcomes = _specs(at)
    assert [t["name"] for t in latency["data"]] == ["request latency", "p50", "p95", "p99", "error",
                                                    "non-finite output", "fallback taken"]
    assert sum(_arr(outcomes["data"][2]["y"])) == 59
    text = _texts(at)
    assert "**request 310 · rank 0 · IndexError**" in text
    assert "**request 707 · rank 0 · non-finite output**" in text
    assert {f["kind"] for f in open_run(SAMPLE_RUNS / "serve-leak").failures()} == {"request"}


def test_replay_of_the_sample_s_zero_temperature_names_the_field_and_value():
    at = open_page("replay", timeout=240, run="serve-leak", failure="r0-000-req0000707-nonfinite")
    button = at.button(key="replay_button")
    assert not button.disabled  # a bundled sample with verified code
    button.click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Input field"], metrics["Value"], metrics["Shape"]) == ("temperature", "0", "float32[]")
    assert metrics["Forward time"].endswith(" s")


def test_a_service_still_recording_is_serving(tmp_path, monkeypatch):
    """A debugkit.serve run whose recorder is open: Home and Overview say "serving"."""
    import torch

    import debugkit

    root = write_project(tmp_path / "proj")
    monkeypatch.syspath_prepend(str(root))
    from sproj.model import build_tagger

    model = build_tagger().eval()
    rec = debugkit.serve(model, str(Path(os.environ["DEBUGKIT_STORE"]) / "live"),
                         model_factory="sproj.model:build_tagger", flush_every_s=0.2)
    try:
        for inputs in tagger_traffic(30, bad_at=-1):
            with torch.no_grad(), rec.request(inputs) as r:
                r.output(model(**inputs))
        rec.flush()
        at = open_page(None)
        rows = {r["run"]: r for r in at.dataframe[0].value.to_dict("records")}
        assert rows["live"]["status"] == "serving" and rows["live"]["requests"] == 30
        at = open_page("overview", run="live")
        assert ":blue-badge[:material/podcasts: serving]" in [m.value for m in at.markdown]
        assert {m.label: m.value for m in at.metric}["Requests"] == "30"
    finally:
        rec.close()


def test_the_rolling_window_round_trips_through_the_url():
    at = open_page("overview", run="serve-leak")
    assert at.select_slider(key="ov_latency_window").value == 200 and "window" not in at.query_params
    p50_default = _arr(next(t for t in _specs(at)[0]["data"] if t["name"] == "p50")["y"])
    at.select_slider(key="ov_latency_window").set_value(50).run()
    assert not at.exception and at.query_params["window"] == "50"
    again = open_page("overview", run="serve-leak", window="50")
    assert again.select_slider(key="ov_latency_window").value == 50
    p50 = _arr(next(t for t in _specs(again)[0]["data"] if t["name"] == "p50")["y"])
    assert p50 != p50_default  # the percentiles of the last 50 requests, as its sender saw
    again.select_slider(key="ov_latency_window").set_value(200).run()
    assert "window" not in again.query_params
    bad = open_page("overview", run="serve-leak", window="7")
    assert ("?window='7' is not one of 50, 100, 200, 500, 1000: showing the default instead."
            in [w.value for w in bad.warning])
    assert bad.select_slider(key="ov_latency_window").value == 200
