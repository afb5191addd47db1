"""``debugkit import memory-snapshot FILE RUN_DIR``."""

from __future__ import annotations

import json
import os
import pickle
import shlex
import shutil

import pytest

from debugkit.cli import main
from tests.conftest import SAMPLE_RUNS
from tests.memsnap_factory import MiB, leaky_training


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    shutil.copytree(SAMPLE_RUNS / "memory-leak", d)
    return d


def test_import_prints_a_summary(tmp_path, run_dir, capsys):
    src = tmp_path / "snap.pickle"
    b = leaky_training(10)
    b.oom(64 * MiB, MiB)
    b.dump(src)
    assert main(["import", "memory-snapshot", str(src), str(run_dir), "--step", "59"]) == 0
    out = capsys.readouterr().out
    assert f"imported {src} as r0-imported-snap into {run_dir}" in out
    assert f"{len(b.trace):,} trace events, 1 out-of-memory event(s), 4 distinct stacks" in out
    assert (run_dir / "memory_snapshots" / "r0-imported-snap.pickle").read_bytes() == src.read_bytes()


def test_import_json(tmp_path, run_dir, capsys):
    src = tmp_path / "s.pickle"
    leaky_training(3).dump(src)
    assert main(["import", "memory-snapshot", str(src), str(run_dir), "--rank", "2", "--name",
                 "at-oom", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert (rec["id"], rec["rank"], rec["step"], rec["reason"]) == ("at-oom", 2, None, "imported")
    assert rec["summary"]["format"] == "trace"


def test_refusals_exit_2_with_one_line(tmp_path, run_dir, capsys):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {shlex.quote(str(marker))}",))

    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps(Evil()))
    assert main(["import", "memory-snapshot", str(evil), str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("debugkit: error: ") and "refused to load" in err and err.count("\n") == 1
    assert not marker.exists()
    assert main(["import", "memory-snapshot", str(tmp_path / "missing.pickle"), str(run_dir)]) == 2
    assert "missing.pickle: no such file" in capsys.readouterr().err
    # into a new run: the file is refused before the run folder is created
    assert main(["import", "memory-snapshot", str(evil), str(tmp_path / "norun")]) == 2
    assert "refused to load" in capsys.readouterr().err
    assert not (tmp_path / "norun").exists()
    # a folder holding other files is not turned into a run
    (tmp_path / "notarun").mkdir()
    (tmp_path / "notarun" / "notes.txt").write_text("mine")
    good = tmp_path / "good.pickle"
    leaky_training(3).dump(good)
    assert main(["import", "memory-snapshot", str(good), str(tmp_path / "notarun")]) == 2
    assert "not a debugkit run directory" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "notarun").iterdir()) == ["notes.txt"]


def test_import_creates_the_run_like_the_other_importers(tmp_path):
    """`debugkit import memory-snapshot FILE RUN` into a new folder makes a run (issue 17,
    item 9), run through the console script from that folder with relative paths; its
    Memory page shows the snapshot and does not wait for a Recorder."""
    import subprocess
    import sys
    from pathlib import Path

    leaky_training(5).dump(tmp_path / "snap.pickle")
    console = Path(sys.executable).with_name("debugkit")
    p = subprocess.run([str(console), "import", "memory-snapshot", "snap.pickle", "runs/snap-only"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "imported snap.pickle as r0-imported-snap into runs/snap-only" in p.stdout
    info = subprocess.run([str(console), "info", "runs/snap-only", "--json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    doc = json.loads(info.stdout)
    assert doc["name"] == "snap-only" and doc["manifest"]["schema_version"] == "1.3"

    from tests.app._apptest import open_page

    at = open_page("memory", run_path=tmp_path / "runs" / "snap-only")
    infos = [i.value for i in at.info]
    assert any(i.startswith("This run holds memory snapshots only") for i in infos), infos
    assert not any("the Recorder writes one per step" in i for i in infos)
