"""Checkpoint findings read weights without torch, and bfloat16 checkpoints still work."""

from __future__ import annotations

import subprocess
import sys

import torch

from debugkit import open_run
from debugkit.diagnose import checkpoints as ckpt_source
from tests.checkpoint_factory import train_with_checkpoints


def test_bfloat16_checkpoints_give_the_same_findings(tmp_path):
    train_with_checkpoints(tmp_path / "nan", nan_at=3, dtype=torch.bfloat16)
    found = ckpt_source.collect(open_run(tmp_path / "nan"), {})
    assert [(f.kind, f.step, f.layer) for f in found] == [("nonfinite_weights", 4, "2.weight")]

    train_with_checkpoints(tmp_path / "frozen", freeze_first=True, dtype=torch.bfloat16)
    found = ckpt_source.collect(open_run(tmp_path / "frozen"), {})
    assert [(f.kind, f.layer) for f in found] == [("frozen_layer", "0.weight")]
    assert set(found[0].evidence["layers"]) == {"0.weight", "0.bias"}


def test_checkpoint_findings_do_not_import_torch(tmp_path):
    train_with_checkpoints(tmp_path / "frozen", freeze_first=True)
    code = ("import sys; from debugkit import open_run; "
            "from debugkit.diagnose import checkpoints as c; "
            "found = c.collect(open_run('frozen'), {}); "
            "print([f.kind for f in found], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    assert out == "['frozen_layer'] False"
