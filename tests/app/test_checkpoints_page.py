"""AppTest of the Checkpoints page: the resumed sample, NaN/frozen weights, empty state,
comparison links, bad query params, replay-from-checkpoint links."""

from __future__ import annotations

import shutil

import pytest
from streamlit.testing.v1 import AppTest

from tests.checkpoint_factory import train_with_checkpoints
from tests.conftest import ROOT
from tests.replay.conftest import project  # noqa: F401  (fixture)

from ._apptest import figures, open_page


def _open(run: str, **query) -> AppTest:
    return open_page("checkpoints", run=run, **query)


def _open_path(path) -> AppTest:
    return open_page("checkpoints", run_path=path)


def _charts(at):
    return [c for c in at.get("plotly_chart")]


def test_resumed_sample_lists_verified_checkpoints_and_draws_the_heatmap():
    at = _open("digits-resumed")
    assert at.title[0].value == "Checkpoints"
    at.session_state["ckpt_listing"] = True  # as a click on the list's expander does
    at.run()
    listing = at.dataframe[0].value
    assert listing["checkpoint"].tolist() == ["step 30", "step 60", "step 90", "step 120", "step 150"]
    assert listing["ok"].all()
    assert [t.label for t in at.tabs] == ["Relative change", "Weight norms"]
    # the heatmap; the Weight norms tab and the moved-most bars are built when opened
    assert [c.key for c in _charts(at)] == ["ckpt_heatmap"]
    moved = next(e for e in at.expander if "Moved most" in e.label)
    assert "(top 6): largest" in moved.label  # the closed chart's label names the top tensor
    at.session_state["ckpt_moved_open"] = True  # as a click on it does
    at.run()
    assert [c.key for c in _charts(at)] == ["ckpt_heatmap", "ckpt_moved"]
    assert at.query_params["moved"] == "1"
    assert any("Every verified checkpoint is finite" in s.value for s in at.success)
    # compare: first and last by default, and the choice goes into the URL
    assert at.selectbox(key="ckpt_a").value == 0 and at.selectbox(key="ckpt_b").value == 4
    assert at.query_params["a"] == "30" and at.query_params["b"] == "150"
    metrics = figures(at)
    assert metrics["Tensors that moved"] == "6 / 6" and metrics["Never moved"] == "0"


def test_comparison_deep_link_and_bad_params():
    at = _open("digits-resumed", a="60", b="90")
    assert at.selectbox(key="ckpt_a").value == 1 and at.selectbox(key="ckpt_b").value == 2
    at = _open("digits-resumed", a="61", b="x")
    warnings = [w.value for w in at.warning]
    assert any("?a=61: this run has no verified checkpoint at that step" in w for w in warnings)


@pytest.mark.slow
def test_nonfinite_and_frozen_weights_are_flagged(tmp_path):
    train_with_checkpoints(tmp_path / "nan", nan_at=3)
    at = _open_path(tmp_path / "nan")
    errors = [e.value for e in at.error]
    assert any("NaN/Inf first appears in **step 4**, in `2.weight`" in e for e in errors)
    assert any(m.value.startswith(":material/error: **nonfinite_weights** · step 4") for m in at.markdown)
    train_with_checkpoints(tmp_path / "frozen", freeze_first=True)
    at = _open_path(tmp_path / "frozen")
    assert any("**frozen_layer**" in m.value and "`0.weight`" in m.value for m in at.markdown)
    assert list(figures(at).items())[2] == ("Never moved", "2")


def test_a_corrupted_checkpoint_is_flagged_and_skipped(tmp_path):
    shutil.copytree(ROOT / "sample_runs" / "digits-resumed", tmp_path / "r")
    f = tmp_path / "r" / "checkpoints" / "000000150" / "model.safetensors"
    f.write_bytes(b"\0" * f.stat().st_size)  # same size, other bytes
    at = _open_path(tmp_path / "r")
    at.session_state["ckpt_listing"] = True  # as a click on the list's expander does
    at.run()
    listing = at.dataframe[0].value
    assert listing.iloc[-1]["problem"] == "model.safetensors: SHA-256 differs from the recorded one"
    assert any("step 150 is skipped" in w.value for w in at.warning)
    assert at.selectbox(key="ckpt_b").value == 3  # the newest verified one: step 120


def test_run_without_checkpoints_says_what_to_record():
    at = _open("digits-mlp")
    assert any("This run has no checkpoints. Call `rec.checkpoint()`" in i.value for i in at.info)


