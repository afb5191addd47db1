"""Reading memory snapshots, adding them to runs, and the runs' memory capacity."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shlex
import shutil

import pytest

from debugkit import open_run
from debugkit.errors import InvalidInputError, RunDirError
from debugkit.io.memsnap import parse_snapshot, read_snapshot, summarize
from debugkit.io.run_memsnaps import import_snapshot, list_snapshots
from debugkit.io.safepickle import UnsafePickleError
from tests.conftest import SAMPLE_RUNS
from tests.memsnap_factory import MiB, SnapshotBuilder, leaky_training


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(SAMPLE_RUNS / "memory-leak", d)
    return d


def test_parse_current_format_counts(tmp_path):
    b = leaky_training(10)
    p = tmp_path / "s.pickle"
    b.dump(p)
    snap = read_snapshot(p)
    assert snap.format == "trace"
    s = summarize(snap)
    assert s == {"format": "trace", "devices": [0], "segments": len(b.segments),
                 "blocks": sum(len(x.blocks) for x in b.segments), "reserved_bytes": b.reserved,
                 "allocated_bytes": int(snap.blocks.loc[snap.blocks["state"] == "active_allocated", "size"].sum()),
                 "trace_events": len(b.trace), "oom_events": 0, "stacks": 4}
    assert snap.segments["pool_id"].tolist() == ["0,0"] * len(b.segments)
    assert snap.allocator_settings["expandable_segments"] is False
    assert snap.events["time_us"].notna().all()
    assert snap.events["action"].astype(str).tolist() == [e["action"] for e in b.trace]
    assert snap.events["addr"].tolist()[:2] == [b.trace[0]["addr"], b.trace[1]["addr"]]


def test_parse_legacy_format():
    b = leaky_training(5, legacy=True)
    snap = parse_snapshot(b.snapshot())
    assert snap.format == "legacy"
    assert snap.events["time_us"].isna().all()
    alive = snap.blocks[snap.blocks["state"] == "active_allocated"]
    # addresses rebuilt from segment start + sizes, stacks from history[0]
    assert set(alive["address"]) == set(b.live)
    assert (alive["stack_id"] >= 0).all()


def test_parse_newest_keys_are_accepted():
    b = SnapshotBuilder(newest=True)
    b.alloc(MiB, b.frames(("/x/train.py", 1, "f")))
    snap = parse_snapshot(b.snapshot())
    assert len(snap.events) == 2


def test_a_bare_list_of_segments_is_read():
    segs = leaky_training(3).snapshot()["segments"]  # torch.cuda.memory_snapshot() returns this
    snap = parse_snapshot(segs)
    assert snap.format == "segments" and not snap.has_trace and len(snap.segments) == len(segs)


def test_shared_frame_lists_are_interned_once():
    b = leaky_training(20)
    snap = parse_snapshot(pickle.loads(pickle.dumps(b.snapshot())))
    assert len(snap.stacks) == 4


def test_oom_entries_and_awaiting_free_alias():
    b = leaky_training(2)
    b.oom(64 * MiB, 3 * MiB)
    d = b.snapshot()
    d["segments"][0]["blocks"][0]["state"] = "active_awaiting_free"  # as torch's docstring spells it
    snap = parse_snapshot(d)
    assert snap.blocks["state"].astype(str).iloc[0] == "active_pending_free"
    oom = snap.events[snap.events["action"] == "oom"]
    assert oom["device_free"].tolist() == [3 * MiB]
    assert oom["addr"].isna().all()


def _bad(mutate):
    d = leaky_training(2).snapshot()
    mutate(d)
    return d


@pytest.mark.parametrize("data,match", [
    ("hello", r"not a PyTorch memory snapshot: expected a dict with 'segments'.*got str"),
    ({"foo": 1}, r"not a PyTorch memory snapshot.*keys \['foo'\]"),
    ({"segments": {}}, r"segments: expected a list"),
    (_bad(lambda d: d["segments"][1].pop("address")), r"segments\[1\]: missing 'address'"),
    (_bad(lambda d: d["segments"][0].update(total_size="big")), r"segments\[0\]: 'total_size' must be an integer"),
    (_bad(lambda d: d["segments"][0]["blocks"][0].pop("size")), r"segments\[0\]\.blocks\[0\]: missing 'size'"),
    (_bad(lambda d: d["segments"][0]["blocks"][0].update(state="weird")), r"blocks\[0\]: state 'weird'"),
    (_bad(lambda d: d["segments"][0].update(blocks=None)), r"segments\[0\]\.blocks: expected a list"),
    (_bad(lambda d: d["segments"][0].update(address=2**70)), r"'address' = \d+ is out of the 64-bit range"),
    (_bad(lambda d: d["device_traces"][0][3].pop("size")), r"device_traces\[0\]\[3\]: missing 'size'"),
    (_bad(lambda d: d["device_traces"][0][2].update(action="teleport")), r"device_traces\[0\]\[2\]: action 'teleport'"),
    (_bad(lambda d: d["device_traces"][0][1].update(addr="0x10")), r"device_traces\[0\]\[1\]: 'addr' must be a 64-bit integer"),
    (_bad(lambda d: d["device_traces"][0][1].update(frames=[{"name": "f"}])), r"device_traces\[0\]\[1\]\.frames: each frame needs"),
    (_bad(lambda d: d.update(device_traces={"0": []})), r"device_traces: expected a list"),
    (_bad(lambda d: d["device_traces"].__setitem__(0, "x")), r"device_traces\[0\]: expected a list of events"),
])
def test_malformed_snapshots_say_what_and_where(data, match):
    with pytest.raises(InvalidInputError, match=match):
        parse_snapshot(data, where="snap.pickle")


def test_read_snapshot_refuses_a_malicious_file_without_running_it(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {shlex.quote(str(marker))}",))

    p = tmp_path / "evil.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [[Evil()]]}))
    with pytest.raises(UnsafePickleError, match="refused to load"):
        read_snapshot(p)
    assert not marker.exists()


def test_read_snapshot_missing_file(tmp_path):
    with pytest.raises(InvalidInputError, match=r"nope\.pickle: no such file"):
        read_snapshot(tmp_path / "nope.pickle")


# ---------------------------------------------------------------------------- import
def _digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_import_copies_the_file_unchanged_and_writes_a_sidecar(tmp_path, run_dir):
    src = tmp_path / "oom snapshot.pickle"
    leaky_training(10).dump(src)
    before = (_digest(src), src.stat().st_mtime_ns)
    rec = import_snapshot(src, run_dir, rank=0, step=42)
    assert rec["id"] == "r0-imported-oom-snapshot"
    target = run_dir / "memory_snapshots" / "r0-imported-oom-snapshot.pickle"
    assert _digest(target) == before[0] == rec["sha256"]
    assert (_digest(src), src.stat().st_mtime_ns) == before  # the source is only read
    side = json.loads((run_dir / "memory_snapshots" / "r0-imported-oom-snapshot.json").read_text())
    assert {k: side[k] for k in ("id", "rank", "step", "reason", "failure", "format", "device")} == {
        "id": "r0-imported-oom-snapshot", "rank": 0, "step": 42, "reason": "imported",
        "failure": None, "format": "trace", "device": "cuda:0"}
    assert rec["summary"]["trace_events"] == len(leaky_training(10).trace)
    assert not [p for p in (run_dir / "memory_snapshots").iterdir() if p.name.startswith(".")]
    listed = open_run(run_dir).memory_snapshots()
    assert [(s["id"], s["step"], s["reason"]) for s in listed] == [("r0-imported-oom-snapshot", 42, "imported")]


def test_import_refuses_duplicates_bad_names_zips_and_bad_ranks(tmp_path, run_dir):
    src = tmp_path / "s.pickle"
    leaky_training(2).dump(src)
    import_snapshot(src, run_dir, name="one")
    with pytest.raises(InvalidInputError, match=r"a memory snapshot named 'one' is already in this run"):
        import_snapshot(src, run_dir, name="one")
    with pytest.raises(InvalidInputError, match=r"snapshot name '\.\./x': expected letters"):
        import_snapshot(src, run_dir, name="../x")
    with pytest.raises(InvalidInputError, match=r"--rank -1: expected an integer >= 0"):
        import_snapshot(src, run_dir, rank=-1)
    with pytest.raises(InvalidInputError, match=r"--step -3: expected an integer >= 0"):
        import_snapshot(src, run_dir, step=-3)
    z = tmp_path / "run.zip"
    shutil.make_archive(str(z)[:-4], "zip", run_dir)
    with pytest.raises(RunDirError, match=r"a zipped run is read-only"):
        import_snapshot(src, z)
    with pytest.raises(RunDirError, match="not a debugkit run directory"):
        import_snapshot(src, tmp_path)


def test_import_of_a_bad_file_writes_nothing(tmp_path, run_dir):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {shlex.quote(str(marker))}",))

    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(UnsafePickleError):
        import_snapshot(bad, run_dir)
    notsnap = tmp_path / "list.pickle"
    notsnap.write_bytes(pickle.dumps({"weights": [1, 2]}))
    with pytest.raises(InvalidInputError, match="not a PyTorch memory snapshot"):
        import_snapshot(notsnap, run_dir)
    assert not marker.exists()
    assert not (run_dir / "memory_snapshots").exists()


def test_list_snapshots_orders_by_rank_and_step_and_reads_bare_pickles(tmp_path, run_dir):
    d = run_dir / "memory_snapshots"
    d.mkdir()
    snap = pickle.dumps(leaky_training(2).snapshot())
    for name in ("r1-s0000005-close", "r0-s0000009-failure", "r0-s0000002-oom", "by-hand"):
        (d / f"{name}.pickle").write_bytes(snap)
    (d / ".tmp-partial.pickle").write_bytes(b"half")
    (d / "r0-s0000002-oom.json").write_text(json.dumps({"failure": "r0-s0000002-exception",
                                                        "reason": "oom", "step": 2, "rank": 0}))
    (d / "r0-s0000009-failure.json").write_text("{not json")
    got = list_snapshots(run_dir)
    assert [(s["id"], s["rank"], s["step"], s["reason"]) for s in got] == [
        ("r0-s0000002-oom", 0, 2, "oom"), ("r0-s0000009-failure", 0, 9, "failure"),
        ("r1-s0000005-close", 1, 5, "close"), ("by-hand", None, None, "imported")]
    assert got[0]["failure"] == "r0-s0000002-exception"
    assert all(s["size_bytes"] == len(snap) for s in got)


# ---------------------------------------------------------------------------- capacity
def test_memory_capacity_from_rank_meta(run_dir):
    cap = open_run(run_dir).memory_capacity()
    meta = json.loads((run_dir / "ranks" / "0" / "meta-000.json").read_text())
    host = min(v for v in (meta["host_memory_bytes"], meta["host_memory_limit_bytes"]) if v)
    assert cap["rank"].tolist() == [0] and cap["device"].tolist() == ["cpu"]
    assert cap["host_capacity_bytes"].tolist() == [host]
    assert cap["device_capacity_bytes"].isna().all()


def test_memory_capacity_uses_the_cgroup_limit_and_the_manifest_gpus(run_dir):
    mpath = run_dir / "ranks" / "0" / "meta-000.json"
    meta = json.loads(mpath.read_text())
    meta.update(device="cuda:1", host_memory_bytes=64 << 30, host_memory_limit_bytes=16 << 30)
    meta.pop("device_memory_bytes", None)
    mpath.write_text(json.dumps(meta))
    man = json.loads((run_dir / "manifest.json").read_text())
    man["env"]["gpus"] = [{"index": 0, "name": "A", "total_memory_bytes": 40 << 30},
                          {"index": 1, "name": "B", "total_memory_bytes": 80 << 30}]
    (run_dir / "manifest.json").write_text(json.dumps(man))
    cap = open_run(run_dir).memory_capacity()
    assert cap["device_capacity_bytes"].tolist() == [80 << 30]
    assert cap["host_capacity_bytes"].tolist() == [16 << 30]


def test_memory_capacity_of_an_old_run_is_null(tmp_path):
    from tests.app.test_memory_page import _old_run

    cap = open_run(_old_run(tmp_path / "old")).memory_capacity()
    assert cap["rank"].tolist() == [0]
    assert cap["host_capacity_bytes"].isna().all() and cap["device_capacity_bytes"].isna().all()


# ---------------------------------------------------------------------------- parse cache
def test_second_read_comes_from_the_parsed_cache_and_is_identical(tmp_path):
    import pandas as pd

    p = tmp_path / "s.pickle"
    b = leaky_training(10)
    b.oom(8 * MiB, MiB)
    b.dump(p)
    first = read_snapshot(p)
    second = read_snapshot(p)
    assert (first.from_cache, second.from_cache) == (False, True)
    for name in ("segments", "blocks", "events"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name))
    assert first.stacks == second.stacks and first.allocator_settings == second.allocator_settings
    # a changed file is parsed again
    leaky_training(3).dump(p)
    os.utime(p, ns=(1, 1))
    third = read_snapshot(p)
    assert not third.from_cache and len(third.events) == len(leaky_training(3).trace)


def test_a_damaged_cache_entry_is_parsed_again(tmp_path):
    from debugkit._fsutil import cache_dir

    p = tmp_path / "s.pickle"
    leaky_training(4).dump(p)
    read_snapshot(p)
    (entry,) = [d for d in (cache_dir() / "memsnap").iterdir() if not d.name.startswith(".")]
    (entry / "events.arrow").write_bytes(b"garbage")
    snap = read_snapshot(p)
    assert not snap.from_cache and len(snap.events) == len(leaky_training(4).trace)
    assert read_snapshot(p).from_cache


def test_cache_can_be_skipped(tmp_path):
    from debugkit._fsutil import cache_dir

    p = tmp_path / "s.pickle"
    leaky_training(2).dump(p)
    assert not read_snapshot(p, cache=False).from_cache
    assert not (cache_dir() / "memsnap").exists()
