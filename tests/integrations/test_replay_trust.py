"""debugkit's own replay helpers run when debugkit is installed in site-packages, once
their hash matches; nothing else in the debugkit package may be named by a capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from debugkit.recorder.capture import describe_callable
from debugkit.replay import code

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def debugkit_in_site_packages(monkeypatch):
    monkeypatch.setattr(code, "_site_dirs", lambda: [ROOT.resolve()])


@pytest.mark.parametrize("spec", sorted(code.TRUSTED_SPECS))
def test_trusted_helpers_verify_by_hash(debugkit_in_site_packages, spec):
    ident = code.identify("step_fn", describe_callable(spec), spec)
    assert ident.status == code.VERIFIED, ident.message


def test_a_trusted_helper_with_another_hash_needs_allow_code(debugkit_in_site_packages):
    spec = "debugkit.integrations.lightning:replay_training_step"
    entry = {**describe_callable(spec), "sha256": "0" * 64}
    ident = code.identify("step_fn", entry, spec)
    assert ident.status == code.CHANGED
    assert not ident.may_run(False) and ident.may_run(True)


def test_other_debugkit_callables_stay_installed(debugkit_in_site_packages):
    spec = "debugkit._fsutil:atomic_write_json"  # writes files: never a model factory
    ident = code.identify("model_factory", describe_callable(spec), spec)
    assert ident.status == code.INSTALLED
    assert ident.message == code.MSG_INSTALLED.format(role="model_factory", spec=spec,
                                                      local=ident.local_file)
    assert not ident.may_run(False)
