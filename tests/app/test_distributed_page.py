"""AppTest of the Distributed page on the sample runs."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from ._apptest import open_page


def _open(run_id: str) -> AppTest:
    return open_page("distributed", run=run_id)


def test_straggler_sample_shows_rank_2_and_the_charts():
    at = _open("ddp-straggler")
    assert at.title[0].value == "Distributed"
    # the findings as every page draws them (pages._ui.show_findings), in diagnose's order
    cards = [m.value for m in at.markdown if m.value.startswith(":material/")]
    assert cards[:2] == [":material/warning: **straggler** · step 1 · rank 2",
                         ":material/warning: **straggler** · rank 2"]
    captions = [c.value for c in at.caption]
    assert any("Rank 2 is a straggler" in c for c in captions)
    assert any("Rank 2 starts its last gloo:all_reduce" in c for c in captions)
    assert [t.label for t in at.tabs] == ["Step time", "Data wait vs compute", "Hangs",
                                          "Gradient divergence", "Profiler traces"]
    # the ranks: a Markdown table, and every column in a grid drawn when opened
    ranks = next(m.value for m in at.markdown if m.value.startswith("| rank | host |"))
    assert [r.split(" | ")[3] for r in ranks.splitlines()[2:]] == ["finished"] * 4
    assert not at.dataframe
    at.session_state["dist_ranks"] = True  # as a click on "All rank details" does
    at.run()
    info = at.dataframe[0].value
    assert info["rank"].tolist() == [0, 1, 2, 3] and set(info["status"]) == {"finished"}
    # only the open tab (Step time: its heatmap) is built and sent; the lines when opened
    assert [c.key for c in at.get("plotly_chart")] == ["dist_heatmap"]
    at.session_state["dist_lines_open"] = True  # as a click on "One line per rank" does
    at.run()
    assert [c.key for c in at.get("plotly_chart")] == ["dist_heatmap", "dist_lines"]
    assert at.query_params["lines"] == "1"
    at.session_state["dist_tab"] = "Data wait vs compute"  # as a click on the tab does
    at.run()
    split = next(d.value for d in at.dataframe if "straggler" in d.value.columns)
    assert split.loc[split["straggler"], "rank"].tolist() == [2]
    at.session_state["dist_tab"] = "Gradient divergence"
    at.run()
    assert any("Every layer's gradient norm agrees" in s.value for s in at.success)


def test_switching_the_step_time_value():
    at = _open("ddp-straggler")
    at.segmented_control(key="dist_metric").set_value("own work (data wait + compute)").run()
    assert not at.exception


def test_hang_sample_highlights_rank_1_and_diffs_the_stacks():
    at = _open("ddp-hang")
    errors = [e.value for e in at.error]
    assert any(m.value.startswith(":material/error: **hang** · step 22 · rank 1") for m in at.markdown)
    assert "Rank 1 diverges: the others wait for it." in errors
    view = next(d.value for d in at.dataframe if "divergent" in d.value.columns)
    assert view.set_index("rank")["divergent"].to_dict() == {0: False, 1: True}
    assert view.set_index("rank")["stuck_code"][0] == "loss.backward()"
    diffs = [c.value for c in at.code if c.language == "diff"]
    assert diffs and "dist.barrier(" in diffs[0] and "loss.backward()" in diffs[0]


def test_single_rank_run_says_what_to_do():
    at = _open("digits-mlp")
    assert any("single rank" in i.value for i in at.info)


@pytest.mark.parametrize("run_id", ["../etc", "no-such-run"])
def test_bad_run_param_shows_an_error_not_a_crash(run_id):
    at = open_page("distributed", run=run_id)
    assert any("run" in e.value for e in at.error) or any("Pick a run" in i.value for i in at.info)


def test_a_straggler_run_opens_on_own_work_where_the_straggler_is_slowest():
    """Step time would make the straggler look fastest (the others wait for it)."""
    import json

    import numpy as np

    at = _open("ddp-straggler")
    assert at.segmented_control(key="dist_metric").value == "own work (data wait + compute)"
    import base64

    heat = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
    z = heat["z"]
    z = (np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"])).reshape(len(heat["y"]), -1)
         if isinstance(z, dict) else np.asarray(z, dtype=float))
    per_rank = np.nanmean(z, axis=1)
    assert heat["y"][int(np.argmax(per_rank))].startswith("rank 2")  # the slowest on this view
    # the choice travels in the URL, and a link with it opens that view
    at.segmented_control(key="dist_metric").set_value("step time").run()
    assert at.query_params["dist_metric"] == "step time"
    again = open_page("distributed", run="ddp-straggler", dist_metric="step time")
    assert again.segmented_control(key="dist_metric").value == "step time"
    # only the open tab is built: the choice survives another tab opened and closed
    at.session_state["dist_tab"] = "Hangs"
    at.run()
    assert not at.get("segmented_control")
    at.session_state["dist_tab"] = "Step time"
    at.run()
    assert at.segmented_control(key="dist_metric").value == "step time"
    assert at.query_params["dist_metric"] == "step time"
    hung = open_page("distributed", run="ddp-hang", tab="step-time")
    assert hung.segmented_control(key="dist_metric").value == "step time"


def _default_tabs(node) -> list[int]:
    """``default_tab_index`` of every tab container on the page."""
    out = []
    proto = getattr(node, "proto", None)
    if proto is not None and getattr(proto, "DESCRIPTOR", None) is not None \
            and proto.DESCRIPTOR.name == "Block" and proto.WhichOneof("type") == "tab_container":
        out.append(proto.tab_container.default_tab_index)
    for child in getattr(node, "children", {}).values():
        out += _default_tabs(child)
    return out


def test_a_hung_run_opens_on_the_hangs_tab():
    assert _default_tabs(_open("ddp-hang")._tree) == [2]  # "Hangs"
    assert _default_tabs(_open("ddp-straggler")._tree) == [0]


def test_the_open_tab_round_trips_through_the_url():
    at = _open("ddp-straggler")
    assert "tab" not in at.query_params  # the default tab
    at.session_state["dist_tab"] = "Gradient divergence"  # as a click on the tab does
    at.run()
    assert at.query_params["tab"] == "divergence"
    again = open_page("distributed", run="ddp-straggler", tab="divergence")
    assert _default_tabs(again._tree) == [3]
    hung = open_page("distributed", run="ddp-hang", tab="split")  # the link beats the run's default
    assert _default_tabs(hung._tree) == [1]
    bad = open_page("distributed", run="ddp-hang", tab="nope", dist_metric="speed")
    warnings = " ".join(w.value for w in bad.warning)
    assert "?tab='nope' is not one of 'step-time', 'split', 'hangs'" in warnings
    assert _default_tabs(bad._tree) == [2]  # the hung run's default, Hangs
    assert "tab" not in bad.query_params
    # ?dist_metric= belongs to Step time, which is built (and says so) once opened
    bad.session_state["dist_tab"] = "Step time"
    bad.run()
    assert "?dist_metric='speed' is not one of" in " ".join(w.value for w in bad.warning)


def _two_hang_incidents(root):
    """ddp-hang with a second hang incident, ten minutes after the first, at step 30."""
    import json
    import shutil

    from ..conftest import SAMPLE_RUNS

    run = root / "ddp-hang-twice"
    shutil.copytree(SAMPLE_RUNS / "ddp-hang", run)
    for dump in sorted(run.glob("ranks/*/hangs/*.json")):
        rec = json.loads(dump.read_text())
        rec.update(time=rec["time"] + 600, step=30, last_step=29, trigger_step=30)
        (dump.parent / "000-s0000030-2.json").write_text(json.dumps(rec))
    return run


def test_the_hang_incident_round_trips_through_the_url(tmp_path, monkeypatch):
    _two_hang_incidents(tmp_path)
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path))
    at = _open("ddp-hang-twice")
    box = at.selectbox(key="dist_incident")
    assert box.value == 1 and "incident" not in at.query_params
    box.set_value(2).run()
    assert not at.exception and at.query_params["incident"] == "2"
    again = open_page("distributed", run="ddp-hang-twice", incident="2")
    assert again.selectbox(key="dist_incident").value == 2
    hang = next(d.value for d in again.dataframe if "stuck_at" in d.value.columns)
    assert set(hang["step"].dropna().astype(int)) == {30}  # the second incident's table
    bad = open_page("distributed", run="ddp-hang-twice", incident="3")
    assert "?incident='3' is not an incident from 1 to 2: showing the default instead." in \
        [w.value for w in bad.warning]
    assert bad.selectbox(key="dist_incident").value == 1 and "incident" not in bad.query_params
