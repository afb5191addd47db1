"""Reading py-spy files: exact counts checked against py-spy's own output, and bad files."""

from __future__ import annotations

import collections
import gzip
import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from debugkit.errors import ProfileFileError
from debugkit.io import collapsed as C
from debugkit.io import profiles as P
from debugkit.io import run_profiles as PS
from debugkit.io import speedscope as SS
from debugkit.io import stackdump as SD

from ..conftest import console_script

TARGET = textwrap.dedent('''
    import threading, time

    def leaf_work(n):
        s = 0
        for i in range(n):
            s += i * i
        return s

    def middle(n):
        return leaf_work(n) + leaf_work(n // 2)

    def helper():
        end = time.time() + 1.2
        while time.time() < end:
            middle(20000)

    t = threading.Thread(target=helper, name="helper-thread")
    t.start()
    end = time.time() + 1.2
    while time.time() < end:
        middle(30000)
    t.join()
''')


def record(tmp_path, fmt: str, extra=()):
    script = tmp_path / "target.py"
    script.write_text(TARGET)
    out = tmp_path / f"p.{fmt}"
    proc = subprocess.run([console_script("py-spy"), "record", "--format", fmt, "--rate", "200", "--output", str(out),
                           *extra, "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reported = int(re.search(r"Samples: (\d+)", proc.stdout + proc.stderr).group(1))
    return out, reported


@pytest.fixture(scope="module")
def speedscope_file(tmp_path_factory):
    return record(tmp_path_factory.mktemp("ss"), "speedscope")


@pytest.fixture(scope="module")
def raw_file(tmp_path_factory):
    return record(tmp_path_factory.mktemp("raw"), "raw", ["--threads"])


def self_counts(prof) -> dict:
    """(name, file, line) -> samples where that frame is the leaf."""
    fr = prof.frames.set_index("frame_id")
    out = collections.Counter()
    c = prof.counts
    for sid, n in zip(c["stack_id"].tolist(), c["samples"].tolist()):
        st = prof.stack(sid)
        if len(st):
            f = fr.loc[int(st[-1])]
            out[(f["name"], f["file"], None if f["line"] is None or str(f["line"]) == "<NA>" else int(f["line"]))] += n
    return out


def test_speedscope_counts_equal_pyspys_file(speedscope_file):
    path, reported = speedscope_file
    prof = SS.read_speedscope(path)
    doc = json.loads(path.read_text())
    frames = doc["shared"]["frames"]
    expected = collections.Counter()
    n = 0
    per_thread = []
    for p in doc["profiles"]:
        per_thread.append(len(p["samples"]))
        for s in p["samples"]:
            n += 1
            if s:
                f = frames[s[-1]]
                expected[(f["name"], f["file"], f["line"])] += 1
    assert prof.total_samples == n == reported
    assert self_counts(prof) == expected
    assert sorted(prof.threads["samples"].tolist()) == sorted(per_thread)
    # (py-spy sometimes cannot read a thread's name at sampling time, so only roles here)
    assert sorted(prof.threads["role"]) == ["main", "thread"]
    assert prof.threads.loc[prof.threads["role"] == "main", "name"].tolist() == ["MainThread"]
    assert prof.meta["rate_hz"] == 200.0 and prof.meta["unit"] == "seconds"
    # every sample's weight is 1/200 s
    assert prof.counts["weight_s"].sum() == pytest.approx(n / 200)


def test_speedscope_total_counts_count_recursion_once(speedscope_file):
    from debugkit.analysis.profile import compute_function_table

    path, _ = speedscope_file
    prof = SS.read_speedscope(path)
    doc = json.loads(path.read_text())
    frames = doc["shared"]["frames"]
    total = collections.Counter()
    for p in doc["profiles"]:
        for s in p["samples"]:
            for key in {(frames[i]["name"], frames[i]["file"], frames[i]["line"]) for i in s}:
                total[key] += 1
    t = compute_function_table(prof, by="frame")
    got = {(r.name, r.file, int(r.line)): r.total_samples for r in t.itertuples()}
    assert got == dict(total)


def test_raw_counts_equal_pyspys_file(raw_file):
    path, reported = raw_file
    prof = C.read_collapsed(path)
    expected = collections.Counter()
    n = 0
    threads = set()
    for line in path.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        parts = stack.split(";")
        threads.add(re.match(r"thread \((\d+)\)", parts[0]).group(1))
        real = [p for p in parts if not p.startswith("thread (")]
        n += int(count)
        if real:
            name, where = real[-1].rsplit(" (", 1)
            file, ln = where[:-1].rsplit(":", 1)
            expected[(name, file, int(ln))] += int(count)
    assert prof.total_samples == n == reported
    assert self_counts(prof) == expected
    assert sorted(str(t) for t in prof.threads["tid"].tolist()) == sorted(threads)
    assert sorted(prof.threads["role"]) == ["main", "thread"]


def test_gzip_is_read_transparently(speedscope_file, tmp_path):
    path, reported = speedscope_file
    gz = tmp_path / "p.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert P.sniff_format(gz) == "speedscope"
    assert PS.read_sampled(gz).total_samples == reported


def test_pretty_printed_speedscope_reads_the_same(speedscope_file, tmp_path):
    path, reported = speedscope_file
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(json.loads(path.read_text()), indent=3))
    a, b = SS.read_speedscope(path), SS.read_speedscope(pretty)
    assert self_counts(a) == self_counts(b)
    assert b.total_samples == reported


# ---------------------------------------------------------------------------- py-spy pseudo-frames
def test_raw_process_and_thread_frames_become_thread_facts(tmp_path):
    f = tmp_path / "sub.txt"
    f.write_text(
        'process 10:"python train.py --tag a;b \\"x\\"";thread (10): MainThread;main (train.py:5);step (train.py:9) 7\n'
        'process 10:"python train.py --tag a;b \\"x\\"";thread (10);main (train.py:5) 2\n'
        'process 10:"python train.py --tag a;b \\"x\\"";process 11:"python train.py";thread (11): MainThread;'
        '_worker_loop (torch/utils/data/_utils/worker.py:300);fetch (torch/utils/data/_utils/fetch.py:52) 5\n'
        'process 10:"python train.py --tag a;b \\"x\\"";thread (12): pin;run (threading.py:982) 1\n')
    prof = C.read_collapsed(f)
    t = prof.threads.set_index("tid")
    assert t.loc[10, "role"] == "main" and t.loc[10, "samples"] == 9
    assert t.loc[10, "process"] == 'python train.py --tag a;b \\"x\\"'
    assert t.loc[11, "role"] == "dataloader" and t.loc[11, "pid"] == 11
    assert t.loc[12, "role"] == "thread" and t.loc[12, "name"] == "pin"
    assert set(prof.frames["name"]) == {"main", "step", "_worker_loop", "fetch", "run"}


@pytest.mark.parametrize("where", ["cli", "recorder"])  # where it lives; where older profiles name it
def test_launcher_threads_are_dropped(tmp_path, where):
    f = tmp_path / "l.txt"
    f.write_text(
        f'process 5:"python /x/debugkit/{where}/_pyspy_child.py /tmp/s -- python t.py";thread (5): MainThread;'
        'main (_pyspy_child.py:30);wait (subprocess.py:1264) 40\n'
        f'process 5:"python /x/debugkit/{where}/_pyspy_child.py /tmp/s -- python t.py";process 6:"python t.py";'
        'thread (6): MainThread;work (t.py:3) 12\n')
    prof = C.read_collapsed(f)
    assert prof.total_samples == 12
    assert prof.threads["pid"].tolist() == [6] and prof.threads["role"].tolist() == ["main"]


# ---------------------------------------------------------------------------- bad files
def _ss(profiles, frames=None):
    return json.dumps({"$schema": "https://www.speedscope.app/file-format-schema.json", "profiles": profiles,
                       "shared": {"frames": frames if frames is not None else [{"name": "f"}]}})


GOOD = {"type": "sampled", "name": "Thread 1", "unit": "seconds", "startValue": 0, "endValue": 0.02,
        "samples": [[0], [0]], "weights": [0.01, 0.01]}


@pytest.mark.parametrize("content, match", [
    ("", "the file is empty"),
    ("   \n", "the file is empty"),
    (_ss([GOOD])[:-2], r"the JSON ends early at byte \d+ \(line 1\) with 2 bracket\(s\) still open"),
    ('{"$schema": "https://www.speedscope.app/file-format-schema.json", "profiles": [{"name": "unterm',
     "ends early .* inside a string"),
    ('{"$schema": "https://www.speedscope.app/file-format-schema.json", "x": 1}', "no 'profiles' array"),
    (_ss([{**GOOD, "samples": [[0], [3]]}]), r"profiles\[0\]\.samples: frame index 3 outside 0\.\.0"),
    (_ss([{**GOOD, "samples": [[0], ["a"]]}]), r"frame index 'a' is not an integer"),
    (_ss([{**GOOD, "weights": [0.01]}]), r"profiles\[0\]: 2 samples but 1 weights"),
    (_ss([{**GOOD, "samples": [0, 0]}]), r"expected a list of lists of frame indices"),
    (_ss([{**GOOD, "type": "evented"}]), r"profiles\[0\] is an 'evented' speedscope profile"),
    (_ss([{**GOOD, "type": "weird"}]), r"profiles\[0\]\.type: 'weird', expected 'sampled'"),
    (_ss([{**GOOD, "samples": [], "weights": []}]), "the profile holds no samples"),
    (_ss([]), "the profile holds no samples"),
    (_ss([GOOD], frames=[{"file": "x.py"}]), r"shared\.frames\[0\]: expected an object with a string 'name'"),
    ('{"$schema": "https://www.speedscope.app/file-format-schema.json", "profiles": [], "shared": 3}',
     r"shared\.frames: missing or not a list"),
])
def test_bad_speedscope(tmp_path, content, match):
    f = tmp_path / "bad.json"
    f.write_text(content)
    before = f.read_bytes()
    with pytest.raises(ProfileFileError, match=match):
        SS.read_speedscope(f)
    assert f.read_bytes() == before  # never changed


@pytest.mark.parametrize("content, match", [
    ("main (a.py:1);f (a.py:2) 3\nnot a stack line\n", r"line 2: expected 'frame;frame;\.\.\. COUNT'"),
    ("main (a.py:1) x\n", r"line 1: expected"),
    ("\n\n", "the file is empty"),
    ("main (a.py:1) 0\n", "the profile holds no samples"),
])
def test_bad_raw(tmp_path, content, match):
    f = tmp_path / "bad.txt"
    f.write_text(content)
    with pytest.raises(ProfileFileError, match=match):
        C.read_collapsed(f)


@pytest.mark.parametrize("content, match", [
    (b"hello world", "not a profile debugkit can read"),
    (b'{"foo": 1}', "not a profile debugkit can read"),
    (b"[1, 2, 3]", "not a profile debugkit can read"),
    (b"", "the file is empty"),
])
def test_sniff_refuses_other_files(tmp_path, content, match):
    f = tmp_path / "x.bin"
    f.write_bytes(content)
    with pytest.raises(ProfileFileError, match=match):
        P.sniff_format(f)


def test_truncated_gzip(tmp_path, speedscope_file):
    path, _ = speedscope_file
    f = tmp_path / "cut.json.gz"
    f.write_bytes(gzip.compress(path.read_bytes())[:200])
    with pytest.raises(ProfileFileError, match="ends early"):
        PS.read_sampled(f)


# ---------------------------------------------------------------------------- stack dumps
def test_pyspy_dump_json_of_a_hung_process(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent('''
        import threading, time
        ev = threading.Event()
        threading.Thread(target=ev.wait, name="waiter", daemon=True).start()
        def deep(n):
            if n == 0:
                time.sleep(60)
            deep(n - 1)
        print("ready", flush=True)
        deep(3)
    '''))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        out = subprocess.run([console_script("py-spy"), "dump", "--json", "--pid", str(proc.pid)],
                             capture_output=True, text=True, timeout=60)
    finally:
        proc.kill()
        proc.wait(10)
    f = tmp_path / "dump.json"
    f.write_text(out.stdout)
    assert P.sniff_format(f) == "pyspy-dump"
    d = SD.read_stack_dump(f)
    t = d.threads.set_index("name")
    assert t.loc["MainThread", "depth"] == 5  # deep(0..3) + <module>
    # time.sleep is C code: no Python frame says what the thread waits on
    assert t.loc["MainThread", "waiting_in"] == ""
    assert t.loc["waiter", "waiting_in"] == "lock"
    assert not d.threads["active"].any()
    main = d.frames[d.frames["thread"] == t.loc["MainThread", "thread"]]
    assert main["name"].tolist() == ["deep"] * 4 + ["<module>"]
    assert "deep (" in SD.stack_dump_text(d)


@pytest.mark.parametrize("content, match", [
    ('[{"thread_id": 1}]', r"threads\[0\]: expected an object with 'frames'"),
    ('{"format": "debugkit-stacks", "processes": 3}', "processes: not a list"),
    ('[{"thread_id": 1, "frames": [', "ends early"),
    ("[]", "holds no threads"),
])
def test_bad_stack_dump(tmp_path, content, match):
    f = tmp_path / "d.json"
    f.write_text(content)
    with pytest.raises(ProfileFileError, match=match):
        SD.read_stack_dump(f)


def test_classify_wait_prefers_the_innermost_meaningful_frame():
    assert SD.classify_wait([("wait", "torch/distributed/distributed_c10d.py"), ("train", "t.py")]) == "collective"
    assert SD.classify_wait([("Condition.wait", "threading.py"), ("_get_data", "torch/utils/data/dataloader.py")]) \
        == "dataloader"
    assert SD.classify_wait([("compute", "t.py")]) == ""


def test_stack_arrays_are_consistent(speedscope_file):
    path, _ = speedscope_file
    prof = SS.read_speedscope(path)
    assert prof.stack_offsets[0] == 0 and prof.stack_offsets[-1] == len(prof.stack_frames)
    assert np.all(np.diff(prof.stack_offsets) >= 0)
    assert prof.stack_frames.max() < len(prof.frames)


# ---------------------------------------------------------------------------- compact fast path
def _both_ways(path, monkeypatch):
    """The profile read by the key-search fast path and by the full structural scan."""
    fast = SS.read_speedscope(path)
    with monkeypatch.context() as m:
        m.setattr(SS, "_locate_compact", lambda data: None)
        scanned = SS.read_speedscope(path)
    return fast, scanned


def test_pyspys_compact_file_takes_the_fast_path_and_reads_the_same(speedscope_file, monkeypatch):
    path, reported = speedscope_file
    data = P.read_bytes(path)
    found = SS._locate_compact(data)
    assert found is not None and SS._compact_places(json.loads(found.skeleton), found, data) is not None
    fast, scanned = _both_ways(path, monkeypatch)
    assert self_counts(fast) == self_counts(scanned) and fast.total_samples == reported


@pytest.mark.parametrize("doc", [
    # a frame name holding the key and brackets (escaped quotes inside the string)
    {"profiles": [{**GOOD, "samples": [[0, 1], [1], [], [0]], "weights": [1, 2, 3, 4]}],
     "shared": {"frames": [{"name": 'x"samples":[[1]]'}, {"name": "]],[[", "file": "a.py", "line": 3}]}},
    # two profiles, the second pretty-printed by hand: must fall back, weights honoured
    "MIXED",
    # a samples array of one sample, and an empty one
    {"profiles": [{**GOOD, "samples": [[0]], "weights": [5]}, {**GOOD, "samples": [], "weights": []}],
     "shared": {"frames": [{"name": "f"}]}},
])
def test_fast_path_equals_the_scan_on_awkward_files(tmp_path, monkeypatch, doc):
    p = tmp_path / "s.json"
    if doc == "MIXED":
        one = json.dumps({**GOOD, "samples": [[0], [0, 1]], "weights": [1, 1]}, separators=(",", ":"))
        two = '{"type":"sampled","name":"Thread 2","unit":"seconds","startValue":0,"endValue":1,' \
              '"samples": [[1], [1]],"weights":[2,3]}'
        p.write_text('{"profiles":[' + one + "," + two + '],"shared":{"frames":[{"name":"f"},{"name":"g"}]}}')
    else:
        p.write_text(json.dumps(doc, separators=(",", ":")))
    fast, scanned = _both_ways(p, monkeypatch)
    assert self_counts(fast) == self_counts(scanned)
    assert fast.total_samples == scanned.total_samples
    assert fast.counts["weight_s"].sum() == pytest.approx(scanned.counts["weight_s"].sum())


@pytest.mark.parametrize("samples, match", [
    ('[[0],[7]]', "frame index 7 outside 0..0"),
    ('[[0],2,[0]]', "expected a list of lists of frame indices|unreadable stack"),
    ('[[0],[[0]]]', r"frame index \[0\] is not an integer"),
    ('[[0],[0.5]]', "is not an integer"),
])
def test_fast_path_keeps_the_errors(tmp_path, samples, match):
    p = tmp_path / "s.json"
    p.write_text('{"profiles":[{"type":"sampled","name":"T","unit":"none","startValue":0,"endValue":1,'
                 f'"samples":{samples}}}],"shared":{{"frames":[{{"name":"f"}}]}}}}')
    with pytest.raises(ProfileFileError, match=match):
        SS.read_speedscope(p)
