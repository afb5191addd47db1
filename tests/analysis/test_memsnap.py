"""Snapshot aggregations on snapshots built the way PyTorch's allocator writes them."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from debugkit.analysis import memsnap as ms
from debugkit.io.memsnap import parse_snapshot
from tests.memsnap_factory import TORCH, USER, MiB, SnapshotBuilder, leaky_training


def _parse(builder):
    # through pickle, as the file would be, so shared frame lists stay shared
    return parse_snapshot(pickle.loads(pickle.dumps(builder.snapshot())))


@pytest.fixture(scope="module")
def leaky():
    b = leaky_training(30)
    snap = _parse(b)
    return b, snap, ms.site_labels(snap.stacks)


# ---------------------------------------------------------------------------- sites
@pytest.mark.parametrize("stack,depth,user_code,label", [
    (((TORCH + "nn/functional.py", 2380, "linear"), (USER + "model.py", 21, "forward"),
      (USER + "train.py", 30, "train_step")), 1, True, "model.py:21 forward"),
    (((TORCH + "nn/functional.py", 2380, "linear"), (USER + "model.py", 21, "forward"),
      (USER + "train.py", 30, "train_step")), 2, True, "model.py:21 forward < train.py:30 train_step"),
    (((TORCH + "nn/functional.py", 2380, "linear"), (USER + "model.py", 21, "forward")), 1, False,
     "functional.py:2380 linear"),
    (((TORCH + "nn/functional.py", 2380, "linear"),), 1, True, "functional.py:2380 linear"),
    ((("??", 0, "c10::cuda::CUDACachingAllocator::malloc"), ("??", 0, "at::native::mm"),
      ("/usr/lib/python3.11/site-packages/torch/lib/libtorch.so", 0, "PyObject_Call")), 1, True,
     "??:0 at::native::mm"),
    ((), 1, True, ms.NO_STACK),
])
def test_site_label(stack, depth, user_code, label):
    assert ms.site_label(stack, depth, user_code) == label


def test_format_stack_lists_frames_innermost_first():
    stack = ((USER + "model.py", 21, "forward"), (USER + "train.py", 30, "train_step"))
    assert ms.format_stack(stack) == (f"{USER}model.py:21 in forward\n{USER}train.py:30 in train_step")
    assert ms.format_stack(stack, limit=1).endswith("... 1 more frames")


# ---------------------------------------------------------------------------- allocations
def test_allocations_lifetimes_match_the_allocator(leaky):
    b, snap, _ = leaky
    a = ms.compute_allocations(snap)
    # 2 weights + 30 steps x (3 activations + 1 gradient + 1 kept tensor)
    assert len(a) == 2 + 30 * 5
    assert not a["preexisting"].any()
    alive = a[a["alive_at_end"]]
    assert len(alive) == 32
    assert alive["size"].sum() == b.active == 32 * MiB + 30 * 3 * MiB
    assert set(alive["addr"]) == set(b.live)
    freed = a[~a["alive_at_end"]]
    assert (freed["free_seq"] > freed["alloc_seq"]).all()
    assert freed["free_time_us"].notna().all()


def test_total_active_and_peak(leaky):
    b, snap, _ = leaky
    total = ms.compute_total_active(snap)
    assert len(total) == len(snap.events)
    assert total[-1] == b.active
    peak = ms.find_peak(snap)
    # weights 32 MiB + 30 kept 3 MiB tensors + 3 x 8 MiB activations + 4 MiB gradient
    assert peak["bytes"] == 32 * MiB + 90 * MiB + 24 * MiB + 4 * MiB
    assert snap.events.loc[peak["seq"], "action"] == "alloc"
    assert peak["time_s"] == pytest.approx((snap.events["time_us"][peak["seq"]]
                                           - snap.events["time_us"][0]) / 1e6)


def test_active_timeline_stacks_sites_and_keeps_the_peak(leaky):
    b, snap, sites = leaky
    tl = ms.compute_active_timeline(snap, sites=sites)
    per_moment = tl.groupby("seq")["bytes"].sum()
    peak = ms.find_peak(snap)
    assert per_moment.max() == peak["bytes"]
    assert per_moment.iloc[-1] == b.active
    by_site = tl.groupby("site", observed=True)["bytes"].max()
    assert by_site["train.py:34 train_step"] == 90 * MiB
    assert by_site["train.py:10 main"] == 32 * MiB
    assert by_site["model.py:21 forward"] == 24 * MiB
    assert list(tl["site"].cat.categories)[:2] == ["train.py:34 train_step", "train.py:10 main"]


def test_timeline_is_bounded_and_folds_small_sites_into_other(leaky):
    _, snap, sites = leaky
    tl = ms.compute_active_timeline(snap, sites=sites, top_k=2, max_points=50)
    assert list(tl["site"].cat.categories) == ["train.py:34 train_step", "train.py:10 main", ms.OTHER]
    assert tl["seq"].nunique() <= 52
    # the peak moment survives the thinning
    assert tl.groupby("seq")["bytes"].sum().max() == ms.find_peak(snap)["bytes"]


def test_largest_at_peak(leaky):
    _, snap, sites = leaky
    peak, t = ms.compute_largest_at_peak(snap, sites=sites, n=5)
    assert t["size"].tolist() == [16 * MiB, 16 * MiB, 8 * MiB, 8 * MiB, 8 * MiB]
    assert t["site"].tolist() == ["train.py:10 main"] * 2 + ["model.py:21 forward"] * 3
    assert t["share"].iloc[0] == pytest.approx(16 / 150)
    assert t["stack"].iloc[0].splitlines()[0] == f"{TORCH}nn/modules/module.py:1341 in to"
    assert (t["age_s"] >= 0).all()


def test_leaked_by_site_points_at_the_kept_tensor(leaky):
    _, snap, sites = leaky
    lk = ms.compute_leaked_by_site(snap, sites=sites)
    top = lk.iloc[0]
    assert top["site"] == "train.py:34 train_step"
    assert top["live_count"] == 30
    assert top["live_bytes"] == 90 * MiB
    assert top["allocated_in_trace"] == 30
    assert top["still_alive_share"] == 1.0
    assert bool(top["accumulating"])
    assert top["span_share"] > 0.9
    w = lk[lk["site"] == "train.py:10 main"].iloc[0]
    assert (w["live_count"], w["live_bytes"], bool(w["accumulating"])) == (2, 32 * MiB, False)
    assert set(lk["site"]) == {"train.py:34 train_step", "train.py:10 main"}


# ---------------------------------------------------------------------------- ring buffer
def test_ring_buffer_window_accounts_for_earlier_allocations():
    b = leaky_training(30, max_entries=100)  # keeps only the last 100 events
    snap = _parse(b)
    sites = ms.site_labels(snap.stacks)
    a = ms.compute_allocations(snap)
    assert len(snap.events) == 100
    # the weights and the early kept tensors were allocated before the window: their
    # blocks still say who allocated them
    early_alive = a[a["preexisting"] & a["alive_at_end"]]
    assert early_alive["size"].sum() > 0
    assert ms.compute_total_active(snap)[-1] == b.active
    lk = ms.compute_leaked_by_site(snap, sites=sites)
    top = lk.iloc[0]
    assert (top["site"], top["live_count"], top["live_bytes"]) == ("train.py:34 train_step", 30, 90 * MiB)
    assert top["preexisting"] > 0
    # an allocation made before the window and freed inside it has no known stack
    early_freed = a[a["preexisting"] & ~a["alive_at_end"]]
    assert (ms.allocation_sites(early_freed, sites) == ms.PREEXISTING).all()


# ---------------------------------------------------------------------------- legacy
def test_legacy_format_gives_the_same_numbers_without_times():
    b = leaky_training(30, legacy=True)
    snap = _parse(b)
    sites = ms.site_labels(snap.stacks)
    assert snap.format == "legacy"
    assert ms.find_peak(snap)["bytes"] == 150 * MiB
    assert ms.find_peak(snap)["time_s"] is None
    tl = ms.compute_active_timeline(snap, sites=sites)
    assert tl["time_s"].isna().all()
    lk = ms.compute_leaked_by_site(snap, sites=sites)
    assert (lk.iloc[0]["site"], lk.iloc[0]["live_bytes"]) == ("train.py:34 train_step", 90 * MiB)
    segs, blocks = ms.compute_segments_at(snap, sites=sites)
    assert segs["total_size"].sum() == b.reserved


# ---------------------------------------------------------------------------- segments
def _fragmenting():
    """Small tensors interleaved with big ones, the big ones freed, the cache emptied."""
    b = SnapshotBuilder()
    f_big = b.frames((USER + "train.py", 50, "big"))
    f_small = b.frames((USER + "train.py", 51, "small"))
    big = [b.alloc(4 * MiB, f_big) for _ in range(4)]   # one 20 MiB segment, 4 MiB blocks
    small = [b.alloc(256 << 10, f_small) for _ in range(3)]  # one 2 MiB small segment
    extra = b.alloc(12 * MiB, f_big)                    # its own 12 MiB segment
    mid = len(b.trace)
    mid_snapshot = b.snapshot()
    b.free(extra)
    b.empty_cache()                                     # frees the 12 MiB segment
    for a in big[::2]:
        b.free(a)
    return b, mid, mid_snapshot, small


def test_segments_at_the_end_are_the_snapshot_blocks():
    b, *_ = _fragmenting()
    snap = _parse(b)
    sites = ms.site_labels(snap.stacks)
    segs, blocks = ms.compute_segments_at(snap, sites=sites)
    assert segs["total_size"].sum() == b.reserved == 20 * MiB + 2 * MiB
    large = segs[segs["segment_type"] == "large"].iloc[0]
    assert large["allocated_bytes"] == 8 * MiB
    assert large["free_bytes"] == 12 * MiB
    # free: [0,4) [8,12) [16,20) MiB -> largest contiguous 4 MiB although 12 MiB are free
    assert large["largest_free_bytes"] == 4 * MiB
    assert large["free_share"] == pytest.approx(0.6)
    small = segs[segs["segment_type"] == "small"].iloc[0]
    assert (small["allocations"], small["allocated_bytes"]) == (3, 3 * (256 << 10))
    assert set(blocks["site"]) == {"train.py:50 big", "train.py:51 small"}


def test_segments_at_an_earlier_moment_are_rebuilt_from_the_trace():
    b, mid, mid_snapshot, _ = _fragmenting()
    snap = _parse(b)
    sites = ms.site_labels(snap.stacks)
    segs, blocks = ms.compute_segments_at(snap, seq=mid - 1, sites=sites)
    want = parse_snapshot(mid_snapshot).segments
    assert segs["address"].tolist() == want["address"].tolist()
    assert segs["total_size"].tolist() == want["total_size"].tolist()
    # requested bytes alive then: 4 x 4 MiB, 3 x 256 KiB, 12 MiB
    assert blocks["size"].sum() == 16 * MiB + 3 * (256 << 10) + 12 * MiB
    assert segs["allocations"].tolist() == [4, 3, 1]


def test_segment_occupancy_cells():
    b, *_ = _fragmenting()
    snap = _parse(b)
    segs, blocks = ms.compute_segments_at(snap, sites=ms.site_labels(snap.stacks))
    rows, z = ms.compute_segment_occupancy(segs, blocks, bins=5)
    large_row = rows.index[rows["segment_type"] == "large"][0]
    # 4 MiB slices of the 20 MiB segment: free, used, free, used, free
    assert z[large_row].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]
    rows1, z1 = ms.compute_segment_occupancy(segs, blocks, bins=5, max_segments=1)
    assert len(rows1) == 1 and rows1["total_size"].iloc[0] == 20 * MiB


def test_pending_free_blocks_stay_active_until_completed():
    b = SnapshotBuilder()
    f = b.frames((USER + "train.py", 7, "step"))
    a = b.alloc(4 * MiB, f)
    b.free(a, pending=True)  # waiting on another stream
    snap = _parse(b)
    assert snap.blocks["state"].astype(str).tolist()[0] == "active_pending_free"
    assert ms.compute_total_active(snap)[-1] == 4 * MiB
    segs, _ = ms.compute_segments_at(snap, sites=ms.site_labels(snap.stacks))
    assert segs["pending_free_bytes"].iloc[0] == 4 * MiB
    b.complete_pending(a)
    assert ms.compute_total_active(_parse(b))[-1] == 0


def test_oom_events():
    b = leaky_training(5)
    f = b.frames((USER + "train.py", 30, "train_step"))
    b.oom(64 * MiB, 10 * MiB, f)
    snap = _parse(b)
    o = ms.compute_oom_events(snap, sites=ms.site_labels(snap.stacks))
    assert o[["requested_bytes", "device_free_bytes", "site"]].to_dict("records") == [
        {"requested_bytes": 64 * MiB, "device_free_bytes": 10.0 * MiB, "site": "train.py:30 train_step"}]
    assert o["seq"].iloc[0] == len(snap.events) - 1


def test_snapshot_without_history_uses_its_blocks():
    b = leaky_training(5)
    d = b.snapshot()
    d["device_traces"] = [[]]
    snap = parse_snapshot(d)
    sites = ms.site_labels(snap.stacks)
    assert ms.find_peak(snap) is None
    assert ms.compute_active_timeline(snap, sites=sites).empty
    peak, t = ms.compute_largest_at_peak(snap, sites=sites)
    assert peak is None
    assert t["size"].tolist()[:2] == [16 * MiB, 16 * MiB]
    lk = ms.compute_leaked_by_site(snap, sites=sites)
    assert lk.iloc[0]["live_bytes"] == 32 * MiB  # weights (no stack times: not "accumulating")
    assert lk["allocated_in_trace"].tolist() == [0, 0]


def test_multi_device_snapshots_keep_devices_apart():
    b0 = leaky_training(3)
    b1 = SnapshotBuilder(device=1)
    b1.alloc(5 * MiB, b1.frames((USER + "other.py", 1, "g")))
    d0, d1 = b0.snapshot(), b1.snapshot()
    merged = {"segments": d0["segments"] + d1["segments"],
              "device_traces": [d0["device_traces"][0], d1["device_traces"][1]]}
    snap = parse_snapshot(merged)
    assert snap.devices == [0, 1]
    assert ms.compute_total_active(snap, 1)[-1] == 5 * MiB
    assert ms.compute_total_active(snap, 0)[-1] == b0.active


def test_assign_steps():
    steps = pd.DataFrame({"step": [0, 1, 2], "wall_time": [10.0, 11.0, 12.0],
                          "step_time_s": [0.5, 0.5, 0.5]})
    got = ms.assign_steps([9.0, 10.2, 11.9, 12.4, 13.0, np.nan], steps)
    assert got[1:4].tolist() == [0.0, 1.0, 2.0]
    assert np.isnan(got[0]) and np.isnan(got[4]) and np.isnan(got[5])


def test_large_snapshot_is_aggregated_into_bounded_output():
    """A 200,000-event trace still gives a timeline of a few thousand rows."""
    from tests.memsnap_factory import synthetic_large_snapshot

    d = synthetic_large_snapshot(events=200_000, sites=40)
    snap = parse_snapshot(pickle.loads(pickle.dumps(d)))
    sites = ms.site_labels(snap.stacks)
    tl = ms.compute_active_timeline(snap, sites=sites, top_k=12, max_points=800)
    assert tl["seq"].nunique() <= 802
    assert tl["site"].nunique() == 13  # 12 sites and "other"
    assert len(tl) <= 13 * 802
    assert tl.groupby("seq")["bytes"].sum().max() == ms.find_peak(snap)["bytes"]
    lk = ms.compute_leaked_by_site(snap, sites=sites)
    assert len(lk) <= 40
