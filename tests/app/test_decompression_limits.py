"""Gzip bombs inside a run (issue 28, item 5): a gzipped trace or profile that unpacks
far past its size is refused on the Distributed and Profiler pages while it is being
inflated, and the refusal is remembered, so the next view does not inflate it again."""

from __future__ import annotations

import gzip
import shutil

import pytest

from debugkit.io.decompress import forget_refusals
from debugkit.io.served_runs import default_store

from ..conftest import SAMPLE_RUNS
from ._apptest import open_page

SPEEDSCOPE_HEAD = b'{"$schema": "https://www.speedscope.app/file-format-schema.json", "shared": {"frames": []}, "profiles": []'


def gzip_bomb(path, head: bytes, tail: bytes, mib: int) -> int:
    """A valid gzip file (concatenated members) of ``head``, ``mib`` MiB of spaces and
    ``tail``: a few hundred bytes per MiB on disk. Returns its size."""
    block = gzip.compress(b" " * (1 << 20), 9)
    with open(path, "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(mib):
            f.write(block)
        f.write(gzip.compress(tail))
    return path.stat().st_size


@pytest.fixture(autouse=True)
def _no_remembered_refusals():
    forget_refusals()
    yield
    forget_refusals()


def uploaded(sample: str, name: str):
    run = default_store() / name
    shutil.copytree(SAMPLE_RUNS / sample, run)
    return run


def errors(at) -> str:
    return "\n".join(e.value for e in at.error)


def test_gzipped_traces_that_unpack_to_gigabytes_are_refused_on_distributed(monkeypatch):
    run = uploaded("ddp-straggler", "bombed-traces")
    for p in (run / "traces").iterdir():
        p.unlink()
    for rank in (0, 1):
        size = gzip_bomb(run / "traces" / f"rank{rank}.json.gz", b'{"traceEvents": [',
                         b'], "distributedInfo": {"rank": %d, "world_size": 2}}' % rank, 64)
        assert size < 80_000  # 64 MiB unpacked from under 80 KB
    at = open_page("distributed", run="bombed-traces")
    assert "rank0.json.gz: refused: it unpacks more than 200x its" in errors(at)
    assert "this looks like a compression bomb" in errors(at)

    # The refusal is remembered: the next view refuses without inflating the file again.
    def inflating(*a, **k):
        raise AssertionError("the refused trace was inflated again")

    monkeypatch.setattr(gzip, "GzipFile", inflating)
    at = open_page("distributed", run="bombed-traces")
    assert "rank0.json.gz: refused: it unpacks more than 200x its" in errors(at)


def test_a_gzipped_speedscope_bomb_is_refused_on_the_profiler(monkeypatch):
    run = uploaded("digits-profiled", "bombed-profile")
    shutil.rmtree(run / "profiles")
    (run / "profiles").mkdir()
    gzip_bomb(run / "profiles" / "bomb.speedscope.json.gz", SPEEDSCOPE_HEAD, b"}", 64)
    at = open_page("profiler", check=False, timeout=240, run="bombed-profile")
    assert not at.exception, [e.value for e in at.exception]
    assert "bomb.speedscope.json.gz: refused: it unpacks more than 200x its" in errors(at)

    def inflating(*a, **k):
        raise AssertionError("the refused profile was inflated again")

    monkeypatch.setattr(gzip, "GzipFile", inflating)
    at = open_page("profiler", check=False, timeout=240, run="bombed-profile")
    assert not at.exception, [e.value for e in at.exception]
    assert "bomb.speedscope.json.gz: refused: it unpacks more than 200x its" in errors(at)


def test_the_size_limit_holds_for_a_file_under_the_ratio(monkeypatch, tmp_path):
    """``DEBUGKIT_MAX_UNPACKED_MB`` bounds a file whose ratio looks ordinary."""
    import os

    from debugkit.io.decompress import MSG_UNPACKS_TOO_BIG, DecompressionLimitError, read_maybe_gzip

    monkeypatch.setenv("DEBUGKIT_MAX_UNPACKED_MB", "2")
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(os.urandom(3 << 20)))  # incompressible: ratio 1x
    with pytest.raises(DecompressionLimitError, match=MSG_UNPACKS_TOO_BIG.format(
            path=p, limit=2 << 20).replace("(", r"\(").replace(")", r"\)")):
        read_maybe_gzip(p)


def test_an_uploaded_audit_whose_rows_inflate_is_refused_on_the_audit_page():
    """An audit stored in an uploaded run (valid: its hashes are its author's) whose
    rows.parquet is 75 KB on disk and 128 MiB once read: refused from the file's footer."""
    import numpy as np
    import pandas as pd

    from debugkit.audit import list_audits, load_audit
    from debugkit.audit.stored_audits import write_audit
    from debugkit.io.decompress import MSG_PARQUET_BOMB

    run = uploaded("credit-audit", "bombed-audit")
    doc = load_audit(run, list_audits(run)[0]["id"]).doc
    shutil.rmtree(run / "audits")
    bomb = write_audit(run, {**doc, "name": "bomb"}, pd.DataFrame({"row": np.zeros(16 << 20, np.int64)}))
    assert (bomb.path / "rows.parquet").stat().st_size < 200_000
    at = open_page("audit", check=False, timeout=240, run="bombed-audit")
    assert not at.exception, [e.value for e in at.exception]
    # the visitor sees the file relative to the store, never the server's path
    shown = f"store/bombed-audit/audits/{bomb.path.name}/rows.parquet"
    head = MSG_PARQUET_BOMB.split("{rows}")[0].format(path=shown)
    assert head + "16777216 rows of 1 columns, at least 134217728 bytes once read" in errors(at)
    assert str(bomb.path) not in errors(at)
