"""Issue 30's acceptance scenarios: fresh failing jobs (tests/scenarios/jobs/), recorded by
real runs and checked end to end through the installed ``debugkit`` console script, run
from another folder with relative paths (see test_scenarios.py for the conventions)."""

from __future__ import annotations

import json

import pytest

from tests.scenarios.test_scenarios import _job, _kinds, debugkit, findings, replay


# ---------------------------------------------------------------------- saturation
@pytest.fixture(scope="module")
def sigmoid_run(tmp_path_factory):
    return _job(tmp_path_factory, "sigmoid_saturation", 0)


@pytest.mark.slow
def test_saturated_sigmoid_layer_is_named_with_its_step(sigmoid_run):
    fs = findings(sigmoid_run)
    dead = [f for f in fs if f["kind"] == "dead_layer"]
    assert [(f["step"], f["rank"], f["layer"]) for f in dead] == [(30, 0, "0.weight")]
    ev = dead[0]["evidence"]
    assert ev["went_to_zero"] == {"0.weight": 30, "0.bias": 30}
    assert ev["last_nonzero_step"] == {"0.weight": 29, "0.bias": 29}
    assert ev["zero_in_every_logged_step"] == []
    assert "saturated" in dead[0]["message"] and "from step 30" in dead[0]["message"]
    text = debugkit(sigmoid_run, "diagnose", "run").stdout
    assert "dead_layer" in text and "'0.weight', '0.bias'" in text


# ---------------------------------------------------------- the batch alone shows it
@pytest.fixture(scope="module")
def label_run(tmp_path_factory):
    return _job(tmp_path_factory, "missing_label", 1)


@pytest.mark.slow
def test_diagnose_and_info_name_the_sample_from_the_captured_batch(label_run):
    fs = findings(label_run)
    assert [(f["kind"], f["step"], f["rank"]) for f in fs] == [("step_failure", 9, 0)]
    shown = fs[0]["evidence"]["batch_shows"]
    assert (shown["check"], shown["input"], shown["sample_index"], shown["dataset_index"], shown["value"]) \
        == ("labels", "batch[1]", 6, 150, -1)
    assert "sample 6 (dataset index 150) has label -1, outside [0, 5)" in fs[0]["message"]
    info = json.loads(debugkit(label_run, "info", "run", "--json").stdout)
    assert [(f["step"], f["batch_shows"]["dataset_index"]) for f in info["failures"]] == [(9, 150)]
    text = debugkit(label_run, "info", "run").stdout
    assert "sample 6 (dataset index 150) has label -1, outside [0, 5)" in text


# ------------------------------------------------------------- the loss made the NaN
@pytest.fixture(scope="module")
def bce_run(tmp_path_factory):
    return _job(tmp_path_factory, "fraud_bce", 1)


@pytest.mark.slow
def test_nonfinite_loss_from_finite_outputs_is_the_loss_computation(bce_run):
    fs = findings(bce_run)
    # one fact, one finding (issue 31): the loss is the cause and stays; the gradients'
    # finding (a warning) is attached to it as its consequence, not listed again
    assert [(f["kind"], f["step"], f["severity"]) for f in fs][:1] == [("nonfinite_loss", 6, "error")]
    assert not [f for f in fs if f["kind"] == "nonfinite_grad"]
    loss = fs[0]
    assert loss["evidence"]["origin"] == "loss_computation"
    grad = next(r for r in loss["evidence"]["related"] if r["kind"] == "nonfinite_grad")
    assert {k: grad[k] for k in ("kind", "step", "rank", "relation", "severity")} == \
        {"kind": "nonfinite_grad", "step": 6, "rank": 0, "relation": "consequence", "severity": "warning"}
    assert grad["evidence"]["related"] == [{"kind": "nonfinite_loss", "step": 6, "rank": 0,
                                           "relation": "cause"}]
    assert "the loss computation made it" in loss["message"]
    assert "binary_cross_entropy_with_logits" in loss["message"] and "log_softmax" in loss["message"]
    assert "A consequence of the non-finite loss at step 6" in grad["message"]
    assert "forward pass overflowed" not in grad["message"]
    rep = replay(bce_run)
    assert rep["reproduced"] is True
    c = rep["culprit"]
    assert (c["module"], c["op"], c["sample_index"], c["dataset_index"]) == \
        ("(loss computation)", "torch.log", 11, 203)
    assert "fraud_bce.py:37" in c["detail"]
    advice = " ".join(rep["advice"])
    assert "binary_cross_entropy_with_logits" in advice and "logsumexp" in advice
    assert "None" not in advice and "``" not in advice


# ------------------------------------------------------- the DataLoader's own failure
@pytest.fixture(scope="module")
def audio_run(tmp_path_factory):
    return _job(tmp_path_factory, "audio_unlabelled", 1)