def test_a_folder_of_state_dict_files(tmp_path):
    import torch

    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    folder = tmp_path / "ckpts"
    folder.mkdir()
    for epoch in (1, 2):
        with torch.no_grad():
            m.weight.mul_(2.0)
        torch.save(m.state_dict(), folder / f"epoch-{epoch}.pt")
    (folder / "evil.pt").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    at = _open("digits-mlp")
    at.text_input[0].input(str(folder))
    at.button[0].click().run()
    assert not at.exception
    at.session_state["ckpt_listing"] = True  # as a click on the list's expander does
    at.run()
    listing = at.dataframe[0].value
    assert set(listing["source"]) == {"state_dict file"}
    bad = listing[~listing["ok"]]
    assert bad["path"].str.endswith("evil.pt").all() and len(bad) == 1
    assert "not a loadable state_dict" in bad["problem"].iloc[0]
    at.text_input[0].input("/no/such/folder")
    at.button[0].click().run()
    assert any("not a folder" in e.value or "does not exist" in e.value for e in at.error)


def test_replay_from_checkpoint_link(project, tmp_path):
    from tests.replay.test_checkpoint_and_guard import _run_with_checkpoints_then_bad_label

    run = _run_with_checkpoints_then_bad_label(tmp_path / "r")
    at = _open_path(run)
    links = [p for p in at.get("page_link") if "from checkpoint" in p.proto.label]
    assert links and links[0].proto.label.startswith("Replay capture r0-s0000004-exception from checkpoint at step 4")
    assert links[0].proto.query_string == "failure=r0-s0000004-exception&checkpoint=4"


@pytest.mark.slow
@pytest.mark.parametrize("value, needle", [("3", "no checkpoint at that step (it has: 2, 4)"),
                                           ("abc", "expected a checkpoint step")])
def test_replay_page_validates_the_checkpoint_param(project, tmp_path, value, needle):
    from tests.replay.test_checkpoint_and_guard import _run_with_checkpoints_then_bad_label

    run = _run_with_checkpoints_then_bad_label(tmp_path / "r")
    at = open_page("replay", run_path=run, checkpoint=value)
    assert any(needle in w.value for w in at.warning)


@pytest.mark.slow
def test_replay_page_with_a_checkpoint_replays_with_its_weights(project, tmp_path, monkeypatch):
    from tests.replay.test_checkpoint_and_guard import _run_with_checkpoints_then_bad_label

    # The operator allows the project's folder (the fixture) and lets this visitor trust it.
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    run = _run_with_checkpoints_then_bad_label(tmp_path / "r")
    at = open_page("replay", check=False, timeout=180, run_path=run, checkpoint="2")
    assert any("Weights: the checkpoint at step 2" in i.value for i in at.info)
    at.checkbox[0].check().run()  # "I trust this code": the run is not a bundled sample
    at.button(key="replay_button").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("weights of the checkpoint at step 2" in c.value for c in at.caption)


def test_the_heatmap_tab_round_trips_through_the_url():
    at = _open("digits-resumed")
    assert "tab" not in at.query_params
    at.session_state["ckpt_tab"] = "Weight norms"  # as a click on the tab does
    at.run()
    assert at.query_params["tab"] == "norms"
    assert "ckpt_norms" in [c.key for c in _charts(at)] and "ckpt_heatmap" not in [c.key for c in _charts(at)]
    again = _open("digits-resumed", tab="norms", a="60", b="90")
    assert again.session_state["ckpt_tab"] == "Weight norms"
    assert (again.query_params["tab"], again.query_params["a"], again.query_params["b"]) == ("norms", "60", "90")
    bad = _open("digits-resumed", tab="weights")
    assert any("?tab='weights' is not one of 'change', 'norms'" in w.value for w in bad.warning)
    assert bad.session_state["ckpt_tab"] == "Relative change" and "tab" not in bad.query_params


def test_the_replay_choice_round_trips_through_the_url(project, tmp_path):
    from tests.replay.test_checkpoint_and_guard import _run_with_checkpoints_then_bad_label

    run = _run_with_checkpoints_then_bad_label(tmp_path / "r")
    at = _open_path(run)
    at.selectbox(key="ckpt_replay_step").set_value(2).run()
    assert at.query_params["replay_step"] == "2"
    again = open_page("checkpoints", run_path=run, replay_step="2")
    assert again.selectbox(key="ckpt_replay_step").value == 2
    links = [p for p in again.get("page_link") if "from checkpoint" in p.proto.label]
    assert links[0].proto.query_string == "failure=r0-s0000004-exception&checkpoint=2"
    bad = open_page("checkpoints", run_path=run, replay_step="3", capture="r9-nope")
    warnings = " ".join(w.value for w in bad.warning)
    assert "?replay_step='3' is not the step of one of this run's checkpoints" in warnings
    assert "?capture='r9-nope' is not one of this run's failure captures" in warnings
    assert bad.selectbox(key="ckpt_replay_step").value == 4
