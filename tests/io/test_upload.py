"""Uploads through the real unpacking path: hostile names, links, bombs, limits."""

from __future__ import annotations

import io
import os
import stat
import zipfile
from pathlib import Path

import pytest

from debugkit.errors import UploadError
from debugkit.io.upload import UploadLimits, check_name, unpack_files, unpack_zip

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "digits-mlp"


def _run_files(prefix="myrun"):
    return [(f"{prefix}/{p.relative_to(SAMPLE).as_posix()}", p.read_bytes())
            for p in sorted(SAMPLE.rglob("*")) if p.is_file()]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _zip_bytes(entries, symlink=None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink[0])
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, symlink[1])
    return buf.getvalue()


def test_directory_upload_lands_in_the_store(tmp_path):
    store = tmp_path / "store"
    target = unpack_files(_run_files(), store)
    assert target == store / "myrun"
    assert _tree(target) == _tree(SAMPLE)
    # a second upload of the same folder gets its own run, the first is untouched
    second = unpack_files(_run_files(), store)
    assert second == store / "myrun-2"
    assert sorted(p.name for p in store.iterdir() if not p.name.startswith(".")) == ["myrun", "myrun-2"]
    assert list((store / ".incoming").iterdir()) == []


def test_zip_upload(tmp_path):
    store = tmp_path / "store"
    data = _zip_bytes(_run_files("zipped"))
    target = unpack_files([("my-run.zip", data)], store)
    assert target.name == "zipped" and (target / "manifest.json").is_file()


@pytest.mark.parametrize("name,why", [
    ("../evil.txt", "'..' is not allowed"),
    ("run/../../evil.txt", "'..' is not allowed"),
    ("/etc/passwd", "absolute paths are not allowed"),
    ("C:/windows/evil", "absolute paths are not allowed"),
    ("run\\..\\evil", "backslashes are not allowed"),
    ("run/a\x00b", "it contains NUL or control characters"),
    ("run/a\nb", "it contains NUL or control characters"),
    # issue 28: DEL, C1 controls and bidi overrides were accepted
    ("run/a\x7fb", "it contains NUL or control characters"),
    ("run/a\x85b", "it contains NUL or control characters"),
    ("run/a\x9bb", "it contains NUL or control characters"),
    ("run/evil\u202eyp.sj", "it contains invisible formatting characters"),
    ("run/a\u200bb", "it contains invisible formatting characters"),
    ("run/a\u2028b", "it contains invisible formatting characters"),
    ("", "empty name"),
])
def test_hostile_names_are_refused(tmp_path, name, why):
    store = tmp_path / "store"
    files = _run_files() + [(name, b"x")]
    with pytest.raises(UploadError, match=f"upload: refused file name .*: {why}"):
        unpack_files(files, store)
    with pytest.raises(UploadError, match=why):
        check_name(name)
    assert not (tmp_path / "evil.txt").exists()
    assert [p.name for p in store.iterdir() if not p.name.startswith(".")] == []


@pytest.mark.parametrize("name", ["../../evil.txt", "/tmp/evil-abs.txt", "a/../../evil.txt"])
def test_zip_slip_is_refused(tmp_path, name):
    store = tmp_path / "store"
    with pytest.raises(UploadError, match="refused file name"):
        unpack_zip(io.BytesIO(_zip_bytes(_run_files() + [(name, b"pwned")])), store)
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil-abs.txt").exists()
    assert [p.name for p in store.iterdir() if not p.name.startswith(".")] == []


def test_symlink_in_zip_is_refused(tmp_path):
    store = tmp_path / "store"
    data = _zip_bytes(_run_files(), symlink=("myrun/link", "/etc/passwd"))
    with pytest.raises(UploadError, match=r"refused 'myrun/link': links are not allowed"):
        unpack_zip(io.BytesIO(data), store)
    assert not any(p.is_symlink() for p in store.rglob("*"))


def test_zip_bomb_is_refused_while_reading(tmp_path):
    store = tmp_path / "store"
    bomb = b"\0" * (64 << 20)  # 64 MB of zeros compresses ~1000x
    data = _zip_bytes(_run_files() + [("myrun/bomb.bin", bomb)])
    assert len(data) < 1 << 20
    with pytest.raises(UploadError, match=r"refused 'myrun/bomb.bin': it expands \d+x \(limit 200x\); this looks like a compression bomb"):
        unpack_zip(io.BytesIO(data), store)
    assert sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) < 4 << 20


def test_lying_zip_header_is_caught_while_reading(tmp_path):
    """A member whose header claims a small size but inflates to far more."""
    store = tmp_path / "store"
    data = bytearray(_zip_bytes([("myrun/big.bin", b"\0" * (8 << 20))]))
    # rewrite the declared uncompressed size (local header and central directory) to 100
    import struct

    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = data.find(sig)
        struct.pack_into("<I", data, i + off, 100)
    with pytest.raises(UploadError):
        unpack_zip(io.BytesIO(bytes(data)), store, limits=UploadLimits(max_ratio=10))


