"""`debugkit scan-dataset` on the real digits data with the corrupted stage-2 label."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from debugkit.cli import main
from debugkit.cli.scan_dataset import (
    MSG_BUILD_FAILED,
    MSG_IMPORT,
    MSG_KWARGS,
    MSG_NO_FUNCTION,
    MSG_NOT_CALLABLE,
    MSG_TARGET,
)
from debugkit.recorder.batchspec import BatchSpec
from examples.digits import CORRUPT_ROW, DigitsDataset, load_splits

ROOT = Path(__file__).resolve().parents[2]

DATA_MODULE = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(ROOT)!r})
    from torch.utils.data import ConcatDataset, DataLoader
    from examples.digits import CORRUPT_ROW, DigitsDataset, load_splits

    def build_dataset(corrupt=True):
        # The training set of the corrupted-label run: stage 1 + stage 2 with row 37 labelled 12.
        (xa, ya), (xb, yb) = load_splits()
        yb = yb.copy()
        if corrupt:
            yb[CORRUPT_ROW] = 12
        return ConcatDataset([DigitsDataset(xa, ya), DigitsDataset(xb, yb)])

    def build_loader():
        return DataLoader(build_dataset(), batch_size=8, shuffle=True)

    def not_a_dataset():
        return 42

    def broken():
        raise FileNotFoundError("labels.csv")

    NOT_CALLABLE = 3
""")


@pytest.fixture(scope="module")
def stage1_len() -> int:
    return len(load_splits()[0][1])


@pytest.fixture
def work(tmp_path):
    """tmp_path holding the data module and a spec inferred from healthy training batches."""
    (tmp_path / "digits_data.py").write_text(DATA_MODULE)
    (xa, ya), _ = load_splits()
    healthy = DataLoader(DigitsDataset(xa, ya), batch_size=32, shuffle=True)
    spec = BatchSpec.infer(healthy, num_classes=10)
    assert spec.tensors["1"].shape[0].max == 32  # smaller than the scan's batch size
    spec.save(tmp_path / "spec.json")
    return tmp_path


