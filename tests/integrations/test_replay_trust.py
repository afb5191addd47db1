"""debugkit's own replay helpers (the integrations' factory and step functions) may run
once their hash matches, also when debugkit is installed in site-packages; nothing else
inside debugkit may be named by a capture (debugkit.replay.policy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from debugkit.recorder.capture import describe_callable
from debugkit.replay import code, policy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["checkout", "site-packages"])
def install(request, monkeypatch):
    if request.param == "site-packages":
        monkeypatch.setattr(code, "_site_dirs", lambda: [ROOT.resolve()])
    return request.param


@pytest.mark.parametrize("spec", sorted(policy.TRUSTED_HELPERS))
def test_trusted_helpers_verify_by_hash(install, tmp_path, spec):
    ident = code.identify("step_fn", describe_callable(spec), spec, code_roots=[tmp_path])
    assert ident.status == code.VERIFIED, ident.message


def test_a_trusted_helper_with_another_hash_needs_allow_code(install, tmp_path):
    spec = "debugkit.integrations.lightning:replay_training_step"
    entry = {**describe_callable(spec), "sha256": "0" * 64}
    ident = code.identify("step_fn", entry, spec, code_roots=[tmp_path])
    assert ident.status == code.CHANGED
    assert not ident.may_run(False) and ident.may_run(True)


def test_other_debugkit_callables_never_run(install):
    spec = "debugkit._fsutil:atomic_write_json"  # writes files: never a model factory
    ident = code.identify("model_factory", describe_callable(spec), spec, code_roots=[ROOT])
    assert ident.status == {"checkout": code.NOT_ALLOWED, "site-packages": code.INSTALLED}[install]
    assert not ident.may_run(True)


def test_a_trusted_name_in_another_file_is_not_trusted(tmp_path):
    fake = tmp_path / "debugkit" / "integrations" / "lightning.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("def replay_training_step(model, batch):\n    return None\n")
    assert not policy.is_trusted_helper(fake, "debugkit.integrations.lightning:replay_training_step")
    real = ROOT / "debugkit" / "integrations" / "lightning.py"
    assert policy.is_trusted_helper(real, "debugkit.integrations.lightning:replay_training_step")
    assert not policy.is_trusted_helper(real, "debugkit.integrations.lightning:DebugkitCallback")
