"""debugkit profile / dump / profile-summary / import pyspy|torch-trace, end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from debugkit.analysis.profile import MSG_COUNT_LAUNCHER, MSG_COUNT_UNEXPLAINED, MSG_COUNT_UNEXPLAINED_EXTRA
from debugkit.cli import main
from debugkit.cli._pyspy import MSG_NO_PROCESS
from debugkit.io.run import open_run

from .._polling import announce_blocked, wait_for
from ..conftest import ROOT, SAMPLE_RUNS, console_script

BUSY = textwrap.dedent('''
    import sys, time
    print("ready", flush=True)  # tests that attach wait for this line, not a guessed time
    def spin(seconds):
        end = time.time() + seconds
        n = 0
        while time.time() < end:
            n += 1
        return n
    spin(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
    sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
''')


@pytest.fixture
def busy(tmp_path):
    f = tmp_path / "busy.py"
    f.write_text(BUSY)
    return f


def test_profile_a_command_keeps_its_exit_status(tmp_path, busy, capsys):
    run = tmp_path / "run"
    rc = main(["profile", str(run), "--name", "spin", "--rate", "200", "--label", "a test",
               "--", sys.executable, str(busy), "1.0", "3"])
    assert rc == 3
    err = capsys.readouterr().err
    assert "stored profile 'spin'" in err
    (entry,) = open_run(run).profiles()
    assert entry["id"] == "spin" and entry["origin"] == "py-spy record" and entry["exit_status"] == 3
    assert entry["command"] == [sys.executable, str(busy), "1.0", "3"]
    assert entry["label"] == "a test" and entry["pyspy"]["idle"] is True and entry["pyspy"]["rate_hz"] == 200
    from debugkit.analysis.profile import compute_function_table
    from debugkit.io.run_profiles import read_entry

    prof = read_entry(entry)
    # only the command's process is left: debugkit's launcher (known by its command line,
    # and by the pid it recorded, for samples taken before py-spy read its command line)
    assert isinstance(entry["launcher_pid"], int) and entry["launcher_pid"] != entry["pid"]
    assert set(prof.threads["pid"]) == {entry["pid"]}
    assert prof.threads["role"].tolist() == ["main"]
    t = compute_function_table(prof, by="function")
    spin = t[t["name"] == "spin"].iloc[0]
    assert spin["self_fraction"] > 0.5
    assert not any("_pyspy_child" in f for f in t["file"])


def test_attach_to_a_running_process(tmp_path, busy):
    proc = subprocess.Popen([sys.executable, str(busy), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        rc = main(["profile", str(tmp_path / "run"), "--pid", str(proc.pid), "--duration", "1", "--rate", "100"])
    finally:
        proc.kill()
        proc.wait(10)
    assert rc == 0
    (entry,) = open_run(tmp_path / "run").profiles()
    assert entry["origin"] == "py-spy record --pid" and entry["pid"] == proc.pid
    # How many samples py-spy manages in its one second depends on the machine's load;
    # what cannot vary: it took some, no more than 100 Hz x 1 s allows (with slack for
    # py-spy's timer), and the manifest counts exactly the samples in the stored file.
    from debugkit.analysis.profile import compute_function_table
    from debugkit.io.run_profiles import read_entry

    prof = read_entry(entry)
    assert 0 < entry["summary"]["samples"] == prof.total_samples <= 4 * 100
    t = compute_function_table(prof, by="function")
    assert t[t["name"] == "spin"].iloc[0]["self_fraction"] > 0.5  # it attached to the spinning process
    assert str(busy) in entry["command"]


HANG = announce_blocked("wait") + textwrap.dedent('''
    import subprocess, sys, threading, time
    from debugkit import Recorder
    import torch
    child = subprocess.Popen([sys.executable, "-c", "import time\\ndef waiting():\\n    time.sleep(120)\\nwaiting()"])
    rec = Recorder(sys.argv[1], torch.nn.Linear(2, 1), flush_every_s=0.2)
    READY_EXTRA = [child.pid]  # printed after "ready" once the main thread waits
    try:
        threading.Event().wait(120)  # the "hang"
    finally:
        child.kill()
''')


def _heartbeat_refreshed(run):
    """Wait until the run's writer has rewritten its heartbeat once: the run is live."""
    first = wait_for(lambda: _heartbeat_time(run), f"a heartbeat in {run}")
    wait_for(lambda: (_heartbeat_time(run) or first) != first, f"a second heartbeat in {run}")


