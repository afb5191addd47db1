"""The captured-batch checks run in numpy (no torch import) and show what the torch
checks show: on every sample run's captures and on hand-made batches."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from debugkit.io.run import open_run
from debugkit.recorder.batchspec import BatchSpec
from debugkit.replay import batchcheck, batchcheck_numpy, datachecks
from debugkit.replay.loading import load_batch
from debugkit.tensortree import save_tree

ROOT = Path(__file__).resolve().parents[2]


def _torch_shows(record: dict, num_classes):
    """What :func:`check_captured_batch` gave before it read batches with numpy."""
    nc = record.get("num_classes") or num_classes
    return batchcheck._shows(
        record, nc, load_batch(record), datachecks.find_target,
        lambda t, n, path, n_batch: datachecks.find_bad_labels(t, n, path=path, n_batch=n_batch),
        datachecks.find_nonfinite, lambda: batchcheck._torch_violations(record, nc))


def _sample_captures():
    for d in sorted((ROOT / "sample_runs").iterdir()):
        if not (d / "manifest.json").is_file():
            continue
        run = open_run(d)
        for f in run.failures():
            if (f.get("files") or {}).get("batch"):
                yield d.name, f, run.manifest.get("num_classes")


def test_every_sample_capture_shows_the_same_in_numpy_as_in_torch():
    seen = shown = 0
    for name, f, nc in _sample_captures():
        batchcheck_numpy.load_batch_numpy(f)  # read in numpy, not through the torch fallback
        got = batchcheck.check_captured_batch(f, nc)
        assert got == _torch_shows(f, nc), name
        seen += 1
        shown += got is not None
    assert seen >= 10 and shown >= 4  # labels, NaN inputs and a shape are among them


def _capture(tmp_path: Path, batch, spec: BatchSpec | None = None, indices=None) -> dict:
    save_tree(batch, tmp_path / "batch.safetensors", tmp_path / "batch.json")
    if spec is not None:
        d = json.loads(spec.to_json())
        d["inferred_from"] = {"healthy_batches": 7}
        (tmp_path / "batch_spec.json").write_text(json.dumps(d))
    rec = {"path": str(tmp_path), "files": {"batch": "batch.safetensors"}}
    if indices is not None:
        rec["dataset_indices"] = indices
    return rec


_X = torch.arange(12, dtype=torch.float32).reshape(4, 3)
_Y = torch.tensor([0, 1, 2, 1])
_NAN = _X.clone()
_NAN[2, 1] = float("nan")
_NAN[3, 0] = float("-inf")
_SEQ = torch.tensor([[0, 1, 2], [3, 7, 1], [0, 0, 0], [1, 1, 1]])
_SPEC = BatchSpec.infer([(_X, _Y)], num_classes=3)


@pytest.mark.parametrize("batch, spec", [
    ((_X, torch.tensor([0, 5, 2, -7])), None),                 # labels
    ((_X, _SEQ), None),                                         # sequence labels, positions
    ((_NAN, _Y), None),                                         # NaN and Inf, positions
    ({"x": _NAN.half(), "label": _Y}, None),                    # float16 in a dict
    ((_X[:, :2], _Y), _SPEC),                                   # shape against the spec
    ((_X.double(), _Y), _SPEC),                                 # dtype against the spec
    ([_X, _Y, _Y], _SPEC),                                      # structure against the spec
    ({"x": _X, "y": _Y}, _SPEC),                                # a dict for a sequence spec
    ((_X, _Y.numpy()), _SPEC),                                  # a numpy array is not a tensor
    ((_X, _Y), _SPEC),                                          # nothing to show
    ((_X.to(torch.bfloat16), _Y), _SPEC),                       # bfloat16: the torch fallback
], ids=["labels", "seq-labels", "nonfinite", "float16", "shape", "dtype", "structure",
        "mapping", "ndarray", "healthy", "bfloat16"])
def test_hand_made_batches_show_the_same_in_numpy_as_in_torch(tmp_path, batch, spec):
    rec = _capture(tmp_path, batch, spec, indices=[10, 11, 12, 13])
    assert batchcheck.check_captured_batch(rec, 3) == _torch_shows(rec, 3)


def test_the_spec_check_gives_the_torch_violations_range_and_finite_included(tmp_path):
    spec = BatchSpec({0: {"dtype": "float32", "shape": ["B", 3], "range": (0, 10), "finite": True},
                      1: {"dtype": "int64", "shape": ["B"], "range": (0, 2)}})
    batch = (_NAN, torch.tensor([0, 1, 2, 1]))
    rec = _capture(tmp_path, batch)
    np_batch = batchcheck_numpy.load_batch_numpy(rec)
    want = spec.check(batch, [5, 6, 7, 8])
    assert {v.rule for v in want} == {"range", "finite"}
    assert batchcheck_numpy.check_spec(spec, np_batch, [5, 6, 7, 8]) == want


def test_bfloat16_needs_torch(tmp_path):
    rec = _capture(tmp_path, (_X.to(torch.bfloat16), _Y))
    with pytest.raises(batchcheck_numpy.NeedsTorch):
        batchcheck_numpy.load_batch_numpy(rec)


def test_listing_and_diagnosing_the_sample_runs_does_not_import_torch(tmp_path):
    code = (
        "import sys, pathlib\n"
        "from debugkit.io import served_runs\n"
        "from debugkit.diagnose import run_summaries, diagnose\n"
        "from debugkit.io.run import open_run\n"
        "entries = served_runs.find_runs(['sample_runs'])\n"
        f"rows = run_summaries.summarize_runs(entries, folder=pathlib.Path({str(tmp_path)!r}))\n"
        "shown = [r['id'] for r in rows if 'captured batch shows' in str(r.get('top'))]\n"
        "for e in entries: diagnose(open_run(e.path))\n"
        "print(len(rows), [m for m in ('torch', 'safetensors.torch') if m in sys.modules])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    n, loaded = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(n) >= 20 and loaded == "[]"
