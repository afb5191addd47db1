"""Compression bombs on the command line (issue 28, item 5): `debugkit profile-summary`
and `debugkit import torch-trace` refuse a gzipped profile or trace, and `debugkit
diagnose` a run whose Arrow stream has ZSTD-compressed batches, that unpack past the
limits, through the console script, without a traceback."""

from __future__ import annotations

import shutil
import subprocess

from ..app.test_decompression_limits import SPEEDSCOPE_HEAD, gzip_bomb
from ..conftest import SAMPLE_RUNS, console_script


def debugkit_cmd(*args, cwd):
    return subprocess.run([console_script("debugkit"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_profile_summary_refuses_a_gzipped_speedscope_bomb(tmp_path):
    gzip_bomb(tmp_path / "p.speedscope.json.gz", SPEEDSCOPE_HEAD, b"}", 64)
    out = debugkit_cmd("profile-summary", "p.speedscope.json.gz", cwd=tmp_path)
    assert out.returncode != 0
    assert "p.speedscope.json.gz: refused: it unpacks more than 200x its" in out.stderr
    assert "Traceback" not in out.stderr


def test_import_refuses_a_gzipped_trace_bomb(tmp_path, monkeypatch):
    gzip_bomb(tmp_path / "t.pt.trace.json.gz", b'{"traceEvents": [', b"]}", 64)
    monkeypatch.setenv("DEBUGKIT_MAX_UNPACKED_MB", "16")
    out = debugkit_cmd("import", "torch-trace", "t.pt.trace.json.gz", "run", cwd=tmp_path)
    assert out.returncode != 0
    assert "t.pt.trace.json.gz: refused: it unpacks" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run" / "profiles").exists() or not any((tmp_path / "run" / "profiles").iterdir())


def test_diagnose_refuses_an_arrow_stream_with_a_zstd_bomb(tmp_path):
    """8 KB of ZSTD-compressed record batch that pyarrow would inflate to 224 MiB (the
    run's scalars): refused from the batch's metadata before anything is inflated."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    run = tmp_path / "run"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", run)
    stream = run / "ranks" / "0" / "scalars-000.arrows"
    schema = ipc.open_stream(pa.py_buffer(stream.read_bytes())).schema
    n = 8 << 20
    big = pa.table({"step": pa.array([0] * n, pa.int64()), "key": pa.array([""] * n),
                    "value": pa.array([0.0] * n), "wall_time": pa.array([0.0] * n)}, schema=schema)
    with ipc.new_stream(str(stream), schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(big)
    assert stream.stat().st_size < 16_000
    out = debugkit_cmd("diagnose", "run", cwd=tmp_path)
    assert out.returncode != 0
    assert "scalars-000.arrows: refused: record batch 0 unpacks its" in out.stderr
    assert "this looks like a compression bomb" in out.stderr and "Traceback" not in out.stderr
