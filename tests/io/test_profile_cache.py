"""Parsed sampled profiles in the cache folder: the same object back, re-parsed on change."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd

from debugkit._fsutil import cache_dir
from debugkit.io.chrome_trace import ChromeTrace
from debugkit.io.profile_cache import read_entry_cached
from debugkit.io.run import open_run
from debugkit.io.run_profiles import get_profile, read_entry


def _same(a, b):
    for name in ("frames", "counts", "threads"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert a.stack_frames.dtype == b.stack_frames.dtype
    assert np.array_equal(a.stack_frames, b.stack_frames)
    assert np.array_equal(a.stack_offsets, b.stack_offsets)
    assert a.meta == b.meta and a.format == b.format


def _run(sample_runs, tmp_path):
    shutil.copytree(sample_runs / "digits-profiled", tmp_path / "run")
    return open_run(tmp_path / "run")


def test_cached_profile_equals_a_fresh_parse_and_is_read_from_the_cache(sample_runs, tmp_path,
                                                                       monkeypatch):
    run = _run(sample_runs, tmp_path)
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    entry = get_profile(run, "train")
    fresh = read_entry(entry)
    first = read_entry_cached(entry)
    (folder,) = [p for p in (cache_dir() / "profiles").iterdir() if not p.name.startswith(".")]
    assert (folder / "profile.json").is_file()
    from debugkit.io import run_profiles

    def no_parse(entry):
        raise AssertionError("parsed again although the file did not change")

    with monkeypatch.context() as m:
        m.setattr(run_profiles, "read_entry", no_parse)
        again = read_entry_cached(entry)
    _same(fresh, first)
    _same(fresh, again)
    assert sorted(p.name for p in folder.iterdir()) == [
        "counts.arrow", "frames.arrow", "profile.json", "stack_frames.npy", "stack_offsets.npy",
        "threads.arrow"]
    after = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    assert after == before  # the run folder is never written


def test_a_changed_profile_file_is_parsed_again(sample_runs, tmp_path):
    run = _run(sample_runs, tmp_path)
    entry = get_profile(run, "train")
    read_entry_cached(entry)
    other = get_profile(run, "train-no-workers")
    shutil.copyfile(other["path"], entry["path"])  # new content (size and mtime) at the same path
    st = os.stat(entry["path"])
    os.utime(entry["path"], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    got = read_entry_cached(entry)
    _same(read_entry(entry), got)
    assert got.total_samples == read_entry(other).total_samples


def test_a_damaged_cache_entry_is_parsed_again(sample_runs, tmp_path):
    run = _run(sample_runs, tmp_path)
    entry = get_profile(run, "train")
    read_entry_cached(entry)
    (folder,) = [p for p in (cache_dir() / "profiles").iterdir() if not p.name.startswith(".")]
    (folder / "counts.arrow").write_bytes(b"not arrow")
    _same(read_entry(entry), read_entry_cached(entry))


def test_traces_are_read_as_before(sample_runs, tmp_path):
    run = _run(sample_runs, tmp_path)
    obj = read_entry_cached(get_profile(run, "torch-trace"))
    assert isinstance(obj, ChromeTrace)
    assert not (cache_dir() / "profiles").exists() or not any((cache_dir() / "profiles").iterdir())


def _phases(prof, th):
    from debugkit.analysis import profile as ap

    return ap.compute_step_phases(prof, th)


def test_results_computed_from_a_cached_profile_are_kept_with_it(sample_runs, tmp_path, monkeypatch):
    """``derived`` keeps what was computed from a cached profile in its entry: the same
    result back (DataFrames with their dtypes, arrays, the JSON part), read without
    computing; another name or parameters, a change of the analysis code, or a damaged
    file: computed again."""
    from debugkit.io import profile_cache
    from debugkit.io.profile_cache import derived
    from pages._profile_sampled import _pack_phases, _unpack_phases

    run = _run(sample_runs, tmp_path)
    prof = read_entry_cached(get_profile(run, "train"))
    assert prof.cache_key
    th = [int(i) for i in prof.thread_ids("main")]
    calls = []

    def compute(threads=th):
        calls.append(threads)
        return _phases(prof, threads)

    def get(threads=th):
        return derived(prof, "step_phases", [threads], lambda: compute(threads), _pack_phases, _unpack_phases)

    fresh = _phases(prof, th)
    for got in (get(), get()):
        pd.testing.assert_frame_equal(got[0], fresh[0])
        assert got[1] == fresh[1] and np.array_equal(got[2], fresh[2]) and got[3] == fresh[3]
    assert calls == [th]  # the second came from the cache folder
    folder = cache_dir() / "profiles" / prof.cache_key / "derived"
    (entry,) = [p for p in folder.iterdir()]
    assert sorted(p.name for p in entry.iterdir()) == ["breakdown.arrow", "inside.npy", "profile.json"]

    get(None)  # other parameters: computed
    assert calls == [th, None]
    (entry / "inside.npy").write_bytes(b"not an array")  # damaged: computed again
    assert np.array_equal(get()[2], fresh[2]) and calls == [th, None, th]
    monkeypatch.setattr(profile_cache, "_analysis_digest", lambda: "changed code")
    get()
    assert calls == [th, None, th, th]


def test_an_uncached_profile_computes_its_results_each_time(sample_runs, tmp_path):
    from debugkit.io.profile_cache import derived

    prof = read_entry(get_profile(_run(sample_runs, tmp_path), "train"))  # not from the cache
    assert prof.cache_key is None
    calls = []
    for _ in range(2):
        derived(prof, "x", [], lambda: calls.append(1) or 1, lambda r: ({}, {}, {}), lambda *a: 1 / 0)
    assert calls == [1, 1] and not (cache_dir() / "profiles").exists()
