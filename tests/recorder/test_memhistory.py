"""record_memory_history, capacity facts, and snapshot files written by the recorder."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from debugkit import Recorder, open_run
from debugkit.errors import DebugkitWarning, InvalidInputError
from debugkit.io.memsnap import read_snapshot
from debugkit.recorder import memhistory
from debugkit.recorder.memhistory import (
    MemoryHistory,
    cgroup_memory_limit,
    host_total_memory,
    memory_capacity,
    snapshot_id,
    write_snapshot,
)
from tests.memsnap_factory import MiB, leaky_training


def _events(run_dir):
    return [json.loads(line) for line in (run_dir / "ranks" / "0" / "events-000.jsonl").read_text().splitlines()]


def test_on_cpu_it_is_a_documented_no_op_that_says_so(tmp_path):
    model = torch.nn.Linear(4, 2)
    with pytest.warns(DebugkitWarning, match=r"the model is on cpu, not a CUDA device; PyTorch "
                                             r"records allocator history only for CUDA memory"):
        rec = Recorder(tmp_path / "run", model, record_memory_history=True)
    with rec:
        for _ in range(3):
            with rec.step():
                model(torch.randn(2, 4)).sum().backward()
    ev = [e for e in _events(tmp_path / "run") if e["kind"] == "memory_history"]
    assert len(ev) == 1 and ev[0]["enabled"] is False and "not a CUDA device" in ev[0]["message"]
    assert not (tmp_path / "run" / "memory_snapshots").exists()
    assert len(open_run(tmp_path / "run").memory()) == 3


def test_off_by_default_and_silent(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DebugkitWarning)
        Recorder(tmp_path / "run", torch.nn.Linear(2, 2)).close()
    assert not [e for e in _events(tmp_path / "run") if e["kind"] == "memory_history"]


@pytest.mark.parametrize("bad,match", [
    ("yes", r"record_memory_history='yes': expected True, False or a dict"),
    ({"max_entries": 0}, r"record_memory_history=\{'max_entries': 0\}"),
    ({"stacks": "cpp"}, r"record_memory_history=\{'stacks': 'cpp'\}"),
    ({"entries": 5}, r"expected True, False or a dict with keys from \['dump_at_close', 'max_entries', 'stacks'\]"),
])
def test_bad_options_fail_before_anything_is_written(tmp_path, bad, match):
    with pytest.raises(InvalidInputError, match=match):
        Recorder(tmp_path / "run", torch.nn.Linear(2, 2), record_memory_history=bad)
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_rank_meta_records_capacity(tmp_path):
    Recorder(tmp_path / "run", torch.nn.Linear(2, 2)).close()
    meta = json.loads((tmp_path / "run" / "ranks" / "0" / "meta-000.json").read_text())
    assert meta["host_memory_bytes"] == host_total_memory() > 0
    assert meta["host_memory_limit_bytes"] == cgroup_memory_limit()
    assert meta["device_memory_bytes"] is None
    cap = open_run(tmp_path / "run").memory_capacity()
    assert cap["host_capacity_bytes"].iloc[0] == min(
        v for v in (meta["host_memory_bytes"], meta["host_memory_limit_bytes"]) if v)


def test_host_total_memory_matches_proc_meminfo():
    kb = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    assert host_total_memory() == kb * 1024


def _fake_cgroup(tmp_path, proc_lines, files):
    proc = tmp_path / "cgroup"
    proc.write_text("\n".join(proc_lines) + "\n")
    root = tmp_path / "sys"
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(proc), str(root)


@pytest.mark.parametrize("proc_lines,files,expected", [
    (["0::/job"], {"job/memory.max": "8589934592\n"}, 8 << 30),
    (["0::/job"], {"job/memory.max": "max\n"}, None),
    (["4:memory:/docker/abc", "0::/"], {"memory/docker/abc/memory.limit_in_bytes": "4294967296\n"}, 4 << 30),
    (["4:memory:/x"], {"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),  # v1 "unlimited"
    (["0::/a"], {"memory.max": "1073741824", "a/memory.max": "2147483648"}, 1 << 30),  # the smaller
    ([], {}, None),
])
def test_cgroup_memory_limit(tmp_path, proc_lines, files, expected):
    proc, root = _fake_cgroup(tmp_path, proc_lines, files)
    assert cgroup_memory_limit(proc, root) == expected


def test_write_snapshot_files_are_readable_and_unique(tmp_path):
    snap = leaky_training(5).snapshot()
    a = write_snapshot(tmp_path, snap, rank=1, step=7, reason="failure", device="cuda:1",
                       failure="r1-s0000007-exception")
    b = write_snapshot(tmp_path, snap, rank=1, step=7, reason="failure", device="cuda:1")
    assert (a, b) == ("r1-s0000007-failure", "r1-s0000007-failure-2")
    d = tmp_path / "memory_snapshots"
    side = json.loads((d / f"{a}.json").read_text())
    assert side["failure"] == "r1-s0000007-exception" and side["source"] == "recorder"
    assert side["size_bytes"] == (d / f"{a}.pickle").stat().st_size
    assert read_snapshot(d / f"{a}.pickle").segments["total_size"].sum() == leaky_training(5).reserved
    assert snapshot_id(0, None, "close") == "r0-s--------close"


def test_memory_capacity_on_cpu():
    cap = memory_capacity(torch.device("cpu"))
    assert cap["device_memory_bytes"] is None and cap["host_memory_bytes"] > 0


# ---------------------------------------------------------------------------- CUDA path
class _FakeCudaMemory:
    """Stands in for torch.cuda.memory's history API on a machine without CUDA: records the
    calls debugkit makes (with PyTorch's keyword names) and returns builder snapshots."""

    def __init__(self):
        self.calls = []
        self.builder = leaky_training(3)

    def _record_memory_history(self, enabled="all", context="all", stacks="all",
                               max_entries=None, device=None, clear_history=False,
                               compile_context=False, global_record_annotations=False,
                               skip_actions=None):
        self.calls.append({"enabled": enabled, "context": context, "stacks": stacks,
                           "max_entries": max_entries, "device": device})

    def _snapshot(self, device=None, augment_with_fx_traces=False):
        return self.builder.snapshot()


@pytest.fixture
def fake_cuda(monkeypatch):
    fake = _FakeCudaMemory()
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", fake._record_memory_history)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", fake._snapshot)
    observers = []
    monkeypatch.setattr(torch._C, "_cuda_attach_out_of_memory_observer", observers.append, raising=False)
    fake.observers = observers
    return fake