@pytest.mark.slow
def test_collate_failure_in_a_worker_is_a_capture_naming_the_odd_sample(audio_run):
    info = json.loads(debugkit(audio_run, "info", "run", "--json").stdout)
    assert info["status"] == "failed"
    assert [(f["kind"], f["step"], f["rank"], f["dataset_indices"]) for f in info["failures"]] == \
        [("data_loading", 9, 0, [72, 73, 74, 75, 76, 77, 78, 79])]
    fs = findings(audio_run)
    assert [(f["kind"], f["step"], f["rank"], f["severity"]) for f in fs] == [("step_failure", 9, 0, "error")]
    dl = fs[0]["evidence"]["data_loading"]
    assert (dl["phase"], dl["odd_positions"], dl["odd_dataset_indices"]) == ("collate", [5], [77])
    assert "dataset index 77 (sample 5): ['audio']: Tensor [400] float32, ['label']: NoneType" \
        in fs[0]["message"]
    assert "2 worker processes" in fs[0]["message"]
    rep = replay(audio_run)
    assert rep["reproduced"] is True and rep["same_error"] is True
    c = rep["culprit"]
    assert (c["op"], c["sample_index"], c["dataset_index"]) == ("collate", 5, 77)
    assert rep["culprit_positions"] == [5]
    assert [(ch["name"], ch["ok"]) for ch in rep["checks"]] == [("collate", False)]
    assert "__getitem__" in " ".join(rep["advice"])
    text = debugkit(audio_run, "replay", "run", "--code-root", ".").stdout
    assert "sample 5 (dataset index 77)" in text and "to do:" in text
    # no dataset_factory recorded: the captured samples are collated, and the text says
    # what to pass to have them fetched again
    assert rep["ran"]["mode"] == "collate"
    assert "rec.track(loader, dataset_factory='module:callable'" in text


# ------------------------------------------------ Lightning as the docs write it
@pytest.fixture(scope="module")
def lit_run(tmp_path_factory):
    return _job(tmp_path_factory, "lit_wine", 1)


@pytest.mark.slow
def test_lightning_script_with_saved_hparams_replays_without_a_factory(lit_run):
    info = json.loads(debugkit(lit_run, "info", "run", "--json").stdout)
    assert info["manifest"]["model_factory"] == "lit_wine:LitWine"
    assert info["manifest"]["factory_kwargs"] == {"features": 11, "hidden": 16, "num_classes": 4, "lr": 0.05}
    assert [(f["step"], f["error_type"]) for f in info["failures"]] == [(4, "IndexError")]
    rep = replay(lit_run)
    assert rep["reproduced"] is True and rep["same_error"] is True
    c = rep["culprit"]
    assert (c["input"], c["sample_index"]) == ("batch[1]", 5)
    assert "has label 7, outside [0, 4)" in c["detail"]


# ------------------------------------------------------------ the HF Trainer's defaults
@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    return _job(tmp_path_factory, "hf_reviews", 1)


@pytest.mark.slow
def test_hf_trainer_capture_names_the_dataset_index_and_no_vanishing_at_init(hf_run):
    info = json.loads(debugkit(hf_run, "info", "run", "--json").stdout)
    (f,) = info["failures"]
    assert (f["step"], f["error_type"]) == (17, "IndexError")
    # the Trainer's shuffled sampler: batch 17's dataset indices, in the order it served them
    assert f["dataset_indices"] == [175, 87, 140, 65, 203, 237, 302, 67, 20, 2, 303, 263, 152, 18, 283, 70]
    fs = findings(hf_run)
    assert "vanishing_grad" not in _kinds(fs)  # attention's query/key start tiny: not a finding
    assert [(x["kind"], x["step"]) for x in fs] == [("step_failure", 17)]
    assert fs[0]["evidence"]["batch_shows"]["dataset_index"] == 302
    rep = replay(hf_run)
    assert rep["reproduced"] is True
    c = rep["culprit"]
    assert (c["input"], c["sample_index"], c["dataset_index"]) == ("batch['labels']", 6, 302)
    assert "sample 6 (dataset index 302) has label 3" in c["detail"]


# -------------------------------------------------- the rank that added a collective
@pytest.fixture(scope="module")
def extra_collective_run(tmp_path_factory):
    import sys

    from tests.scenarios.test_scenarios import JOBS, _run

    cwd = tmp_path_factory.mktemp("extra_collective")
    proc = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "--monitor-interval", "20", str(JOBS / "extra_collective.py"), "--out", "run"], cwd)
    assert proc.returncode != 0
    return cwd


