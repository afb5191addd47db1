"""Helpers: run an example training script and the `debugkit` console script the way a
user does (a subprocess, from a scratch folder, with relative paths)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..conftest import console_script

ROOT = Path(__file__).resolve().parents[2]
TRAIN_TIMEOUT_S = 420
CLI_TIMEOUT_S = 300


def _env():
    # The example modules live in the repository; the user runs from the project root or
    # puts it on PYTHONPATH (docs/integrations.md).
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}


def train(cwd: Path, module: str, out: str, *args) -> subprocess.CompletedProcess:
    """``python -m examples.<module> --out OUT ARGS`` from ``cwd``."""
    return subprocess.run([sys.executable, "-m", f"examples.{module}", "--out", out, *args],
                          cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=TRAIN_TIMEOUT_S)


def debugkit(cwd: Path, *args) -> subprocess.CompletedProcess:
    """The installed ``debugkit`` console script from ``cwd``."""
    exe = console_script("debugkit")
    return subprocess.run([exe, *map(str, args)], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S)


def diagnose(cwd: Path, run: str) -> dict:
    proc = debugkit(cwd, "diagnose", run, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def replay(cwd: Path, run: str) -> dict:
    # The examples live in the repository, not in the scratch folder the user runs from.
    proc = debugkit(cwd, "replay", run, "--json", "--device", "cpu", "--code-root", ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def kinds(report: dict) -> list[tuple[str, int]]:
    return [(f["kind"], f["step"]) for f in report["findings"]]


def related(report: dict, kind: str) -> list[str]:
    """The kinds attached to the ``kind`` findings as the same event (``evidence.related``)."""
    return [r["kind"] for f in report["findings"] if f["kind"] == kind
            for r in f["evidence"].get("related", [])]


def checks(report: dict) -> dict:
    return {c["name"]: c["ok"] for c in report["checks"]}
