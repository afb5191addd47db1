"""A data-bound job (DataLoader workers decoding in pure Python), profiled with
`debugkit profile` here: idle frames out of the self-time table, the workers' top function
named, no step breakdown claimed for the workers (tests/data/public/pyspy/linux-databound)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from debugkit.analysis import profile as ap
from debugkit.io.run import open_run
from debugkit.io.run_profiles import get_profile, read_entry

from ..conftest import console_script

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "data" / "public" / "pyspy" / "linux-databound" / "run"


@pytest.fixture(scope="module")
def prof():
    return read_entry(get_profile(open_run(RUN), "databound"))


def test_the_program_is_kept_although_pyspy_saw_the_launchers_command_line(prof):
    roles = prof.threads.groupby("role")["samples"].sum().to_dict()
    assert roles == {"main": 2885, "thread": 1899, "dataloader": 5524}
    assert prof.threads.loc[prof.threads["role"] == "main", "pid"].tolist() == [23977]
    assert 23972 not in prof.threads["pid"].tolist()  # the launcher


def test_idle_frames_leave_the_self_time_table(prof):
    every = ap.compute_function_table(prof, by="function")
    assert every["name"].tolist()[:3] == ["Condition.wait", "socket.accept", "decode_row"]
    busy = ap.compute_function_table(prof, by="function", include_idle=False)
    assert busy["name"].iloc[0] == "decode_row" and busy["self_samples"].iloc[0] == 1393
    waits = busy[busy["name"].isin(["Condition.wait", "socket.accept", "_PollLikeSelector.select"])]
    assert (waits["self_samples"] == 0).all()  # still on stacks (total), never as the running code
    idle = ap.compute_idle_summary(prof)
    assert idle["samples"] == 6480 and [r["name"] for r in idle["top"][:2]] == ["Condition.wait", "socket.accept"]
    c = prof.counts
    lengths = np.diff(prof.stack_offsets)
    empty = int(c.loc[lengths[c["stack_id"].to_numpy()] == 0, "samples"].sum())  # no Python frame: no leaf
    assert busy["self_samples"].sum() + idle["samples"] + empty == prof.total_samples


def test_the_loop_waits_for_data_and_the_workers_top_function_is_named(prof):
    bd, info = ap.compute_step_breakdown(prof, prof.thread_ids("main"))
    assert info["loop"] == "main (/tmp/i16b_db/train.py, lines 80-84)"
    assert bd.set_index("phase").loc["data", "samples"] == 926 and info["loop_samples"] == 964
    workers = ap.compute_worker_hotspots(prof)
    top = workers.iloc[0]
    assert (top["name"], top["line"], top["self_samples"]) == ("decode_row", 37, 1393)
    assert workers.attrs == {"busy_samples": 1781, "worker_samples": 5524}
    text = ap.describe_breakdown(bd, info, workers)
    assert "96% is spent waiting for data" in text
    assert ap.MSG_WORKER_TOP.format(name="decode_row", where="train.py:37", busy=1393 / 1781, unsure="") in text


def test_the_workers_view_claims_no_training_loop(prof):
    bd, info = ap.compute_step_breakdown(prof, prof.thread_ids("dataloader"))
    assert info["workers_only"] and info["loop"] is None and info["loop_samples"] == 0
    text = ap.describe_breakdown(bd, info, ap.compute_worker_hotspots(prof))
    assert text.startswith(ap.MSG_WORKERS_VIEW) and "`decode_row`" in text
    assert "BaseProcess.run" not in text and "waiting for data" not in text
    # All threads together: the workers' forked stacks are not read as a loop either.
    bd, info = ap.compute_step_breakdown(prof)
    assert info["loop"] == "main (/tmp/i16b_db/train.py, lines 80-84)"


def test_few_samples_are_called_rough(prof):
    small = ap.compute_worker_hotspots(prof).copy()
    small.attrs.update(busy_samples=40, worker_samples=90)
    assert ap.MSG_FEW_SAMPLES.format(n=40) in ap.describe_worker_top(small)


def run_cli(tmp_path, *args):
    proc = subprocess.run([console_script(), *args], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_profile_summary_and_diagnose_as_a_user_runs_them(tmp_path):
    shutil.copytree(RUN, tmp_path / "databound")
    s = json.loads(run_cli(tmp_path, "profile-summary", "databound", "--json"))
    # Existing fields keep their names and shapes; new ones are added.
    assert {"format", "samples", "threads", "duration_s", "rate_hz", "top_self", "top_total",
            "step_breakdown"} <= set(s)
    assert {"threads", "loop", "phases"} <= set(s["step_breakdown"])
    assert s["top_self"][0]["name"] == "decode_row" and s["top_self"][0]["line"] == 37
    assert s["idle"]["samples"] == 6480 and s["idle"]["included_in_top_self"] is False
    assert s["step_breakdown"]["waiting_for_data"] is True
    assert "`decode_row` (train.py:37)" in s["step_breakdown"]["summary"]
    assert s["workers"]["top"][0]["name"] == "decode_row"
    with_idle = json.loads(run_cli(tmp_path, "profile-summary", "databound", "--json", "--idle"))
    assert with_idle["top_self"][0]["name"] == "Condition.wait"
    text = run_cli(tmp_path, "profile-summary", "databound", "--threads", "dataloader")
    assert ap.MSG_WORKERS_VIEW in text and "100%" not in text.split("top total:")[1]
    out = run_cli(tmp_path, "diagnose", "databound", "--json")
    (f,) = [x for x in json.loads(out)["findings"] if x["kind"] == "dataloader_bound"]
    assert "`decode_row` (train.py:37)" in f["message"]
    assert f["evidence"]["worker_top"][0]["name"] == "decode_row"


@pytest.mark.slow  # a training job under py-spy: 8.3 CPU s (tests._cputime)
def test_debugkit_profile_of_a_fresh_data_bound_job(tmp_path):
    """End to end: `debugkit profile RUN -- python train.py` on the job, here and now."""
    shutil.copy(ROOT / "examples" / "databound_decode.py", tmp_path / "train.py")
    proc = subprocess.run([console_script(), "profile", "fresh", "--name", "p", "--", sys.executable, "train.py",
                           "--steps", "40"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(run_cli(tmp_path, "profile-summary", "fresh", "--json"))
    roles = {t["role"] for t in s["threads"]}
    assert {"main", "dataloader"} <= roles
    assert s["workers"]["top"][0]["name"] == "decode_row"
    # The loop is in train.py (main, or <module> when worker shutdown at exit weighs in a short run).
    assert "/train.py" in s["step_breakdown"]["loop"]


def test_loop_flame_tree_starts_at_the_loop(prof):
    tree, info = ap.compute_loop_flame_tree(prof, prof.thread_ids("main"))
    # the root names the loop without the recording machine's folders (its /tmp/...)
    assert tree.loc[0, "name"] == f"training loop: {ap.display_paths_in(info['loop'])}"
    assert info["loop"].startswith("main (/") and "(/" not in tree.loc[0, "name"]
    assert tree.loc[1, "name"] == "main" and tree.loc[1, "depth"] == 1
    assert (tree["depth"] == 1).sum() == 1  # every stack starts at the loop's frame
    assert int(tree.loc[0, "samples"]) == 960  # the loop's samples (4 phase samples elsewhere)
    assert not tree["name"].isin(["EncodedWine.__init__", "load_wine"]).any()  # set-up left out
    children = tree[tree["parent_id"] == 1].set_index("name")["samples"]
    assert children["_BaseDataLoaderIter.__next__"] == 901
    # The workers run no loop: no tree.
    none, winfo = ap.compute_loop_flame_tree(prof, prof.thread_ids("dataloader"))
    assert none is None and winfo["workers_only"]