def test_too_many_files_and_too_many_bytes(tmp_path):
    store = tmp_path / "store"
    files = _run_files()
    with pytest.raises(UploadError, match=rf"upload: {len(files)} files is more than the limit of 3"):
        unpack_files(files, store, limits=UploadLimits(max_files=3))
    with pytest.raises(UploadError, match=r"upload: the upload is \d+ bytes, over the limit of 1000 bytes"):
        unpack_files(files, store, limits=UploadLimits(max_total_bytes=1000))
    with pytest.raises(UploadError, match=r"file 'myrun/big' is \d+ bytes, over the limit of 10 bytes"):
        unpack_files([("myrun/big", b"x" * 11)], store, limits=UploadLimits(max_file_bytes=10))
    assert [p.name for p in store.iterdir() if not p.name.startswith(".")] == []


def test_an_upload_that_is_not_a_run(tmp_path):
    with pytest.raises(UploadError, match="no manifest.json at the top of the upload"):
        unpack_files([("notes/readme.txt", b"hello")], tmp_path / "store")


def test_a_pickle_disguised_as_a_checkpoint_is_stored_never_loaded(tmp_path):
    """Uploading never unpickles: a malicious .pt lands as inert bytes."""
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path}/pwned",))

    files = _run_files() + [("myrun/failures/x/optimizer.pt", pickle.dumps(Boom()))]
    target = unpack_files(files, tmp_path / "store")
    assert (target / "failures" / "x" / "optimizer.pt").is_file()
    from debugkit import open_run

    run = open_run(target)
    run.failures()
    run.row_counts()
    assert not (tmp_path / "pwned").exists()


def test_duplicate_names_are_refused(tmp_path):
    files = _run_files() + [("myrun/manifest.json", b"{}")]
    with pytest.raises(UploadError, match="duplicate name"):
        unpack_files(files, tmp_path / "store")


@pytest.mark.parametrize("extra", [
    [("myrun/ranks", b"a file where the run has a folder")],         # file after folder
    [("myrun/x", b"file"), ("myrun/x/y", b"then a folder of that name")],  # folder after file
])
@pytest.mark.parametrize("kind", ["directory", "zip"])
def test_a_file_and_a_folder_of_one_name_are_refused(tmp_path, extra, kind):
    """Issue 28: the clash escaped as a FileExistsError / NotADirectoryError naming the
    staging folder (a server path); it is an UploadError naming the upload's own path."""
    store = tmp_path / "store"
    files = _run_files() + extra
    with pytest.raises(UploadError, match=r"upload: refused file name '.*': '.*' is both a file "
                                          r"and a folder in this upload") as err:
        if kind == "zip":
            unpack_files([("clash.zip", _zip_bytes(files))], store)
        else:
            unpack_files(files, store)
    assert ".staging" not in str(err.value) and str(store) not in str(err.value)
    assert [p.name for p in store.iterdir() if not p.name.startswith(".")] == []


def test_a_manifest_nested_100000_deep_is_refused(tmp_path):
    """Issue 28: a deep manifest.json upload showed a traceback (RecursionError)."""
    files = [(n, b"[" * 100_000 + b"]" * 100_000 if n == "myrun/manifest.json" else d)
             for n, d in _run_files()]
    with pytest.raises(UploadError, match=r"^upload: myrun/manifest\.json: JSON nested deeper than") as err:
        unpack_files(files, tmp_path / "store")
    assert str(tmp_path) not in str(err.value)


class _SlowFile:
    """A file whose reads wait for ``gate``: an upload still arriving."""

    def __init__(self, data: bytes, gate, started):
        self._d, self._gate, self._started = data, gate, started

    def read(self, n=-1):
        self._started.set()
        self._gate.wait(30)
        d, self._d = (self._d, b"") if n is None or n < 0 else (self._d[:n], self._d[n:])
        return d


def test_two_uploads_at_once_get_two_runs_and_a_half_upload_is_invisible(tmp_path):
    import threading

    from debugkit.io.served_runs import find_runs

    store = tmp_path / "store"
    store.mkdir()
    gate, started = threading.Event(), threading.Event()
    files = _run_files()
    slow = files[:-1] + [(files[-1][0], _SlowFile(files[-1][1], gate, started))]
    results, errors = [], []

    def up(batch):
        try:
            results.append(unpack_files(batch, store))
        except Exception as exc:  # noqa: BLE001  reported below
            errors.append(exc)

    t1 = threading.Thread(target=up, args=(slow,))
    t1.start()
    assert started.wait(10)
    # while the first upload is still arriving, nothing of it is visible as a run...
    assert [e.id for e in find_runs([store])] == []
    # ...and a second upload of a folder with the same name completes beside it
    up(_run_files())
    assert [e.id for e in find_runs([store])] == ["myrun"]
    gate.set()
    t1.join(30)
    assert not errors
    assert sorted(p.name for p in results) == ["myrun", "myrun-2"]
    assert sorted(e.id for e in find_runs([store])) == ["myrun", "myrun-2"]
    for r in results:
        assert _tree(r) == _tree(SAMPLE)
    assert list((store / ".incoming").iterdir()) == []


def test_a_refused_manifest_names_the_upload_not_the_staging_folder(tmp_path):
    store = tmp_path / "store"
    files = [(n, b'{"schema_version": "9.0"}' if n == "myrun/manifest.json" else d)
             for n, d in _run_files()]
    with pytest.raises(UploadError, match=r"^upload: myrun/manifest\.json: schema_version '9\.0' is newer") as err:
        unpack_files(files, store)
    assert str(store) not in str(err.value)
