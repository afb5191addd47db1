"""The minimal repro reproduces the error in a fresh interpreter where debugkit cannot be imported."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile

import pytest

from debugkit.io.run import open_run
from debugkit.replay import plan_identities
from debugkit.replay.repro import build_repro

from .conftest import ROOT

# Runs repro.py with debugkit made unimportable: isolated mode (-I: no PYTHONPATH, no
# user site, no script or working directory on sys.path) plus an import hook refusing it.
BLOCKED = """
import importlib.abc, runpy, sys
class NoDebugkit(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "debugkit" or name.startswith("debugkit."):
            raise ImportError("debugkit is not installed here")
sys.meta_path.insert(0, NoDebugkit())
try:
    import debugkit
except ImportError:
    pass
else:
    raise SystemExit("debugkit is importable: the test is void")
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def export(sample: str, tmp_path, report=None):
    run = open_run(ROOT / "sample_runs" / sample)
    rec = run.failures()[0]
    data = build_repro(run, rec, plan_identities(run, rec), report)
    out = tmp_path / "x"
    zipfile.ZipFile(io.BytesIO(data)).extractall(out)
    return out / f"{rec['id']}-repro", rec


def run_repro(folder, *args):
    return subprocess.run([sys.executable, "-I", "-c", BLOCKED, str(folder / "repro.py"), *args],
                          cwd=folder, capture_output=True, text=True, timeout=300)


def test_repro_of_the_corrupted_label(tmp_path):
    folder, rec = export("digits-bad-label", tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "batch.json", "batch.safetensors", "code", "failure.json", "model.safetensors",
        "repro.py", "rng.json", "rng.safetensors"]
    assert sorted(str(p.relative_to(folder / "code")) for p in (folder / "code").rglob("*.py")) == \
        ["examples/__init__.py", "examples/digits.py"]
    proc = run_repro(folder, "--device", "cpu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.rstrip().endswith("IndexError: Target 12 is out of bounds.")
    assert "expected: IndexError: Target 12 is out of bounds." in proc.stdout


def test_repro_of_the_nan_born_in_backward_runs_the_step_fn(tmp_path):
    folder, rec = export("digits-metric-zero-distance", tmp_path)
    proc = run_repro(folder)
    assert proc.returncode == 1
    assert "RuntimeError: Function 'SqrtBackward0' returned nan values in its 0th output." in proc.stderr


def test_repro_of_the_embedding_failure(tmp_path):
    folder, _ = export("credit-unseen-category", tmp_path)
    proc = run_repro(folder)
    assert proc.returncode == 1
    assert proc.stderr.rstrip().endswith("IndexError: index out of range in self")


def test_report_culprit_goes_into_the_header(tmp_path):
    report = {"ran": {"mode": "cross_entropy"},
              "culprit": {"module": None, "op": None, "input": "batch[1]", "sample_index": 6,
                          "dataset_index": 1474, "detail": "sample 6 has label 12"}}
    folder, _ = export("digits-bad-label", tmp_path, report)
    head = (folder / "repro.py").read_text().split("import json")[0]
    assert "# debugkit's culprit: sample 6 has label 12 (input='batch[1]', sample_index=6," in head


def test_a_crafted_capture_cannot_inject_code(tmp_path):
    run_dir = tmp_path / "evil"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run_dir)
    fj = run_dir / "failures" / "r0-s0000075-exception" / "failure.json"
    rec = json.loads(fj.read_text())
    marker = tmp_path / "pwned"
    rec["message"] = f"x\nimport os; os.system('touch {marker}')\n'''\"\"\"\\"
    rec["factory_kwargs"] = {"hidden": 64}
    fj.write_text(json.dumps(rec))
    run = open_run(run_dir)
    r = run.failures()[0]
    data = build_repro(run, r, plan_identities(run, r))
    out = tmp_path / "x"
    zipfile.ZipFile(io.BytesIO(data)).extractall(out)
    folder = out / "r0-s0000075-exception-repro"
    text = (folder / "repro.py").read_text()
    assert "\nimport os; os.system" not in text
    proc = run_repro(folder, "--device", "cpu")
    assert proc.returncode == 1 and "IndexError: Target 12 is out of bounds." in proc.stderr
    assert not marker.exists()


def test_no_repro_for_code_that_never_runs(tmp_path):
    run_dir = tmp_path / "evil"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run_dir)
    fj = run_dir / "failures" / "r0-s0000075-exception" / "failure.json"
    rec = json.loads(fj.read_text())
    rec["code"] = {"model_factory": {"spec": "os:system"}}
    fj.write_text(json.dumps(rec))
    run = open_run(run_dir)
    from debugkit.errors import ReplayError

    with pytest.raises(ReplayError, match="cannot export a repro: model_factory os:system"):
        build_repro(run, run.failures()[0], plan_identities(run, run.failures()[0]))


def test_cli_writes_the_repro(tmp_path):
    from .conftest import run_cli

    out = tmp_path / "r.zip"
    proc = run_cli("replay", ROOT / "sample_runs" / "digits-bad-label", "--device", "cpu", "--repro", out)
    assert proc.returncode == 0, proc.stderr
    assert f"repro:      {out}" in proc.stdout
    names = zipfile.ZipFile(out).namelist()
    assert "r0-s0000075-exception-repro/repro.py" in names
    text = zipfile.ZipFile(out).read("r0-s0000075-exception-repro/repro.py").decode()
    assert "# debugkit's culprit: sample 6 (dataset index 1474) has label 12" in text
