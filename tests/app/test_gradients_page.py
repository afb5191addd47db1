"""AppTest of the Gradients page on every sample run, deep links and widgets."""

from __future__ import annotations

import pytest

from pages._ui import key_for

from ._apptest import open_page


def _page(run=None, **params):
    if run:
        params["run"] = run
    return open_page("gradients", **params)


def _subheaders(at):
    return [s.value for s in at.subheader]


def _metrics(at):
    return {m.label: m.value for m in at.metric}


@pytest.mark.parametrize("run,n_findings,kinds", [
    ("digits-mlp", 0, []),
    ("digits-bad-label", 1, ["step_failure"]),
    # the NaN of step 103 is one finding; its loss and its capture are shown as evidence
    ("digits-exploding", 4, ["exploding_grad", "loss_spike", "loss_spike", "nonfinite_grad",
                             "also seen as **nonfinite_loss**", "also seen as **step_failure**"]),
    ("digits-vanishing", 1, ["vanishing_grad"]),
])
def test_page_on_each_sample_run(run, n_findings, kinds):
    at = _page(run)
    assert at.title[0].value == "Gradients"
    assert "Findings" in _subheaders(at)
    shown = [b.label for b in at.button if b.label.startswith("Show step")]
    assert len(shown) == n_findings
    md = " ".join(m.value for m in list(at.markdown) + list(at.caption))
    for k in kinds:
        assert (k if "**" in k else f"**{k}**") in md
    if not n_findings:
        assert at.success[0].value == "No gradient or loss problem found."
    assert not at.error


def test_step_query_param_opens_that_steps_details():
    at = _page("digits-exploding", step="98")
    assert "Step 98" in _subheaders(at)
    m = _metrics(at)
    assert m["loss"] == "6.007" and m["learning rate"] == "10" and m["total grad norm"] == "12.66"
    table = at.dataframe[0].value
    assert table["layer"].tolist()[-1] == "__total__"
    assert len(table) == 15
    assert any("r0-s0000103-nonfinite" in x.value and "5 steps away" in x.value for x in at.markdown)


def test_failure_query_param_picks_the_captures_step():
    at = _page("digits-exploding", failure="r0-s0000103-nonfinite")
    assert "Step 103" in _subheaders(at)
    assert _metrics(at)["loss"] == "nan"
    assert any("(this step)" in x.value for x in at.markdown)


def test_unlogged_step_shows_the_nearest_logged_one():
    at = _page("digits-exploding", step="5000")
    assert "Step 103" in _subheaders(at)
    assert any("Step 5000 has no gradient norms logged" in c.value for c in at.caption)


@pytest.mark.parametrize("params,match", [
    ({"step": "abc"}, r"\?step='abc': expected a whole number"),
    ({"step": "-3"}, r"\?step=-3: expected a number from 0 to"),
    ({"step": "99999999999999999"}, r"\?step='99999999999999999': expected a whole number"),
    ({"failure": "../../etc"}, r"\?failure='../../etc': no such failure capture"),
    ({"rank": "x"}, r"\?rank='x': expected a whole number"),
])
def test_bad_query_params_are_clear_errors(params, match):
    import re

    at = _page("digits-exploding", **params)
    assert any(re.search(match, e.value) for e in at.error), [e.value for e in at.error]
    assert at.title[0].value == "Gradients"  # the page still renders


def test_choosing_a_finding_shows_its_step():
    at = _page("digits-exploding")
    assert not any(s.startswith("Step ") for s in _subheaders(at))
    next(b for b in at.button if b.label == "Show step 91").click().run()
    assert not at.exception
    assert "Step 91" in _subheaders(at)
    assert at.query_params["step"] == ["91"] or at.query_params["step"] == "91"


