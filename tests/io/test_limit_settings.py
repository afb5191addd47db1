"""The operator's limits of issue 28 (items 5-8): their settings, refused when malformed
with a message naming the variable, and the cache's eviction order."""

from __future__ import annotations

import os
import time

import pytest

from debugkit._fsutil import MSG_BAD_CACHE_SETTING, cache_dir, cache_max_bytes, trim_cache
from debugkit.audit.targets import MSG_BAD_BOUNDS, check_bounds, operator_bounds
from debugkit.audit.worker import MSG_BUSY, AuditBusyError, audit_slot, max_workers
from debugkit.errors import AuditError, FileLimitError, InvalidInputError
from debugkit.io.decompress import MSG_BAD_SETTING, DecompressLimits


@pytest.mark.parametrize("value", ["lots", "-5", "0", "1.5"])
def test_bad_unpacked_limit(monkeypatch, value):
    monkeypatch.setenv("DEBUGKIT_MAX_UNPACKED_MB", value)
    with pytest.raises(FileLimitError, match=MSG_BAD_SETTING.format(
            name="DEBUGKIT_MAX_UNPACKED_MB", value=value).replace("(", r"\(").replace(")", r"\)")):
        DecompressLimits.from_env()


@pytest.mark.parametrize("value", ["big", "0", "-1"])
def test_bad_cache_bound(monkeypatch, value):
    monkeypatch.setenv("DEBUGKIT_CACHE_MAX_MB", value)
    with pytest.raises(FileLimitError, match=MSG_BAD_CACHE_SETTING.format(value=value)):
        cache_max_bytes()


@pytest.mark.parametrize("value", ["hidden", "hidden=1..x", "hidden=9..1", "hidden=nan..nan", "=1..2"])
def test_bad_bounds(monkeypatch, value):
    monkeypatch.setenv("DEBUGKIT_AUDIT_BOUNDS", value)
    with pytest.raises(AuditError, match=r"DEBUGKIT_AUDIT_BOUNDS=.*expected comma-separated name=LOW\.\.HIGH"):
        operator_bounds()
    assert MSG_BAD_BOUNDS.startswith("DEBUGKIT_AUDIT_BOUNDS=")


def test_bounds_refuse_non_numbers_and_operator_bounds_replace_the_loaders(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_AUDIT_BOUNDS", "hidden=1..4096, depth=1..3")
    assert operator_bounds() == {"hidden": (1.0, 4096.0), "depth": (1.0, 3.0)}
    assert check_bounds({"hidden": 2048}, {"hidden": (1, 1024)}, what="w") == {"hidden": 2048}
    for bad in ({"hidden": "2048"}, {"hidden": True}, {"hidden": float("nan")}, {"depth": 4}):
        with pytest.raises(InvalidInputError, match="is outside the bounds this server allows"):
            check_bounds(bad, {"hidden": (1, 1024)}, what="w")


def test_bad_worker_count(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_AUDIT_WORKERS", "two")
    with pytest.raises(AuditError, match=r"DEBUGKIT_AUDIT_WORKERS='two': expected a number > 0"):
        max_workers()


def test_audit_slots_are_shared_and_released(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_AUDIT_WORKERS", "2")
    with audit_slot() as a, audit_slot() as b:
        assert {a, b} == {0, 1}
        with pytest.raises(AuditBusyError, match=MSG_BUSY.format(limit=2).replace("(", r"\(").replace(")", r"\)")):
            with audit_slot():
                pass
    with audit_slot() as c:  # released on exit
        assert c == 0


def _entry(kind: str, name: str, size: int, age_s: float):
    d = cache_dir() / kind / name
    d.mkdir(parents=True)
    (d / "data").write_bytes(os.urandom(size))
    t = time.time() - age_s
    os.utime(d, (t, t))
    return d


def test_the_cache_evicts_least_recently_used_first(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_CACHE_MAX_MB", "1")
    old = _entry("zips", "old", 400_000, 300)
    mid = _entry("profiles", "mid", 400_000, 200)
    new = _entry("memsnap", "new", 400_000, 100)
    staging = _entry("zips", ".tmp-inflight", 400_000, 10)  # being written: kept
    (cache_dir() / "locks").mkdir()
    (cache_dir() / "locks" / "audit-0.lock").write_bytes(b"")
    freed = trim_cache(keep=new)
    assert freed > 0
    assert not old.exists() and not mid.exists()
    assert new.exists() and staging.exists() and (cache_dir() / "locks" / "audit-0.lock").exists()
