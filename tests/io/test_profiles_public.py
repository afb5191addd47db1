"""Real py-spy files other people recorded (tests/data/public/pyspy/): thread ids and
roles as py-spy writes them on macOS and Linux."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from debugkit.io import run_profiles as PS

from ..conftest import console_script

DATA = Path(__file__).resolve().parents[1] / "data" / "public" / "pyspy"
MACOS = DATA / "macos-cs336" / "profile.speedscope.json"


def test_macos_hex_thread_ids_are_parsed_and_main_is_mainthread_only():
    prof = PS.read_sampled(MACOS)
    t = prof.threads.set_index("name")
    assert t.loc["MainThread", "tid"] == 0x1FA08F100
    assert t.loc["Thread-2 (_handle_tasks)", "tid"] == 0x16EF87000
    assert list(prof.threads.loc[prof.threads["role"] == "main", "name"]) == ["MainThread"]
    assert int(t.loc["MainThread", "samples"]) == 3807
    assert sorted(prof.threads["role"]) == ["main", "thread", "thread", "thread"]
    assert prof.total_samples == 10181


def test_macos_profile_summary_main_counts_mainthread_only(tmp_path):
    proc = subprocess.run([console_script(), "profile-summary", str(MACOS), "--threads", "main", "--json"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["samples"] == 3807
    assert s["threads_counted"] == "main"
    # The main thread runs train_bpe.py's module; no worker thread's _bootstrap in it.
    assert s["top_total"][0]["name"] == "<module>" and s["top_total"][0]["samples"] == 3807
    assert all("_bootstrap" not in r["name"] for r in s["top_total"])


def test_macos_main_thread_flame_tree_has_no_worker_frames():
    from debugkit.analysis import profile as ap

    prof = PS.read_sampled(MACOS)
    tree = ap.compute_flame_tree(prof, prof.thread_ids("main"))
    assert int(tree.loc[0, "samples"]) == 3807
    assert not tree["name"].str.contains("_bootstrap").any()


@pytest.mark.parametrize("names, main", [
    # --subprocesses on macOS: pthread ids never equal the pid; the name says which is main.
    (['Process 4242 Thread 0x16DF7B000 "Thread-1"', 'Process 4242 Thread 0x1FA08F100 "MainThread"'],
     "MainThread"),
    # Linux: the main thread's id is the process id.
    (['Process 4242 Thread 4250 "Thread-1"', 'Process 4242 Thread 4242 "MainThread"'], "MainThread"),
    # No names: Linux's rule (tid == pid).
    (['Process 4242 Thread 4250 ""', 'Process 4242 Thread 4242 ""'], 4242),
])
def test_main_thread_by_name_then_by_pid(tmp_path, names, main):
    doc = {"$schema": "https://www.speedscope.app/file-format-schema.json", "exporter": "py-spy@0.4.2",
           "name": "py-spy profile", "activeProfileIndex": None,
           "shared": {"frames": [{"name": "work", "file": "/w/train.py", "line": 3, "col": None}]},
           "profiles": [{"type": "sampled", "name": n, "unit": "seconds", "startValue": 0.0,
                         "endValue": 0.03, "samples": [[0]] * (i + 2), "weights": [0.01] * (i + 2)}
                        for i, n in enumerate(names)]}
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    prof = PS.read_sampled(f)
    m = prof.threads[prof.threads["role"] == "main"].iloc[0]
    assert (m["name"] if isinstance(main, str) else m["tid"]) == main
    assert (prof.threads["role"] == "main").sum() == 1
    assert set(prof.threads["pid"].tolist()) == {4242}