def test_layer_regex_and_bad_regex():
    at = _page("digits-vanishing")
    rx = lambda: next(t for t in at.text_input if t.label == "Layer regex")  # noqa: E731
    rx().set_value(r"^1[02]\.").run()
    assert any("4 of 22 parameters" in m.value for m in at.markdown)
    rx().set_value("(").run()
    assert any("is not a valid regular expression" in e.value for e in at.error)


def test_module_filter():
    at = _page("digits-vanishing")
    next(m for m in at.multiselect if m.label == "Modules").set_value(["0", "20"]).run()
    assert any("4 of 22 parameters" in m.value for m in at.markdown)


def test_what_if_clip_reports_the_clipped_steps():
    at = _page("digits-mlp")
    next(n for n in at.number_input if n.label == "What-if clip max_norm").set_value(2.0).run()
    cap = next(c.value for c in at.caption if "clip_grad_norm_(max_norm=2)" in c.value)
    # digits-mlp's total norm exceeds 2.0 in 17 of its 159 logged steps
    assert "would have clipped 17 of 159 logged steps (10.7 %)" in cap


def test_thresholds_change_the_findings():
    at = _page("digits-exploding")
    n = len([b for b in at.button if b.label.startswith("Show step")])
    next(x for x in at.number_input if x.label == "explode_factor").set_value(100000.0).run()
    md = " ".join(m.value for m in at.markdown)
    assert "step 100" in md and "step 91 ·" not in md
    assert len([b for b in at.button if b.label.startswith("Show step")]) == n


def test_without_a_run_the_page_says_what_to_do():
    at = _page()
    assert "Pick a run in the sidebar to see the gradients" in at.info[0].value


def _two_rank_run(root):
    """A 2-rank run written with the Recorder's writer: rank 1's layer 'b' jumps at 40."""
    import numpy as np

    from debugkit import format as fmt
    from debugkit._fsutil import atomic_write_json
    from debugkit.recorder.writer import RankWriter

    run = root / "two-ranks"
    run.mkdir(parents=True)
    atomic_write_json(run / fmt.MANIFEST, {"schema_version": fmt.SCHEMA_VERSION, "run_id": "t",
                                           "name": "two-ranks", "config": {}})
    for rank in (0, 1):
        d = run / fmt.RANKS_DIR / str(rank)
        w = RankWriter(d, n_layers=3, flush_every_s=3600)
        atomic_write_json(d / "meta-000.json", {"rank": rank, "layers": ["a", "b"], "segment": 0})
        for s in range(60):
            a, b = 1.0 + 0.01 * (s % 3), 0.5 + 0.01 * (s % 5)
            if rank == 1 and s == 40:
                b = 50.0
            w.add("grads", (s, [a, b, float(np.hypot(a, b))]))
            w.add("scalars", (s, "loss", 1.0 + 0.001 * (s % 4), 0.0))
        w.close()
    return run


def test_rank_selector_and_rank_param(tmp_path, monkeypatch):
    _two_rank_run(tmp_path)
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path))
    at = _page("two-ranks", rank="1")
    rank_box = next(s for s in at.selectbox if s.label == "Rank")
    assert rank_box.value == 1 and rank_box.options == ["0", "1"]
    md = " ".join(m.value for m in at.markdown)
    assert "**exploding_grad** · step 40 · rank 1 · `b`" in md
    at = _page("two-ranks", rank="0")
    assert "**exploding_grad**" not in " ".join(m.value for m in at.markdown)
    at = _page("two-ranks", rank="7")
    assert any("?rank=7: this run has no gradient norms from that rank (ranks: 0, 1)" in w.value
               for w in at.warning)


