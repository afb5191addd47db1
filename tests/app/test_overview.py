"""AppTest of the router, the Home page and the Overview page."""

from __future__ import annotations

import json
import shutil

import pytest

from debugkit.io.served_runs import MSG_UNKNOWN_RUN

from ..conftest import ROOT
from ._apptest import figures

SAMPLES = ROOT / "sample_runs"


def _texts(at):
    out = []
    for kind in ("title", "markdown", "caption", "code", "error", "warning", "info", "success"):
        out += [str(e.value) for e in getattr(at, kind)]
    return "\n".join(out)


def test_home_lists_the_sample_runs(app):
    at = app()
    at.run()
    assert not at.exception
    assert at.title[0].value == "debugkit"
    table = at.dataframe[0].value  # an interactive dataframe: sort, search, filter (issue 35)
    rows = {r["run"]: r for r in table.to_dict("records")}
    assert len(rows) == sum((p / "manifest.json").is_file() for p in SAMPLES.iterdir())  # every sample
    assert rows["digits-mlp"]["status"] == "finished" and rows["digits-mlp"]["failures"] == 0
    assert rows["digits-bad-label"]["status"] == "failed" and rows["digits-bad-label"]["failures"] == 1
    # what `debugkit diagnose` finds, per run: a healthy run has no error or warning
    assert rows["digits-mlp"]["errors"] == rows["digits-mlp"]["warnings"] == 0
    assert rows["digits-bad-label"]["errors"] >= 1
    # one short title per run, linking to the page that explains it; no paths, no buttons
    assert rows["digits-bad-label"]["finding"] == "overview?run=digits-bad-label#Step failed at step 75"
    assert rows["digits-exploding"]["finding"] == \
        "gradients?run=digits-exploding#NaN/Inf gradient at step 103 (0.weight)"
    assert rows["memory-leak"]["finding"].startswith("memory?run=memory-leak#Memory leak")
    assert rows["digits-mlp"]["finding"] == ""  # nothing found: an empty cell
    assert rows["digits-exploding"]["errors"] >= 1 and rows["digits-exploding"]["warnings"] >= 1
    assert rows["digits-profiled"]["steps"] == 159 and rows["digits-profiled"]["duration_s"] > 0
    assert str(rows["digits-mlp"]["started"].tz) == "UTC"
    assert "/" not in " ".join(str(v) for r in rows.values() for k, v in r.items() if k != "finding")
    assert not [b for b in at.button if b.label.startswith("Open ")]
    # and it leads to every page
    links = {p.label.split("**")[1] for p in at.main.get("page_link")}
    assert links == {"Overview", "Scalars", "Gradients", "Layers", "Memory", "Profiler", "Distributed", "Checkpoints", "Replay",
                     "Bias audit", "Compare"}
    # The sidebar's menu (drawn by the app: Streamlit's own is off, docs/security.md)
    menu = [p.label for p in at.sidebar.get("page_link")]
    assert menu == ["Home", "Overview", "Scalars", "Gradients", "Layers", "Memory", "Profiler", "Distributed",
                    "Checkpoints", "Replay", "Compare", "Bias audit"]


# A click on a Home row opens the run's Overview: tests/e2e/test_home.py (a dataframe
# selection needs a browser).


@pytest.mark.parametrize("run_id,status,failure", [
    ("digits-mlp", "finished", None),
    ("digits-bad-label", "failed", "Target 12 is out of bounds."),
])
def test_overview_of_each_sample(app, run_id, status, failure):
    at = app(run=run_id)
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    assert at.title[0].value == json.loads((SAMPLES / run_id / "manifest.json").read_text())["name"]
    icon = {"finished": ":material/check_circle:", "failed": ":material/error:"}[status]
    color = {"finished": "green", "failed": "red"}[status]
    assert f":{color}-badge[{icon} {status}]" in [m.value for m in at.markdown]
    assert at.expander[0].label == "What am I looking at?"
    text = _texts(at)
    if failure:
        assert failure in text and "step 75 · rank 0 · IndexError" in text
        assert "dataset indices" in text
    else:
        assert "No failure captured." in text
    metrics = figures(at)
    assert metrics["Failures"] == ("1" if failure else "0")
    assert metrics["Steps"] == ("76" if failure else "159")
    assert len(at.get("plotly_chart")) == 1


def test_unknown_and_malformed_run_params_show_an_error(app):
    at = app(run="no-such-run")
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    unknown = MSG_UNKNOWN_RUN.split("{count}")[0].format(value="no-such-run")  # "run 'no-such-run': no such run among the "
    assert any(unknown in e.value.replace("\\", "") for e in list(at.sidebar.error) + list(at.error)) \
        or "Pick a run" in _texts(at)
    at = app(run="../../etc/passwd")
    at.run()
    assert not at.exception