@pytest.mark.slow
def test_rank_that_called_an_extra_collective_is_named_and_the_hang_linked(extra_collective_run):
    fs = findings(extra_collective_run)
    assert [(f["kind"], f["step"], f["rank"]) for f in fs] == \
        [("collective_mismatch", 12, 1), ("step_failure", 23, 1)]
    root, failure = fs
    ev = root["evidence"]
    assert ev["ranks"] == [1] and ev["direction"] == {"1": "added"}
    assert ev["calls"] == {"0": 2, "1": 3} and ev["usual_calls"] == {"0": 2, "1": 2}
    assert ev["collective"] == "all_reduce"
    assert "rank 1 called an extra all_reduce at step 12" in root["message"]
    assert [c["step"] for c in ev["consequences"]] == [23]
    assert failure["evidence"]["related"] == [{"kind": "collective_mismatch", "step": 12, "rank": 1,
                                               "relation": "cause"}]
    assert "straggler" not in _kinds(fs) and "rank_divergence" not in _kinds(fs)


@pytest.fixture(scope="module")
def lit_tokens_run(tmp_path_factory):
    return _job(tmp_path_factory, "lit_tokens", 1)


@pytest.mark.slow
def test_lightning_collate_failure_is_a_capture_naming_the_long_sequence(lit_tokens_run):
    fs = findings(lit_tokens_run)
    assert [(f["kind"], f["step"], f["rank"]) for f in fs] == [("step_failure", 6, 0)]
    ev = fs[0]["evidence"]
    assert ev["capture_kind"] == "data_loading" and ev["dataset_indices"] == list(range(48, 56))
    assert (ev["data_loading"]["odd_positions"], ev["data_loading"]["odd_dataset_indices"]) == ([5], [53])
    assert "pad_sequence" in fs[0]["message"]
    rep = replay(lit_tokens_run)
    assert rep["reproduced"] is True and rep["same_error"] is True
    assert (rep["culprit"]["sample_index"], rep["culprit"]["dataset_index"]) == (5, 53)
    assert "[0]: Tensor [17] int64" in rep["culprit"]["detail"]


@pytest.mark.slow
def test_collate_failure_shows_and_replays_on_the_dashboard(audio_run, monkeypatch):
    from tests.app._apptest import figures, open_page

    monkeypatch.setenv("DEBUGKIT_ROOTS", str(audio_run))
    over = open_page("overview", run="run")
    assert not over.exception
    assert figures(over).get("Failures") == "1"
    at = open_page("replay", timeout=240, run="run")
    assert not at.exception
    at.button(key="replay_button").click().run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert (metrics["Reproduced"], metrics["Sample"], metrics["Dataset index"]) == ("yes", "5", "77")
    assert any("return the same structure for every index" in w.value for w in at.warning)


# ------------------------------- a custom collate_fn's failure, fetched again by replay
@pytest.fixture(scope="module")
def gps_run(tmp_path_factory):
    return _job(tmp_path_factory, "gps_tracks", 1)


@pytest.mark.slow
def test_custom_collate_failure_is_fetched_again_and_names_the_odd_track(gps_run):
    from debugkit.replay.dataload import MSG_NO_DATASET_FACTORY

    info = json.loads(debugkit(gps_run, "info", "run", "--json").stdout)
    assert [(f["kind"], f["step"], f["dataset_indices"]) for f in info["failures"]] == \
        [("data_loading", 5, list(range(80, 96)))]
    fs = findings(gps_run)
    dl = fs[0]["evidence"]["data_loading"]
    # the tracks' lengths differ (the collate_fn pads them): only the 3-column track is odd
    assert (dl["phase"], dl["odd_positions"], dl["odd_dataset_indices"]) == ("collate", [13], [93])
    rep = replay(gps_run)
    assert rep["reproduced"] is True and rep["same_error"] is True
    assert rep["ran"]["mode"] == "refetch"
    assert "gps_tracks:make_dataset(path='tracks.jsonl')" in rep["ran"]["detail"]
    assert [(c["name"], c["ok"]) for c in rep["checks"]] == [("refetch", True), ("collate", False)]
    c = rep["culprit"]
    assert (c["op"], c["sample_index"], c["dataset_index"]) == ("collate", 13, 93)
    assert rep["culprit_positions"] == [13]
    assert "sample 13 (dataset index 93): [0]: Tensor [6, 3] float32" in c["detail"]
    assert rep["data_loading"]["dataset_factory"] == "gps_tracks:make_dataset"
    assert rep["data_loading"]["collate_fn"] == "gps_tracks:collate_tracks"
    assert rep["data_loading"]["refetch"]["mismatched"] == []
    assert MSG_NO_DATASET_FACTORY not in rep["notes"]
    # without --code-root the code is outside the allowed folders: the captured samples
    # are used, and both refusals are said
    out = debugkit(gps_run, "replay", "run", "--json").stdout
    refused = json.loads(out)
    assert refused["ran"]["mode"] == "collate" and refused["reproduced"] is False
    assert any("the dataset was not rebuilt" in n and "--code-root" in n for n in refused["notes"])
    assert [(ch["name"], ch["ok"]) for ch in refused["checks"]] == [("collate", None)]
    assert "outside the folders whose code this replay may run" in refused["checks"][0]["detail"]