def test_a_live_run_is_shown_live_and_picks_up_new_steps(tmp_path, monkeypatch):
    from debugkit import format as fmt
    from debugkit._fsutil import atomic_write_json
    from debugkit.recorder.writer import RankWriter

    run = tmp_path / "live"
    run.mkdir()
    atomic_write_json(run / fmt.MANIFEST, {"schema_version": fmt.SCHEMA_VERSION, "run_id": "l",
                                           "name": "live", "config": {}})
    d = run / fmt.RANKS_DIR / "0"
    w = RankWriter(d, n_layers=2, flush_every_s=3600)  # heartbeat: running, this process
    atomic_write_json(d / "meta-000.json", {"rank": 0, "layers": ["w"], "segment": 0})
    try:
        for s in range(10):
            w.add("grads", (s, [1.0, 1.0]))
        w.flush()
        monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path))
        at = _page("live")
        assert at.caption[0].value == "live · running · live: refreshes every few seconds"
        assert any("10 logged steps" in m.value for m in at.markdown)
        for s in range(10, 25):
            w.add("grads", (s, [1.0, 1.0]))
        w.flush()
        at.run()
        assert any("25 logged steps" in m.value for m in at.markdown)
    finally:
        w.close()



def test_overview_links_a_nonfinite_capture_here():
    at = open_page("overview", run="digits-exploding")
    links = [(x.proto.label, x.proto.page, x.proto.query_string) for x in at.get("page_link")]
    assert ("See the gradients at this step", "gradients",
            "run=digits-exploding&failure=r0-s0000103-nonfinite&step=103") in links
    at = _page("digits-exploding", failure="r0-s0000103-nonfinite", step="103")
    assert "Step 103" in _subheaders(at)


def test_show_step_marks_the_layer_the_finding_calls_exploding_and_scrolls_to_it():
    at = _page("digits-exploding")
    next(b for b in at.button if b.label == "Show step 91").click().run()
    assert not at.exception
    assert "Step 91" in _subheaders(at)
    table = at.dataframe[0].value.set_index("layer")
    assert table.loc["10.bias", "status"] == "exploding"  # the finding's layer, not "ok"
    # the panel is below the fold: a one-shot script brings it into view
    scripts = [h.proto.body for h in at.get("html")]
    assert any("scrollIntoView" in b and 'getElementById("step-details")' in b for b in scripts)
    at.run()  # a later rerun (a live refresh) does not scroll again
    assert not any("scrollIntoView" in h.proto.body for h in at.get("html"))


def test_step_details_status_of_a_vanishing_layer():
    at = _page("digits-vanishing", step="0")
    table = at.dataframe[0].value.set_index("layer")
    assert table.loc["0.weight", "status"] == "vanishing"


def test_other_runs_are_drawn_over_the_lines_and_kept_in_the_url():
    import json

    from ..conftest import ROOT

    at = _open_lines(_page("digits-compare-lr"))
    at.multiselect(key=key_for("grad_with", ROOT / 'sample_runs' / 'digits-compare-lr')) \
        .set_value(["digits-compare-base"]).run()
    assert not at.exception
    lines = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                 if "gradient L2 norm" in json.dumps(json.loads(c.proto.spec)["layout"]))
    names = [t["name"] for t in lines["data"]]
    assert "total · digits-compare-base" in names and "total" in names
    other = next(t for t in lines["data"] if t["name"] == "total · digits-compare-base")
    assert other["line"]["dash"] == "dash" and other["mode"] == "lines"
    assert at.query_params["with"] in ("digits-compare-base", ["digits-compare-base"])
    again = _page("digits-compare-lr", **{"with": "digits-compare-base"})
    assert again.multiselect(key=key_for("grad_with", ROOT / 'sample_runs' / 'digits-compare-lr')).value == \
        ["digits-compare-base"]


