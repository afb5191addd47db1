"""A small version of bench/load.py: concurrent sessions and an upload, no errors."""

from __future__ import annotations

import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.browser


@pytest.mark.timeout(1200)
def test_concurrent_sessions_and_an_upload_render_without_errors():
    sys.path.insert(0, str(ROOT / "bench"))
    from load import run_load

    r = run_load(sessions=3, rows=20_000, timeout_s=480)
    assert r["errors"] == []
    assert len(r["overview"]) == len(r["gradients"]) == 3  # every session saw both charts
    assert len(r["upload"]) == 1
    assert r["store_after"] == ["load-20000", "uploaded-run"]
    assert r["rows"] == 19_998 and r["server_peak_rss_bytes"] > 0