def _heartbeat_time(run):
    try:
        return json.loads((run / "ranks" / "0" / "heartbeat.json").read_text())["time"]
    except (OSError, ValueError, KeyError):
        return None


def test_dump_a_hung_run_finds_its_run_by_heartbeat(tmp_path, monkeypatch, capsys):
    roots = tmp_path / "roots"
    roots.mkdir()
    run = roots / "hung"
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(script), str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline().split()
        assert line[0] == "ready", line
        _heartbeat_refreshed(run)
        monkeypatch.setenv("DEBUGKIT_ROOTS", str(roots))
        rc = main(["dump", "--pid", str(proc.pid)])
    finally:
        proc.kill()
        proc.wait(10)
    assert rc == 0
    out, err = capsys.readouterr()
    assert "Event.wait (threading.py:" in out  # paths shortened as py-spy does
    assert "waiting (<string>:3)" in out  # the child process was dumped too
    assert f"stored stack dump 'dump-{proc.pid}-" in err
    (entry,) = open_run(run).profiles()
    assert entry["format"] == "pyspy-dump" and entry["origin"] == "py-spy dump"
    from debugkit.io.run_profiles import read_entry

    d = read_entry(entry)
    assert {proc.pid, int(line[1])} <= set(d.threads["pid"])  # (the Recorder's pip check may be there too)
    main_thread = d.threads[(d.threads["pid"] == proc.pid) & (d.threads["name"] == "MainThread")].iloc[0]
    assert main_thread["waiting_in"] == "lock" and not main_thread["active"]


def test_dump_without_a_run_only_prints(tmp_path, monkeypatch, capsys, busy):
    proc = subprocess.Popen([sys.executable, str(busy), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path))
        assert main(["dump", "--pid", str(proc.pid), "--json"]) == 0
    finally:
        proc.kill()
        proc.wait(10)
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["format"] == "debugkit-stacks" and doc["processes"][0]["pid"] == proc.pid
    assert "not stored: no run in the served folders records this process" in err


# ---------------------------------------------------------------------------- py-spy refused
FAKE = {
    "sudo": "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'",
    "docker": "Permission Denied\n\nIt looks like you are running in a docker container. Please make sure you "
              "started your container with the SYS_PTRACE capability.",
    "eperm": "Error: Operation not permitted (os error 1)",
}


@pytest.fixture
def fake_pyspy(tmp_path, monkeypatch):
    def make(kind):
        bindir = tmp_path / f"bin-{kind}"
        bindir.mkdir()
        exe = bindir / "py-spy"
        exe.write_text(f"#!{sys.executable}\nimport sys\n"
                       f"if '--version' in sys.argv:\n    print('py-spy 0.4.3'); sys.exit(0)\n"
                       f"sys.stderr.write({FAKE[kind]!r} + '\\n')\nsys.exit(1)\n")
        exe.chmod(0o755)
        # $DEBUGKIT_PY_SPY: the one way to pick a py-spy over the one installed next to the
        # interpreter (which is found before PATH, for an unactivated venv)
        monkeypatch.setenv("DEBUGKIT_PY_SPY", str(exe))
        return exe
    return make


@pytest.mark.parametrize("kind", ["sudo", "docker", "eperm"])
def test_ptrace_refused_says_what_to_do(tmp_path, fake_pyspy, busy, capsys, kind):
    fake_pyspy(kind)
    run = tmp_path / "run"
    rc = main(["profile", str(run), "--", sys.executable, str(busy), "0.1"])
    err = capsys.readouterr().err
    assert rc == 2
    line = [ln for ln in err.splitlines() if ln.startswith("debugkit: error:")]
    assert len(line) == 1
    msg = line[0]
    assert "ptrace access refused" in msg
    assert "run debugkit as root (sudo)" in msg
    assert "--cap-add SYS_PTRACE" in msg
    assert "kernel.yama.ptrace_scope=0" in msg
    assert "Traceback" not in err
    assert not (run / "manifest.json").exists()


def test_ptrace_refused_for_attach_and_dump(tmp_path, fake_pyspy, capsys):
    fake_pyspy("sudo")
    me = os.getpid()
    assert main(["profile", str(tmp_path / "r"), "--pid", str(me), "--duration", "1"]) == 2
    assert main(["dump", "--pid", str(me), str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("--cap-add SYS_PTRACE") == 2 and f"process {me}" in err


def test_missing_pyspy(tmp_path, monkeypatch, capsys):
    bindir = tmp_path / "empty"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))  # nor next to the interpreter
    monkeypatch.delenv("DEBUGKIT_PY_SPY", raising=False)
    assert main(["profile", str(tmp_path / "r"), "--", "python", "x.py"]) == 2
    assert "needs the optional package 'py-spy'; install it with: pip install py-spy" in capsys.readouterr().err