def test_layer_filters_and_clip_round_trip_through_the_url():
    at = _page("digits-exploding")
    at.multiselect(key="grad_modules").set_value(["0"]).run()
    at.text_input(key="grad_regex").input(r"\.weight$").run()
    at.number_input(key="grad_clip").set_value(0.5).run()
    assert not at.exception
    q = at.query_params
    assert q["module"] in ("0", ["0"]) and q["grad_regex"] == r"\.weight$" and q["grad_clip"] == "0.5"
    again = _page("digits-exploding", module="0", grad_regex=r"\.weight$", grad_clip="0.5")
    assert again.multiselect(key="grad_modules").value == ["0"]
    assert again.text_input(key="grad_regex").value == r"\.weight$"
    assert again.number_input(key="grad_clip").value == 0.5
    md = " ".join(m.value for m in again.markdown)
    assert "1 of 14 parameters" in md  # 0.weight only
    assert any("would have clipped" in c.value for c in again.caption)
    bad = _page("digits-exploding", module="nope", grad_clip="-3")
    assert bad.multiselect(key="grad_modules").value == [] and bad.number_input(key="grad_clip").value is None


def _open_lines(at):
    """The per-layer lines are built when their expander is opened (as a click does)."""
    at.session_state["grad_lines_open"] = True
    return at.run()


def _lines_box(at):
    return next(m for m in at.multiselect if m.label == "Lines")


def _line_names(at) -> list[str]:
    import json

    lines = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
                 if "gradient L2 norm" in json.dumps(json.loads(c.proto.spec)["layout"]))
    return [t["name"] for t in lines["data"]]


def test_the_lines_and_thresholds_round_trip_through_the_url():
    at = _open_lines(_page("digits-exploding"))
    default = list(_lines_box(at).value)
    assert "line" not in at.query_params
    pick = [p for p in _lines_box(at).options if p not in default][:2]
    _lines_box(at).set_value(pick).run()
    next(x for x in at.number_input if x.label == "explode_factor").set_value(100000.0).run()
    next(x for x in at.number_input if x.label == "spike_mads").set_value(12.0).run()
    assert not at.exception
    q = at.query_params
    assert q["line"] == pick
    assert q["explode_factor"] == "100000" and q["spike_mads"] == "12" and "vanish_rel" not in q
    again = _page("digits-exploding", line=pick, explode_factor="100000", spike_mads="12")
    assert _lines_box(again).value == pick
    assert {x.label: x.value for x in again.number_input if x.label in ("explode_factor", "spike_mads")} \
        == {"explode_factor": 100000.0, "spike_mads": 12.0}
    drawn = set(_line_names(again))
    assert set(pick) <= drawn and not (set(default) - set(pick)) & drawn, (pick, default, drawn)
    md = " ".join(m.value for m in again.markdown)
    assert "step 91 ·" not in md  # no exploding_grad finding at that threshold, as its sender saw
    third = _page("digits-exploding", line=pick)
    _lines_box(third).set_value(default).run()
    assert "line" not in third.query_params  # the default lines: left out of the URL


@pytest.mark.parametrize("query, warning", [
    ({"line": "no.such.param"}, "?line='no.such.param' is not a parameter that these filters show: "
                                "showing the default instead."),
    ({"explode_factor": "1"}, "?explode_factor='1' is not a number from 1.5 to 1e+06: showing the "
                              "default instead."),
    ({"spike_mads": "x"}, "?spike_mads='x' is not a number from 1 to 1000: showing the default instead."),
    ({"module": "nope"}, "?module='nope' is not a module of this model: showing the default instead."),
])
def test_a_view_value_the_gradients_page_cannot_use_is_a_warning_and_the_default(query, warning):
    at = _page("digits-exploding", **query)
    assert warning in [w.value for w in at.warning]
    assert not set(query) & set(at.query_params)  # the default, so left out


def test_a_rank_picked_on_the_page_goes_into_the_url(tmp_path, monkeypatch):
    _two_rank_run(tmp_path)
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path))
    at = _page("two-ranks")
    assert "rank" not in at.query_params
    next(s for s in at.selectbox if s.label == "Rank").set_value(1).run()
    assert at.query_params["rank"] == "1"
    assert "**exploding_grad** · step 40 · rank 1 · `b`" in " ".join(m.value for m in at.markdown)