def test_cuda_path_records_history_snapshots_at_oom_failure_and_close(tmp_path, fake_cuda):
    events = []
    dev = torch.device("cuda:0")  # a device object needs no CUDA; nothing is allocated on it
    mh = MemoryHistory({"max_entries": 5000}, dev, tmp_path, 0, lambda kind, **f: events.append((kind, f)))
    assert mh.active
    assert fake_cuda.calls == [{"enabled": "all", "context": "all", "stacks": "python",
                                "max_entries": 5000, "device": dev}]
    assert len(fake_cuda.observers) == 1
    # the allocator's OOM path calls the observer before the stack unwinds
    fake_cuda.builder.oom(64 * MiB, 2 * MiB)
    fake_cuda.observers[0](0, 64 * MiB, 70 * MiB, 2 * MiB)
    sid = mh.dump(12, "failure", failure="r0-s0000012-exception")
    assert sid == "r0-s0000012-oom"
    side = json.loads((tmp_path / "memory_snapshots" / f"{sid}.json").read_text())
    assert side["oom_requested_bytes"] == 64 * MiB and side["oom_device_free_bytes"] == 2 * MiB
    assert side["failure"] == "r0-s0000012-exception" and side["device"] == "cuda:0"
    snap = read_snapshot(tmp_path / "memory_snapshots" / f"{sid}.pickle")
    assert (snap.events["action"] == "oom").sum() == 1
    # a failure that is not an OOM gets a plain snapshot of the moment
    assert mh.dump(13, "failure") == "r0-s0000013-failure"
    mh.close(20)
    assert fake_cuda.calls[-1]["enabled"] is None  # history switched off
    assert not mh.active
    names = sorted(p.name for p in (tmp_path / "memory_snapshots").glob("*.pickle"))
    assert names == ["r0-s0000012-oom.pickle", "r0-s0000013-failure.pickle", "r0-s0000020-close.pickle"]
    assert [k for k, _ in events] == ["memory_history", "memory_snapshot", "memory_snapshot",
                                      "memory_snapshot"]
    # after close the observer (kept by the allocator forever) does nothing
    fake_cuda.observers[0](0, 1, 1, 1)
    assert mh._oom_snapshot is None


def test_an_oom_the_step_survived_is_written_when_the_step_ends(tmp_path, fake_cuda):
    dev = torch.device("cuda:0")
    mh = MemoryHistory(True, dev, tmp_path, 0, lambda *a, **k: None)
    mh.step_ok(4)  # nothing pending: nothing written
    assert not (tmp_path / "memory_snapshots").exists()
    fake_cuda.observers[0](0, 8 * MiB, 70 * MiB, MiB)  # caught by the user's retry
    mh.step_ok(5)
    side = json.loads((tmp_path / "memory_snapshots" / "r0-s0000005-oom.json").read_text())
    assert side["failure"] is None and side["oom_requested_bytes"] == 8 * MiB
    mh.step_ok(6)
    assert len(list((tmp_path / "memory_snapshots").glob("*.pickle"))) == 1
    mh.close(6)


def test_cuda_snapshot_failures_never_break_training(tmp_path, fake_cuda, monkeypatch):
    events = []
    dev = torch.device("cuda:0")
    mh = MemoryHistory(True, dev, tmp_path, 0, lambda kind, **f: events.append((kind, f)))

    def boom(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda.memory, "_snapshot", boom)
    assert mh.dump(3, "failure") is None
    assert events[-1][0] == "capture_error" and "illegal memory access" in events[-1][1]["message"]
    fake_cuda.observers[0](0, 1, 1, 1)  # the observer swallows it too
    mh.close(4)


def test_dump_at_close_can_be_turned_off(tmp_path, fake_cuda):
    dev = torch.device("cuda:0")
    mh = MemoryHistory({"dump_at_close": False}, dev, tmp_path, 0, lambda *a, **k: None)
    mh.close(5)
    assert not (tmp_path / "memory_snapshots").exists()


def test_defaults_are_documented():
    assert memhistory.DEFAULTS == {"max_entries": 100_000, "stacks": "python", "dump_at_close": True}
