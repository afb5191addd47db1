"""AppTest of the Replay page: deep link, confirmation, progress, culprit, checks."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from debugkit.replay.policy import HINT_SERVER, MSG_NOT_ALLOWED
from pages._ui import key_for

from ._apptest import new_app, open_page

ROOT = Path(__file__).resolve().parents[2]
FID = "r0-s0000075-exception"


def app(run: str, failure: str | None = None) -> AppTest:
    query = {"run": run} if failure is None else {"run": run, "failure": failure}
    return open_page("replay", timeout=240, **query)


def texts(at) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]
                     + [e.value for e in at.error] + [w.value for w in at.warning]
                     + [i.value for i in at.info] + [c.value for c in at.code])


def test_replay_the_corrupted_label_from_a_deep_link():
    at = app("digits-bad-label", FID)
    assert at.selectbox(key=key_for("replay_failure", ROOT / 'sample_runs' / 'digits-bad-label')).value == FID
    assert "Target 12 is out of bounds." in texts(at)
    assert ":green-badge[:material/verified: verified]" in texts(at)
    button = at.button(key="replay_button")
    assert not button.disabled  # a bundled sample with verified code needs no confirmation
    assert len(at.checkbox) == 0
    button.click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Reproduced"] == "yes" and metrics["Same error"] == "yes"
    assert (metrics["Sample"], metrics["Dataset index"]) == ("6", "1474")
    assert metrics["value of batch[1][6]"] == "12"
    t = texts(at)
    assert "**Module:** —  \n**Op:** —  \n**Input:** `batch[1]`" in t
    assert "sample 6 (dataset index 1474) has label 12, outside [0, 10)" in t
    assert ":red[:material/cancel:] **labels**: 1 of 32 labels of batch[1] are outside [0, 10)" in t
    assert ":gray[:material/remove_circle_outline:] **embedding_indices**" in t
    assert any(w.value.startswith("Validate labels in the dataset: sample 6 (dataset index 1474)")
               for w in at.warning)
    assert at.query_params["failure"] == [FID] or at.query_params["failure"] == FID


@pytest.mark.parametrize("value, shown", [
    ("../../etc/passwd", "failure id '../../etc/passwd': expected an id like"),
    ("r0-s0000001-exception", "failure 'r0-s0000001-exception': this run has no such capture"),
])
def test_bad_failure_param(value, shown):
    at = app("digits-bad-label", value)
    assert any(shown in w.value for w in at.warning)
    assert at.selectbox[0].value == FID


def test_run_without_failures():
    at = app("digits-mlp")
    assert any("This run has no failure capture" in i.value for i in at.info)


def _upload(name: str, sample: str) -> Path:
    dst = Path(os.environ["DEBUGKIT_STORE"]) / name
    shutil.copytree(ROOT / "sample_runs" / sample, dst)
    return dst


@pytest.mark.slow
def test_an_uploaded_run_asks_before_running_its_code(monkeypatch):
    # The operator allows the examples' folder and lets every visitor trust code.
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(ROOT / "examples"))
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    _upload("their-run", "cancer-nan-input")
    at = app("their-run")
    button = at.button(key="replay_button")
    assert button.disabled
    (box,) = at.checkbox
    assert "I trust this code (this run was uploaded or opened from outside the bundled samples)" in box.label
    assert "examples.cancer_ratio:build_model" in box.label
    box.check().run()
    assert not at.button(key="replay_button").disabled
    at.button(key="replay_button").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Sample"], metrics["Dataset index"]) == ("8", "568")
    t = texts(at)
    assert "**Input:** `batch[0]`" in t
    assert ":red[1 non-finite value(s)] at position(s) `30`" in t
    assert len(at.table) == 1 and list(at.table[0].value.columns) == ["30"]


def test_an_anonymous_visitor_of_an_open_server_cannot_trust_code(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(ROOT / "examples"))
    monkeypatch.delenv("DEBUGKIT_CODE_TRUST", raising=False)
    _upload("their-run", "cancer-nan-input")
    at = app("their-run")
    assert at.button(key="replay_button").disabled
    assert len(at.checkbox) == 0
    assert any(e.value.startswith("Only a signed-in user may trust a run's code on this server "
                                  "(it has no `[auth]`") for e in at.error)


def test_an_uploaded_run_runs_no_code_unless_the_operator_allows_a_folder(monkeypatch):
    monkeypatch.delenv("DEBUGKIT_CODE_ROOTS", raising=False)
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    _upload("their-run", "cancer-nan-input")
    at = app("their-run")
    assert at.button(key="replay_button").disabled and len(at.checkbox) == 0
    refusal = MSG_NOT_ALLOWED.split("{local}")[1].format(roots="none", hint=HINT_SERVER)
    assert any(refusal in e.value for e in at.error), [e.value for e in at.error]


def test_the_write_gadget_is_refused_even_when_a_visitor_may_trust(monkeypatch, tmp_path):
    """Issue 22's first gadget, uploaded: debugkit._fsutil:atomic_write_json with its real
    hash and path/obj kwargs, on a server that allows the whole checkout and lets anyone
    trust code. No box to tick, no button to press, nothing written."""
    import debugkit._fsutil

    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(ROOT))
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    run = _upload("gadget", "digits-bad-label")
    marker = tmp_path / "written-by-the-run.json"
    fj = run / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    src = debugkit._fsutil.__file__
    rec["code"] = {"model_factory": {"spec": "debugkit._fsutil:atomic_write_json",
                                     "module": "debugkit._fsutil", "qualname": "atomic_write_json",
                                     "file": src, "sha256": hashlib.sha256(open(src, "rb").read()).hexdigest()}}
    rec["factory_kwargs"] = {"path": str(marker), "obj": {"owned": True}}
    fj.write_text(json.dumps(rec))
    at = app("gadget", FID)
    assert at.button(key="replay_button").disabled and len(at.checkbox) == 0
    assert any("debugkit itself" in e.value for e in at.error), [e.value for e in at.error]
    assert not marker.exists()


def test_forged_code_is_refused_without_a_way_to_allow_it():
    run = _upload("forged", "digits-bad-label")
    fj = run / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    digest = hashlib.sha256(open(os.__file__, "rb").read()).hexdigest()
    rec["code"] = {"model_factory": {"spec": "os:system", "module": "os", "qualname": "system",
                                     "file": os.__file__, "sha256": digest}}
    fj.write_text(json.dumps(rec))
    at = app("forged", FID)
    assert any("part of Python's standard library" in e.value for e in at.error)
    assert at.button(key="replay_button").disabled
    assert len(at.checkbox) == 0


def test_the_guard_that_would_have_stopped_the_bad_label():
    at = app("digits-bad-label", FID)
    ok = [s.value for s in at.success]
    assert any(s.startswith("A batch guard would have stopped this batch before it reached the model: "
                            "the spec the Recorder learned from the 75 healthy batches") for s in ok)
    assert "value 12 outside [0, 10) [rule: range]" in texts(at)
    assert "guard_action=\"skip\"" in texts(at)
    dl = [d for d in at.get("download_button") if d.proto.label == "Download batch_spec.json"]
    assert len(dl) == 1


def test_a_model_side_failure_gets_no_guard_suggestion():
    at = app("digits-exploding")
    assert any(i.value.startswith("No batch guard learned from the data would have caught this")
               for i in at.info)
    assert not [d for d in at.get("download_button") if d.proto.label == "Download batch_spec.json"]


def test_code_shipped_in_an_uploaded_run_never_runs(monkeypatch, tmp_path):
    """Issue 28, item 1: the operator's code roots contain the store (DEBUGKIT_CODE_ROOTS
    is the folder above it) and anyone may trust code; an uploaded run carries its own
    model.py with its true hash. It is refused as code inside a run: no "verified" badge,
    no box to tick, nothing imported."""
    from debugkit.replay.policy import MSG_IN_RUN

    store = Path(os.environ["DEBUGKIT_STORE"])
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(store.parent))
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    run = _upload("carrier", "digits-bad-label")
    marker = tmp_path / "imported"
    (run / "model.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                  "from torch import nn\n\n\ndef build_model(hidden=64):\n"
                                  "    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))\n")
    fj = run / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    rec["code"] = {"model_factory": {
        "spec": "model:build_model", "module": "model", "qualname": "build_model",
        "file": str(run / "model.py"),
        "sha256": hashlib.sha256((run / "model.py").read_bytes()).hexdigest()}}
    fj.write_text(json.dumps(rec))
    at = app("carrier", FID)
    assert ":green-badge[:material/verified: verified]" not in texts(at)
    assert at.button(key="replay_button").disabled and len(at.checkbox) == 0
    rule = MSG_IN_RUN.split("; ")[1].split(" (")[0]
    assert any(rule in e.value for e in at.error), [e.value for e in at.error]
    assert not marker.exists()



def _with_query(query: dict) -> AppTest:
    """The Replay page opened with ``query`` (``timeout`` is also new_app's own keyword,
    so the query parameters are set one by one)."""
    at = new_app(timeout=240)
    for k, v in query.items():
        at.query_params[k] = v
    at.switch_page("pages/replay.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at

def test_the_replay_options_round_trip_through_the_url_and_a_link_runs_nothing():
    at = _with_query({"run": "digits-bad-label", "failure": FID, "device": "cpu", "timeout": "60"})
    assert at.radio(key="replay_device").value == "cpu"
    assert at.number_input(key="replay_timeout").value == 60.0
    assert "Reproduced" not in [m.label for m in at.metric]  # opening the link replays nothing
    at.button(key="replay_button").click().run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Replayed on"] == "cpu"
    at.radio(key="replay_device").set_value("auto").run()
    at.number_input(key="replay_timeout").set_value(300.0).run()
    assert "device" not in at.query_params and at.query_params["timeout"] == "300"


@pytest.mark.parametrize("query, warning", [
    ({"device": "tpu"}, "?device='tpu' is not one of 'auto', 'cpu'"),
    ({"timeout": "1e9"}, "?timeout='1e9' is not a number of seconds from 5 to 3600: showing the default instead."),
    ({"timeout": "nan"}, "?timeout='nan' is not a number of seconds from 5 to 3600: showing the default instead."),
])
def test_a_replay_option_the_page_cannot_use_is_a_warning_and_the_default(query, warning):
    at = _with_query({"run": "digits-bad-label", "failure": FID, **query})
    assert any(w.value.startswith(warning) for w in at.warning), [w.value for w in at.warning]
    assert at.radio(key="replay_device").value == "auto"
    assert at.number_input(key="replay_timeout").value == 120.0
    assert "device" not in at.query_params and "timeout" not in at.query_params
