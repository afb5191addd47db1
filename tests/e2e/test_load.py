"""The load test, in the test run: bench/load.py with a few sessions on a smaller run.

It runs as a subprocess (its own event loop and Playwright instance, as a user runs the
benchmark) with a hard timeout; the test checks its outcome, never its timings.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.browser


def test_concurrent_sessions_and_an_upload_without_errors():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "load.py"), "--sessions", "4",
                           "--rows", "50000", "--timeout", "400"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "errors: 0" in out
    for page in ("overview", "gradients"):
        m = re.search(rf"{page}\s+time to a rendered chart: .* \((\d+) of (\d+) rendered\)", out)
        assert m and m.group(1) == m.group(2) == "4", out
    # the upload finished and became a run of its own beside the load run
    assert re.search(r"upload: [\d.]+ s; store now holds \['load-50000', 'uploaded-run'\]", out), out
    assert re.search(r"server peak RSS \d+ MiB", out)
