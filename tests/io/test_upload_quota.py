"""Zip bombs of small members and repeated uploads cannot fill the disk (issue 22, item 3).

The bomb found by attacking a server: 1.2 MB of small members (each under 1 MiB, where
the per-member ratio was not checked) stored 1.0 GiB. The ratio is now checked for every
member and over the whole archive, and the store has a quota of bytes and of runs.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from debugkit.errors import UploadError
from debugkit.io.upload import (
    MSG_ARCHIVE_BOMB,
    MSG_STORE_FULL_BYTES,
    MSG_STORE_FULL_RUNS,
    StoreQuota,
    UploadLimits,
    unpack_files,
    unpack_zip,
)

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "digits-mlp"


def _run_files(prefix="myrun"):
    return [(f"{prefix}/{p.relative_to(SAMPLE).as_posix()}", p.read_bytes())
            for p in sorted(SAMPLE.rglob("*")) if p.is_file()]


def _zip(entries) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


def _store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def test_many_small_members_are_a_bomb_too(tmp_path):
    """200 members of 512 KiB of zeros: 100 MiB from a ~0.2 MB archive (~500x)."""
    store = tmp_path / "store"
    padding = [(f"myrun/pad/{i:03d}.bin", b"\0" * (512 << 10)) for i in range(200)]
    data = _zip(_run_files() + padding)
    assert len(data) < 1 << 20
    with pytest.raises(UploadError, match=r"refused 'myrun/pad/000.bin': it expands \d+x \(limit 200x\)"):
        unpack_zip(io.BytesIO(data), store)
    assert _store_bytes(store) < 2 << 20
    assert [p.name for p in store.iterdir() if not p.name.startswith(".")] == []


def test_the_ratio_holds_over_the_whole_archive(tmp_path):
    """Members under the per-member ratio whose sum over the archive exceeds the limit
    (here a per-member limit above the archive's, to see the archive check alone)."""
    store = tmp_path / "store"
    padding = [(f"myrun/pad/{i:03d}.bin", b"\0" * (64 << 10)) for i in range(50)]
    data = _zip(_run_files() + padding)
    with pytest.raises(UploadError, match=MSG_ARCHIVE_BOMB.split("{")[0]):
        unpack_zip(io.BytesIO(data), store, limits=UploadLimits(max_ratio=2000, max_archive_ratio=20))


def test_real_runs_zipped_are_not_bombs(tmp_path):
    store = tmp_path / "store"
    for run in sorted((SAMPLE.parent).iterdir()):
        files = [(f"{run.name}/{p.relative_to(run).as_posix()}", p.read_bytes())
                 for p in sorted(run.rglob("*")) if p.is_file()]
        assert unpack_zip(io.BytesIO(_zip(files)), store, display_name=f"{run.name}.zip").is_dir()


def test_store_quota_of_runs(tmp_path, monkeypatch):
    store = tmp_path / "store"
    monkeypatch.setenv("DEBUGKIT_STORE_MAX_RUNS", "2")
    unpack_files(_run_files(), store)
    unpack_files(_run_files(), store)
    before = sorted(p.name for p in store.iterdir())
    with pytest.raises(UploadError, match=MSG_STORE_FULL_RUNS.format(store=store, limit=2)
                       .replace("(", r"\(").replace(")", r"\)")):
        unpack_files(_run_files(), store)
    with pytest.raises(UploadError, match="already holds 2 runs"):
        unpack_files([("r.zip", _zip(_run_files()))], store)
    assert sorted(p.name for p in store.iterdir()) == before
    assert list((store / ".incoming").iterdir()) == []


def test_store_quota_of_bytes(tmp_path, monkeypatch):
    store = tmp_path / "store"
    size = sum(len(d) for _, d in _run_files())
    monkeypatch.setenv("DEBUGKIT_STORE_MAX_MB", "1")  # 1 MiB: the sample is ~80 KB
    n = 0
    with pytest.raises(UploadError, match=MSG_STORE_FULL_BYTES.split("{")[0]):
        for _ in range((1 << 20) // size + 2):
            unpack_files(_run_files(), store)
            n += 1
    assert n >= 1
    assert _store_bytes(store) <= 1 << 20


@pytest.mark.parametrize("env, value", [
    ({}, StoreQuota()),
    ({"DEBUGKIT_STORE_MAX_MB": "100", "DEBUGKIT_STORE_MAX_RUNS": "5"},
     StoreQuota(max_bytes=100 << 20, max_runs=5)),
])
def test_quota_from_env(monkeypatch, env, value):
    for k in ("DEBUGKIT_STORE_MAX_MB", "DEBUGKIT_STORE_MAX_RUNS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert StoreQuota.from_env() == value


def test_a_bad_quota_setting_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DEBUGKIT_STORE_MAX_RUNS", "many")
    with pytest.raises(UploadError, match=r"DEBUGKIT_STORE_MAX_RUNS='many': expected a whole number"):
        unpack_files(_run_files(), tmp_path / "store")
