"""Helpers for the replay tests: the CLI in a subprocess, small projects with real captures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 400


def run_cli(*args, cwd=ROOT, env_extra=None, timeout=CLI_TIMEOUT_S):
    """``python -m debugkit ARGS`` from ``cwd``; returns the CompletedProcess."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "debugkit", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def replay_json(*args, **kw) -> dict:
    proc = run_cli("replay", *args, "--json", **kw)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


# A tiny project whose model factory and step functions the tests record captures of.
PROJECT_SOURCE = '''
import ctypes
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def build_model(width=4):
    return nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 2))


def segfault_step(model, batch):
    ctypes.string_at(0)  # reads address 0: SIGSEGV


def hang_step(model, batch):
    while True:
        time.sleep(0.05)


def alloc_step(model, batch):
    big = torch.ones(4 * 2 ** 30, dtype=torch.uint8)  # 4 GiB
    return big.float().sum()


def write_marker(command="", width=4):
    open(command, "w").write("factory ran")
    return build_model(width)
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A package ``tproj`` on sys.path with the functions above, in a folder whose code
    the replay may run (``DEBUGKIT_CODE_ROOTS``: the viewer allows it)."""
    root = tmp_path / "proj"
    pkg = root / "tproj"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(textwrap.dedent(PROJECT_SOURCE))
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(root))
    _forget("tproj")
    yield root
    _forget("tproj")


def _forget(package: str) -> None:
    """Drop a test package from sys.modules so the next test's copy is the one found."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]


def record_failure(run_dir: Path, *, model_factory="tproj.model:build_model", step_fn=None,
                   factory_kwargs=None, exc=RuntimeError("boom in the training step"),  # noqa: B008  (only raised, never changed)
                   num_classes=2) -> Path:
    """Record a real run with one captured failing step (raised inside ``rec.step``)."""
    import torch

    from debugkit import Recorder

    torch.manual_seed(0)
    import importlib

    mod_name, _, fn = model_factory.partition(":")
    model = getattr(importlib.import_module(mod_name), fn)(**(factory_kwargs or {}))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(run_dir, model, optimizer=opt, model_factory=model_factory, step_fn=step_fn,
                   factory_kwargs=factory_kwargs or {}, num_classes=num_classes, flush_every_s=0.2)
    batch = (torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1]))
    with pytest.raises(type(exc)):
        with rec:
            with rec.step(batch):
                model(batch[0]).sum().backward()
                raise exc
    return run_dir
