"""Importing the audit package stays light; a missing optional package is a clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from debugkit.errors import MissingDependencyError

from ..conftest import ROOT


def test_import_does_not_pull_heavy_packages():
    code = ("import sys, debugkit, debugkit.audit, debugkit.audit.stored_audits, debugkit.audit.share, "
            "debugkit.cli.audit, debugkit.cli.share; "
            "print(sorted(m for m in ('shap', 'fairlearn', 'sklearn', 'torch', 'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module, call, match", [
    ("shap", lambda: __import__("debugkit.audit.explain", fromlist=["_shap"])._shap(),
     r"The bias audit's SHAP attributions needs the optional package 'shap'; install it with: pip install shap"),
    ("fairlearn.metrics", lambda: __import__("debugkit.audit.fairness", fromlist=["_fairlearn"])._fairlearn(),
     r"needs the optional package 'fairlearn'; install it with: pip install fairlearn"),
])
def test_missing_optional_package(monkeypatch, module, call, match):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` raise ImportError
    with pytest.raises(MissingDependencyError, match=match):
        call()
