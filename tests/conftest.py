"""Shared fixtures. Tests build what they need (real runs recorded by the real Recorder)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
SAMPLE_RUNS = ROOT / "sample_runs"


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path_factory, monkeypatch):
    """Every test gets its own run store and cache, so nothing touches ./runs or ~."""
    base = tmp_path_factory.mktemp("dk")
    monkeypatch.setenv("DEBUGKIT_STORE", str(base / "store"))
    monkeypatch.setenv("DEBUGKIT_CACHE", str(base / "cache"))
    monkeypatch.delenv("DEBUGKIT_ROOTS", raising=False)
    monkeypatch.delenv("DEBUGKIT_ALLOWED_ROOTS", raising=False)
    yield


@pytest.fixture
def sample_runs() -> Path:
    return SAMPLE_RUNS
