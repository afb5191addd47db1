"""Every JSON read is capped, and non-regular files are refused, not opened (issue 22,
item 5): a 2 GB sparse manifest.json is refused before it is read; ``debugkit
profile-summary FIFO`` refuses at once instead of hanging."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from debugkit._fsutil import MAX_JSON_BYTES, read_json
from debugkit.errors import FileLimitError, RunDirError
from debugkit.io.run import open_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_runs" / "digits-mlp"


def _cli(*args, cwd):
    exe = Path(sys.executable).parent / "debugkit"
    return subprocess.run([str(exe if exe.is_file() else "debugkit"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_a_2gb_sparse_manifest_is_refused_before_it_is_read(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    with open(run / "manifest.json", "r+b") as f:
        f.truncate(2 << 30)  # sparse: no disk used, 2 GiB to a reader
    tracemalloc.start()
    try:
        with pytest.raises(RunDirError, match=r"manifest.json: 2147483648 bytes is over the limit of "
                                              rf"{MAX_JSON_BYTES} bytes for a JSON file"):
            open_run(run)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_the_cli_refuses_it_with_one_line(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    with open(run / "manifest.json", "r+b") as f:
        f.truncate(2 << 30)
    proc = _cli("info", "run", cwd=tmp_path)
    assert proc.returncode == 2
    assert "over the limit" in proc.stderr and "Traceback" not in proc.stderr


def test_read_json_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "heartbeat.json"
    os.mkfifo(fifo)
    with pytest.raises(FileLimitError, match=r"heartbeat.json: not a regular file \(a FIFO\)"):
        read_json(fifo)
    assert isinstance(FileLimitError("x"), ValueError)  # readers that tolerate bad JSON tolerate it


def test_profile_summary_refuses_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "profile.json")
    proc = _cli("profile-summary", "profile.json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a regular file (a FIFO)" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("value, why", [
    ("a\x00b", "NUL or control character"),
    ("x" * 5000, "longer than 4096 characters"),
], ids=["nul", "5000-chars"])
def test_the_cli_refuses_a_hostile_path_with_one_line(tmp_path, value, why):
    proc = _cli("info", value, cwd=tmp_path) if "\x00" not in value else None
    if proc is None:  # argv cannot carry NUL; the reader's entry point can
        from debugkit.errors import InvalidInputError

        with pytest.raises(InvalidInputError, match=why):
            open_run(value)
        return
    assert proc.returncode == 2
    assert why in proc.stderr and len(proc.stderr) < 400 and "Traceback" not in proc.stderr