def test_pyspy_next_to_the_interpreter_of_an_unactivated_venv(tmp_path, busy):
    """A venv run by its full path (not activated): py-spy was installed into it, next to its
    python, and is not on PATH. `debugkit profile` finds it there instead of saying
    "install py-spy"."""
    assert (Path(sys.executable).parent / "py-spy").is_file(), "py-spy is a test dependency"
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DEBUGKIT_PY_SPY"}
    env.update(PATH=str(empty), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "debugkit", "profile", str(tmp_path / "run"), "--name", "spin",
                        "--", sys.executable, str(busy), "0.5"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert "install it with: pip install py-spy" not in p.stderr
    assert p.returncode == 0, p.stderr
    assert "stored profile 'spin'" in p.stderr
    assert [e["id"] for e in open_run(tmp_path / "run").profiles()] == ["spin"]


@pytest.mark.parametrize("argv, match", [
    (["profile", "R"], "give a command after `--`"),
    (["profile", "R", "--pid", "1", "--", "python", "x.py"], "either --pid PID or a command"),
    (["profile", "R", "--no-subprocesses", "--", "python", "x.py"], "--no-subprocesses only applies with --pid"),
    (["profile", "R", "--bogus", "--", "python", "x.py"], "unexpected '--bogus'"),
    (["profile", "R", "--pid", "999999999"], MSG_NO_PROCESS.format(pid=999999999)),
    (["profile", "R", "--rate", "0", "--", "python", "x.py"], "--rate 0: expected 1..10000"),
    (["profile", "R", "--duration", "-1", "--pid", "1"], "--duration -1.0: expected a positive"),
    (["dump", "--pid", "999999999"], MSG_NO_PROCESS.format(pid=999999999)),
    (["profile-summary", "nothing-here.json"], "nothing-here.json: no such file"),
    (["profile-summary", str(SAMPLE_RUNS / "digits-profiled"), "--profile", "nope"],
     r"no profile 'nope' \(have: train, train-no-workers, torch-trace\)"),
    (["profile-summary", str(SAMPLE_RUNS / "digits-mlp")], "the run holds no profiles"),
    (["profile-summary", str(SAMPLE_RUNS / "digits-profiled"), "--top", "0"], "--top 0: expected a positive"),
])
def test_bad_arguments(tmp_path, monkeypatch, capsys, argv, match):
    import re

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(match, err), err


# ---------------------------------------------------------------------------- summary + import
def test_profile_summary_json_of_the_sample(capsys):
    assert main(["profile-summary", str(SAMPLE_RUNS / "digits-profiled"), "--profile", "train",
                 "--json", "--top", "5"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["format"] == "speedscope" and s["samples"] == 46959 and s["profile"] == "train"
    assert len(s["threads"]) == 24
    assert {t["role"] for t in s["threads"]} == {"main", "thread", "dataloader", "process"}
    assert len(s["top_self"]) == 5 and len(s["top_total"]) == 5
    for r in s["top_self"] + s["top_total"]:
        assert set(r) == {"name", "file", "line", "samples", "fraction"}
    assert s["top_self"][0]["samples"] >= s["top_self"][1]["samples"]
    assert abs(s["top_self"][0]["fraction"] - s["top_self"][0]["samples"] / 46959) < 1e-6


@pytest.mark.parametrize("profile, reported, shown, launcher", [
    ("train", 59614, 46959, 12655), ("train-no-workers", 26008, 14992, 11016)])
def test_pyspys_sample_count_is_explained(tmp_path, profile, reported, shown, launcher):
    """py-spy's own "Samples: N" (kept in the manifest) against the count shown: the
    difference is exactly debugkit's launcher process, left out. Through the console
    script, from another folder, with a relative path."""
    work = tmp_path / "work"
    shutil.copytree(SAMPLE_RUNS / "digits-profiled", work / "runs" / "p")
    out = subprocess.run([console_script("debugkit"), "profile-summary", "runs/p", "--profile",
                          profile, "--json", "--top", "1"], cwd=work, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["samples"] == shown
    c = s["sample_count"]
    assert c == {"reported": reported, "in_file": reported, "launcher": launcher, "shown": shown,
                 "unexplained": 0, "note": c["note"]}
    assert c["note"] == MSG_COUNT_LAUNCHER.format(reported=reported, shown=shown, launcher=launcher)
    text = subprocess.run([console_script("debugkit"), "profile-summary", "runs/p", "--profile",
                           profile, "--top", "1"], cwd=work, capture_output=True, text=True, timeout=300)
    assert f"{launcher:,} of debugkit's own launcher process" in text.stdout


def test_sample_count_differences_are_named():
    from debugkit.analysis.profile import explain_sample_count
    from debugkit.io.run_profiles import read_any

    prof = read_any(SAMPLE_RUNS / "digits-profiled/profiles/train-no-workers.speedscope.json.gz")
    assert explain_sample_count(None, prof) is None  # an imported file: py-spy's count unknown
    c = explain_sample_count(26010, prof, errors=2)
    assert c["unexplained"] == 2 and MSG_COUNT_UNEXPLAINED.format(unexplained=2, errors=2) in c["note"]
    c = explain_sample_count(26000, prof)
    assert c["unexplained"] == -8 and MSG_COUNT_UNEXPLAINED_EXTRA.format(unexplained=8) in c["note"]


def test_an_imported_file_has_no_pyspy_count(capsys):
    import gzip
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "p.json"
        f.write_bytes(gzip.decompress((SAMPLE_RUNS / "digits-profiled/profiles/train.speedscope.json.gz").read_bytes()))
        assert main(["profile-summary", str(f), "--json", "--top", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["sample_count"] is None


def test_profile_summary_json_of_a_chrome_trace(tmp_path, capsys):
    import gzip

    f = tmp_path / "t.json"
    f.write_bytes(gzip.decompress((SAMPLE_RUNS / "digits-profiled/profiles/torch-trace.trace.json.gz").read_bytes()))
    assert main(["profile-summary", str(f), "--json", "--top", "3"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["format"] == "chrome-trace" and s["events"] == 676 and "samples" not in s
    assert len(s["top_self"]) == 3 and s["top_self"][0]["self_cpu_us"] >= s["top_self"][1]["self_cpu_us"]
    assert s["gpu"]["idle_fraction"] is None


def test_profile_summary_threads_filter(capsys):
    assert main(["profile-summary", str(SAMPLE_RUNS / "digits-profiled"), "--profile", "train",
                 "--threads", "main", "--json", "--top", "1"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["samples"] == 12307 and s["threads_counted"] == "main"
    assert s["top_self"][0]["name"] == "_engine_run_backward"
    assert main(["profile-summary", str(SAMPLE_RUNS / "digits-profiled"), "--profile", "train-no-workers",
                 "--threads", "dataloader"]) == 2
    assert "--threads dataloader: the profile has no such threads" in capsys.readouterr().err


def test_profile_summary_text(capsys):
    assert main(["profile-summary", str(SAMPLE_RUNS / "digits-profiled"), "--profile", "train-no-workers",
                 "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("speedscope: 14,992 samples") and "top self:" in out and "training loop (" in out


def test_import_pyspy_and_torch_trace(tmp_path, capsys):
    import gzip

    run = tmp_path / "run"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", run)
    ss = tmp_path / "p.json"
    ss.write_bytes(gzip.decompress((SAMPLE_RUNS / "digits-profiled/profiles/train.speedscope.json.gz").read_bytes()))
    assert main(["import", "pyspy", str(ss), str(run), "--label", "copied"]) == 0
    tb = tmp_path / "tb"
    tb.mkdir()
    shutil.copy(SAMPLE_RUNS / "digits-profiled/profiles/torch-trace.trace.json.gz",
                tb / "host_123.1700000000.pt.trace.json.gz")
    assert main(["import", "torch-trace", str(tb), str(run)]) == 0
    got = [(p["id"], p["format"], p.get("label")) for p in open_run(run).profiles()]
    assert got[0][1:] == ("speedscope", "copied") and got[1] == ("trace-host_123", "chrome-trace", None)
    # the wrong importer for the file says which one to use
    assert main(["import", "pyspy", str(tb / "host_123.1700000000.pt.trace.json.gz"), str(run)]) == 2
    assert "use `debugkit import torch-trace`" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X"')
    before = (run / "manifest.json").read_bytes()
    assert main(["import", "torch-trace", str(bad), str(run)]) == 2
    assert "ends early" in capsys.readouterr().err
    assert (run / "manifest.json").read_bytes() == before