def test_overview_of_a_broken_run_shows_the_error(app, tmp_path, monkeypatch):
    store = tmp_path / "store"
    shutil.copytree(SAMPLES / "digits-mlp", store / "broken")
    (store / "broken" / "manifest.json").write_text('{"schema_version": "7.1"}')
    monkeypatch.setenv("DEBUGKIT_STORE", str(store))
    at = app(run="broken")
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    assert "newer than this debugkit" in _texts(at)


def test_a_run_deleted_while_shown(app, tmp_path, monkeypatch):
    store = tmp_path / "store"
    shutil.copytree(SAMPLES / "digits-mlp", store / "gone")
    monkeypatch.setenv("DEBUGKIT_STORE", str(store))
    at = app(run="gone")
    at.switch_page("pages/overview.py").run()
    assert at.title[0].value == "digits-mlp"
    shutil.rmtree(store / "gone")
    at.run()
    assert not at.exception
    assert "is gone (deleted or moved)" in _texts(at)


def test_one_nan_step_is_one_finding_card_with_its_evidence(app):
    """accelerate-nan's NaN step 5: one error card (nonfinite_grad), with the loss finding and
    the Recorder's capture shown under it as the same event (issue 31: one fact, one finding)."""
    at = app(run="accelerate-nan")
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    cards = [m.value for m in at.markdown if "**nonfinite_" in m.value or "**step_failure**" in m.value]
    assert len(cards) == 1 and "**nonfinite_grad**" in cards[0] and "step 5" in cards[0]
    text = _texts(at)
    assert "Same event, also seen as **nonfinite_loss** (error)" in text
    assert "Same event, also seen as **step_failure** (warning)" in text
    assert "capture r0-s0000005-nonfinite" in text


def test_home_filters_by_status_tags_and_search(app, tmp_path, monkeypatch):
    import shutil

    from debugkit import format as fmt
    from debugkit.io.served_runs import default_store

    store = default_store()
    shutil.copytree(ROOT / "sample_runs" / "digits-mlp", store / "tagged-run")
    fmt.update_manifest(store / "tagged-run", lambda m: {**m, "tags": ["baseline", "sweep-3"]})
    at = app()
    at.run()
    rows = at.dataframe[0].value.set_index("run")
    assert list(rows.loc["tagged-run", "tags"]) == ["baseline", "sweep-3"]
    at.multiselect(key="home_tags").set_value(["sweep-3"]).run()
    assert at.dataframe[0].value["run"].tolist() == ["tagged-run"]
    at.multiselect(key="home_tags").set_value([]).run()
    at.multiselect(key="home_status").set_value(["failed"]).run()
    failed = at.dataframe[0].value
    assert set(failed["status"]) == {"failed"} and "digits-bad-label" in failed["run"].tolist()
    at.text_input(key="home_search").input("exploding").run()
    assert at.dataframe[0].value["run"].tolist() == ["digits-exploding"]
    total = sum((p / "manifest.json").is_file() for p in SAMPLES.iterdir()) + 1  # + tagged-run
    assert any(f"1 of {total} runs match" in c.value for c in at.caption)


def test_every_sample_is_named_as_its_folder():
    """The name a page shows is the id the picker and links use (issue 35: 9 of 22 differed,
    digits-profiled showed as "digits-mlp")."""
    for d in sorted(p for p in SAMPLES.iterdir() if (p / "manifest.json").is_file()):
        assert json.loads((d / "manifest.json").read_text())["name"] == d.name


def test_home_filters_round_trip_through_the_url(app, tmp_path):
    import shutil

    from debugkit import format as fmt
    from debugkit.io.served_runs import default_store

    store = default_store()
    shutil.copytree(ROOT / "sample_runs" / "digits-mlp", store / "tagged-run")
    fmt.update_manifest(store / "tagged-run", lambda m: {**m, "tags": ["baseline", "sweep-3"]})
    at = app()
    at.run()
    at.multiselect(key="home_status").set_value(["failed", "finished"]).run()
    at.multiselect(key="home_tags").set_value(["baseline"]).run()
    at.text_input(key="home_search").input("tagged").run()
    q = at.query_params
    assert q["status"] == ["failed", "finished"] and q["tag"] == "baseline" and q["q"] == "tagged"
    assert "since" not in q  # the earliest start: the default
    # the link in a new session lists the same runs
    again = app(status=["failed", "finished"], tag="baseline", q="tagged")
    again.run()
    assert again.multiselect(key="home_status").value == ["failed", "finished"]
    assert again.multiselect(key="home_tags").value == ["baseline"]
    assert again.text_input(key="home_search").value == "tagged"
    assert again.dataframe[0].value["run"].tolist() == ["tagged-run"]
    bad = app(status=["lost", "failed"], tag="nope", since="yesterday")
    bad.run()
    warnings = " ".join(w.value for w in bad.warning)
    assert "?status='lost' is not the status of a listed run" in warnings
    assert "?tag='nope' is not a tag of a listed run" in warnings and "?since='yesterday'" in warnings
    assert bad.multiselect(key="home_status").value == ["failed"]  # the known one is kept
    assert bad.multiselect(key="home_tags").value == []
    assert set(bad.dataframe[0].value["status"]) == {"failed"}