@pytest.mark.slow
def test_a_dataset_that_changed_since_the_run_is_a_replay_finding(gps_run, tmp_path):
    import shutil

    copy = tmp_path / "gps"
    shutil.copytree(gps_run, copy)
    rows = [json.loads(line) for line in (copy / "tracks.jsonl").read_text().splitlines()]
    rows[93]["points"] = [p[:2] for p in rows[93]["points"]]  # the altitude column dropped
    (copy / "tracks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = replay(copy)
    assert rep["reproduced"] is False
    assert [(c["name"], c["ok"]) for c in rep["checks"]] == [("refetch", False), ("collate", True)]
    assert rep["data_loading"]["refetch"]["mismatched"] == [
        {"position": 13, "dataset_index": 93,
         "what": "[0]: float32 [6, 3] in the capture, float32 [6, 2] now"}]
    assert "the dataset changed since the run" in rep["checks"][0]["detail"]
    assert "the batch the dataset serves now is fine" in rep["checks"][1]["detail"]
    assert any("changed since the run" in a for a in rep["advice"])


# ---------------------------------------------- the rank that skipped a collective
@pytest.fixture(scope="module")
def skipped_reduce_run(tmp_path_factory):
    import sys

    from tests.scenarios.test_scenarios import JOBS, _run

    cwd = tmp_path_factory.mktemp("skipped_reduce")
    proc = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                 "--monitor-interval", "20", str(JOBS / "skipped_reduce.py"), "--out", "run"], cwd)
    assert proc.returncode != 0
    return cwd


@pytest.mark.slow
def test_rank_that_skipped_a_collective_is_named_and_the_later_failure_linked(skipped_reduce_run):
    fs = findings(skipped_reduce_run)
    assert [(f["kind"], f["step"], f["rank"]) for f in fs] == \
        [("collective_mismatch", 9, 0), ("step_failure", 19, 1)]
    root, failure = fs
    ev = root["evidence"]
    # rank 0 is named (the rank that left its own usual count), not rank 1 that waited
    assert ev["ranks"] == [0] and ev["direction"] == {"0": "skipped"}
    assert ev["calls"] == {"0": 1, "1": 2} and ev["usual_calls"] == {"0": 2, "1": 2}
    assert ev["collective"] == "all_reduce"
    assert "rank 0 skipped an all_reduce at step 9" in root["message"]
    assert [(c["step"], c["rank"]) for c in ev["consequences"]] == [(19, 1)]
    assert failure["evidence"]["related"] == [{"kind": "collective_mismatch", "step": 9, "rank": 0,
                                               "relation": "cause"}]
    assert "straggler" not in _kinds(fs) and "rank_divergence" not in _kinds(fs)
    text = debugkit(skipped_reduce_run, "diagnose", "run").stdout
    assert "rank 0 skipped an all_reduce at step 9" in text


# ------------------- the HF Trainer's collator failing, captured through sys.excepthook
@pytest.fixture(scope="module")
def hf_tickets_run(tmp_path_factory):
    return _job(tmp_path_factory, "hf_tickets", 1)


@pytest.mark.slow
def test_hf_collator_failure_ending_the_script_is_captured_and_fetched_again(hf_tickets_run):
    info = json.loads(debugkit(hf_tickets_run, "info", "run", "--json").stdout)
    assert info["status"] == "failed"
    # the Trainer's shuffled sampler, tracked in place: no w.track in the script
    assert [(f["kind"], f["step"], f["dataset_indices"]) for f in info["failures"]] == \
        [("data_loading", 6, [63, 14, 16, 0, 2, 33, 47, 57])]
    fs = findings(hf_tickets_run)
    assert [(f["kind"], f["step"]) for f in fs] == [("step_failure", 6)]
    dl = fs[0]["evidence"]["data_loading"]
    assert (dl["phase"], dl["odd_positions"], dl["odd_dataset_indices"]) == ("collate", [7], [57])
    rep = replay(hf_tickets_run)
    assert rep["reproduced"] is True and rep["same_error"] is True
    assert rep["ran"]["mode"] == "refetch"
    assert "hf_tickets:make_dataset(n=96, seed=4)" in rep["ran"]["detail"]
    assert [(c["name"], c["ok"]) for c in rep["checks"]] == [("refetch", True), ("collate", False)]
    c = rep["culprit"]
    assert (c["op"], c["sample_index"], c["dataset_index"]) == ("collate", 7, 57)
    assert "['queue'][0]: int, ['queue'][1]: int" in c["detail"]
