"""Every name a run records is resolved inside the run (issue 28, item 2), through the
pages a visitor reaches: a checkpoint index naming ``../../outside``, an absolute file
or a folder that links out; a profile and a memory snapshot that link out. None of
them is listed, stat'ed or hashed, and no outside path is shown.

The same rule through the command line (failure ids, traces, audits) is in
tests/cli/test_recorded_names_cli.py; the helper itself is ``debugkit._fsutil.in_run``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_RUNS

from ._apptest import open_page


def _store() -> Path:
    return Path(os.environ["DEBUGKIT_STORE"])


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _shown(at) -> str:
    parts = [str(x.value) for x in [*at.error, *at.warning, *at.info, *at.success, *at.markdown, *at.text,
                                   *at.caption, *at.code, *at.exception]]
    parts += [df.value.to_string() for df in [*at.dataframe, *at.table]]
    return "\n".join(parts)


def _hostile_checkpoints(run: Path, outside: Path, *, nan: bool = False) -> None:
    """Point three of digits-resumed's five checkpoints outside the run, each with the
    outside file's true size and SHA-256 (so that, read, they would verify)."""
    ck = run / "checkpoints"
    index = json.loads((ck / "index.json").read_text())
    entries = {e["step"]: e for e in index["checkpoints"]}
    outside.mkdir()
    # step 150: "dir" climbs out of the run
    shutil.copytree(ck / entries[150]["dir"], outside / "ck150")
    if nan:
        import torch
        from safetensors.torch import load_file, save_file

        w = load_file(str(outside / "ck150" / "model.safetensors"))
        first = next(iter(w))
        w[first] = w[first].clone()
        w[first].view(-1)[0] = float("nan")
        save_file(w, str(outside / "ck150" / "model.safetensors"))
        assert torch.isnan(w[first]).any()
    entries[150]["dir"] = "../../../outside/ck150"  # run/checkpoints/../../../outside
    entries[150]["files"] = {n: {"bytes": (outside / "ck150" / n).stat().st_size,
                                 "sha256": _sha(outside / "ck150" / n)}
                             for n in entries[150]["files"]}
    # step 120: an absolute file name among its files
    secret = outside / "secret.bin"
    secret.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    entries[120]["files"][str(secret)] = {"bytes": secret.stat().st_size, "sha256": _sha(secret)}
    # step 90: its folder is a link to a copy outside
    d90 = ck / entries[90]["dir"]
    shutil.copytree(d90, outside / "ck90")
    shutil.rmtree(d90)
    d90.symlink_to(outside / "ck90", target_is_directory=True)
    (ck / "index.json").write_text(json.dumps(index))


@pytest.fixture
def hostile_run(tmp_path):
    run = _store() / "ckpt-escape"
    shutil.copytree(SAMPLE_RUNS / "digits-resumed", run)
    _hostile_checkpoints(run, _store().parent / "outside")
    return run


def test_checkpoints_page_never_reads_a_checkpoint_outside_the_run(hostile_run):
    at = open_page("checkpoints", run="ckpt-escape")
    at.session_state["ckpt_listing"] = True  # as a click on the list's expander does
    at.run()
    listing = at.dataframe[0].value
    assert listing["checkpoint"].tolist() == ["step 30", "step 60", "step 90", "step 120", "step 150"]
    assert listing["ok"].tolist() == [True, True, False, False, False]
    shown = _shown(at)
    assert "a link leading outside the run" in shown          # step 90
    assert "it is an absolute path" in shown                   # step 120
    assert "it contains '..'" in shown                          # step 150
    # where the link leads is never shown (the recorded names are the run's own text)
    assert str(_store().parent / "outside" / "ck90") not in shown


def test_homes_analysis_never_reads_weights_outside_the_run(tmp_path):
    """The checkpoint outside holds NaN weights with its true hash: read, Home's analysis
    would report ``nonfinite_weights`` from a file that is not the run's."""
    run = _store() / "ckpt-escape-nan"
    shutil.copytree(SAMPLE_RUNS / "digits-resumed", run)
    _hostile_checkpoints(run, _store().parent / "outside", nan=True)
    at = open_page(None, run="ckpt-escape-nan")
    shown = _shown(at)
    runs = next(df.value for df in at.dataframe if "run" in df.value.columns)
    row = runs.set_index("run").loc["ckpt-escape-nan"]  # the run's row, analysed
    assert row["status"] == "finished" and row["steps"] == 159
    assert "nonfinite_weights" not in shown
    assert "onfinite weights" not in str(row["finding"] or ""), row["finding"]
    assert str(_store().parent / "outside") not in shown


def test_a_profile_linking_out_of_the_run_is_not_listed(tmp_path):
    run = _store() / "profile-escape"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", run)
    outside = tmp_path / "outside.raw.txt.gz"
    outside.write_bytes(gzip.compress(b"MainThread;train (train.py:10);step (train.py:20) 7\n"))
    (run / "profiles").mkdir()
    (run / "profiles" / "secret.raw.txt.gz").symlink_to(outside)
    at = open_page("profiler", check=True, run="profile-escape")
    assert "This run holds no profiles yet." in [i.value for i in at.info]
    assert not at.get("plotly_chart")


def test_a_memory_snapshot_linking_out_of_the_run_is_not_listed(tmp_path):
    from tests.memsnap_factory import leaky_training

    run = _store() / "snapshot-escape"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", run)
    outside = tmp_path / "outside.pickle"
    leaky_training(5).dump(outside)
    (run / "memory_snapshots").mkdir()
    (run / "memory_snapshots" / "r0-s0000001-close.pickle").symlink_to(outside)
    at = open_page("memory", run="snapshot-escape")
    assert any("No memory snapshot in this run" in i.value for i in at.info)
    assert not [s for s in at.selectbox if s.label == "Snapshot"]