def dk(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "debugkit", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def in_process(monkeypatch, capsys, cwd, *args):
    """main() in this process; the CLI's sys.path entry and the imported module are undone."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "digits_data", raising=False)
    code = main(["scan-dataset", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_subprocess_lists_exactly_the_corrupted_index(work, stage1_len):
    p = dk("scan-dataset", "digits_data:build_dataset", "--spec", "spec.json", "--json", cwd=work)
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    bad = stage1_len + CORRUPT_ROW  # 1474, the index the crashed sample run fails on
    assert out["dataset"] == "digits_data:build_dataset" and out["spec"] == "spec.json"
    assert out["samples"] == 1797 and out["complete"] is True and out["stopped"] is None
    assert out["violating_indices"] == [bad]
    (v,) = out["violations"]
    assert v == {"index": bad, "tensor": "1", "rule": "range",
                 "message": "value 12 outside [0, 10)", "sample": bad % 256}
    assert isinstance(out["seconds"], float)


@pytest.mark.slow
def test_text_output(work, stage1_len):
    p = dk("scan-dataset", "digits_data:build_dataset", "--spec", "spec.json", cwd=work)
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert lines[0].startswith("digits_data:build_dataset: 1797 sample(s) scanned")
    assert "1 violation(s) at 1 dataset index(es)" in lines[0]
    assert lines[1].split() == ["index", "tensor", "rule", "message"]
    assert lines[2].split()[:3] == [str(stage1_len + CORRUPT_ROW), "1", "range"]
    assert lines[2].endswith("value 12 outside [0, 10)")


def test_clean_dataset_exits_0(work, monkeypatch, capsys):
    code, out, err = in_process(monkeypatch, capsys, work, "digits_data:build_dataset",
                                "--spec", "spec.json", "--kwargs", '{"corrupt": false}', "--json")
    assert code == 0, err
    out = json.loads(out)
    assert out["violations"] == [] and out["samples"] == 1797 and out["complete"] is True


@pytest.mark.parametrize("batch_size", [1, 7, 32, 256, 5000])
def test_batch_size_does_not_matter(work, monkeypatch, capsys, stage1_len, batch_size):
    """The spec's batch dim is 1..32; scan batches of any size (and short last ones) pass."""
    code, out, _ = in_process(monkeypatch, capsys, work, "digits_data:build_dataset",
                              "--spec", "spec.json", "--batch-size", batch_size, "--json")
    assert code == 1
    assert json.loads(out)["violating_indices"] == [stage1_len + CORRUPT_ROW]


@pytest.mark.slow
def test_two_workers_same_result(work, stage1_len):
    p = dk("scan-dataset", "digits_data:build_dataset", "--spec", "spec.json", "--json",
           "--workers", 2, "--batch-size", 100, cwd=work)
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert out["violating_indices"] == [stage1_len + CORRUPT_ROW] and out["samples"] == 1797


def test_a_dataloader_is_rescanned_in_index_order(work, monkeypatch, capsys, stage1_len):
    code, out, _ = in_process(monkeypatch, capsys, work, "digits_data:build_loader",
                              "--spec", "spec.json", "--json")
    assert code == 1
    assert json.loads(out)["violating_indices"] == [stage1_len + CORRUPT_ROW]


def test_limit_stops_early(work, monkeypatch, capsys):
    code, out, _ = in_process(monkeypatch, capsys, work, "digits_data:build_dataset",
                              "--spec", "spec.json", "--limit", 1000, "--json")
    out = json.loads(out)
    assert code == 0  # the bad row (1474) lies past the limit
    assert out["samples"] == 1000 and out["complete"] is False and out["stopped"] == "limit"
    code, text, _ = in_process(monkeypatch, capsys, work, "digits_data:build_dataset",
                               "--spec", "spec.json", "--limit", 1000)
    assert "stopped early (--limit reached), not every sample was scanned" in text


def test_max_seconds_stops_early(work, monkeypatch, capsys):
    code, out, _ = in_process(monkeypatch, capsys, work, "digits_data:build_dataset",
                              "--spec", "spec.json", "--max-seconds", 1e-9, "--batch-size", 100,
                              "--json")
    out = json.loads(out)
    assert out["samples"] == 100 and out["complete"] is False and out["stopped"] == "time"


@pytest.mark.slow
@pytest.mark.parametrize("target,spec,msg", [
    ("no_such_module:build", "spec.json",
     MSG_IMPORT.format(target="no_such_module:build", module="no_such_module",
                       detail="ModuleNotFoundError: No module named 'no_such_module'")),
    ("digits_data:missing", "spec.json",
     MSG_NO_FUNCTION.format(target="digits_data:missing", module="digits_data", name="missing")),
    ("digits_data:NOT_CALLABLE", "spec.json",
     MSG_NOT_CALLABLE.format(target="digits_data:NOT_CALLABLE", name="NOT_CALLABLE", kind="int")),
    ("digits_data", "spec.json", MSG_TARGET.format(target="digits_data")),
    ("digits_data:not_a_dataset", "spec.json",
     "digits_data:not_a_dataset returned a value that is a int: expected a torch Dataset"),
    ("digits_data:broken", "spec.json",
     MSG_BUILD_FAILED.format(target="digits_data:broken", error_type="FileNotFoundError", detail="labels.csv")),
    ("digits_data:build_dataset", "bad_spec.json", "bad_spec.json: not a debugkit batch spec"),
    ("digits_data:build_dataset", "nothing.json", "nothing.json: cannot read batch spec"),
])
def test_bad_input_exits_2_with_one_line(work, target, spec, msg):
    (work / "bad_spec.json").write_text('{"tensors": 3}')
    p = dk("scan-dataset", target, "--spec", spec, cwd=work)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith(f"debugkit: error: {msg}") and p.stderr.count("\n") == 1
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_bad_kwargs_exit_2(work, monkeypatch, capsys):
    code, out, err = in_process(monkeypatch, capsys, work, "digits_data:build_dataset",
                                "--spec", "spec.json", "--kwargs", "[1]")
    assert code == 2 and MSG_KWARGS.format(value="[1]") in err
