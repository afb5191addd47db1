"""Structure-aware Arrow fuzzing, each input in its own child process (issue 28, item 3).

Every table of the run format is fed streams whose record batches lie about their
buffers (tests/fuzz/arrowmut.py: offsets past the data, lengths and null counts the
buffers cannot back, dictionary indices outside the dictionary, buffers cut short or
moved, columns reinterpreted as another type). The whole run is then read the way the
Overview and ``debugkit diagnose`` read it. Each input runs in a child process
(tests/fuzz/isolated.py), so an input that segfaults pyarrow is a failed case here, not
a dead test run. Contract: opened, or refused with a DebugkitError.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ..conftest import console_script
from .arrowmut import KINDS, mutate_stream
from .isolated import SEGFAULT_TARGET, run_isolated
from .targets import SAMPLES, seed

TABLES = ("scalars_table", "grads_table", "memory_table", "steps_table")


def test_a_crashing_reader_is_a_failed_input_not_a_dead_run():
    out = run_isolated(SEGFAULT_TARGET, "arrow", 0)
    assert out.outcome == "broke" and "killed by signal 11" in out.detail, out


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_of_lie_builds_a_different_stream(kind):
    import random

    base = seed("scalars_table")
    changed = sum(mutate_stream(base, random.Random(s), kind) != base for s in range(5))
    assert changed >= 3, kind


@pytest.mark.parametrize("kind", KINDS)
def test_a_lying_scalars_stream_opens_or_is_refused(kind):
    out = run_isolated("scalars_table", f"arrow:{kind}", 0)
    assert out.outcome in ("opened", "refused"), out.detail


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("table", TABLES)
def test_lying_streams_of_every_table_open_or_are_refused(table):
    """Every kind on every table, two seeded draws each (``bench/fuzz.py --arrow N`` does more)."""
    broke = []
    for kind in KINDS:
        for salt in range(2):
            out = run_isolated(table, f"arrow:{kind}", salt)
            assert out.outcome != "no_input", out.detail
            if out.outcome == "broke":
                broke.append(out.detail)
    assert not broke, "\n\n".join(broke)


def _lying_offsets_stream() -> bytes:
    """The scalars table of digits-mlp with its key column's offsets ``[0, 2**30, ...]``."""
    import struct

    import pyarrow as pa

    from .arrowmut import _read_batches, _replace, _write

    schema, batches = _read_batches(seed("scalars_table"))
    col = batches[0].column(1)
    validity, offsets, values = col.buffers()
    offs = bytearray(offsets.to_pybytes())
    struct.pack_into("<i", offs, 4, 2**30)
    arr = pa.Array.from_buffers(col.type, len(col), [validity, pa.py_buffer(bytes(offs)), values],
                                null_count=col.null_count)
    return _write(schema, [_replace(batches[0], 1, arr)] + batches[1:])


def test_debugkit_diagnose_refuses_a_stream_whose_string_offsets_lie(tmp_path):
    """The issue's example through the CLI: it segfaulted the process (exit -11)."""
    run = tmp_path / "lying-offsets"
    shutil.copytree(SAMPLES / "digits-mlp", run)
    (run / "ranks/0/scalars-000.arrows").write_bytes(_lying_offsets_stream())
    proc = subprocess.run([console_script(), "diagnose", str(run)], capture_output=True, text=True,
                          timeout=300, env={**os.environ})
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "scalars-000.arrows: record batch 0 is invalid Arrow data, refused" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
