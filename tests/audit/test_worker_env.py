"""The audit worker gets a scrubbed environment, not the server's (issue 28, item 1; the
replay child's side is tests/replay/test_code_in_runs.py)."""

from __future__ import annotations

import json
import textwrap

import pytest


def test_the_audit_worker_sees_a_scrubbed_environment(run_dir, tmp_path, monkeypatch):
    """*Compute audit* runs the operator's loader in a worker process: it sees the
    allow-listed variables and the operator's policy, never the server's secrets."""
    from debugkit.audit.targets import write_targets
    from debugkit.audit.worker import compute_audit
    from debugkit.errors import AuditError

    (tmp_path / "envloaders.py").write_text(textwrap.dedent('''
        import json, os


        def dump(run_dir, marker=""):
            with open(marker, "w") as f:
                json.dump(sorted(os.environ), f)
            raise ValueError("stopping here")
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEBUGKIT_AUDIT_LOADERS", "envloaders:dump")
    monkeypatch.setenv("DEBUGKIT_SECRET", "share-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-the-worker")
    marker = tmp_path / "env.json"
    write_targets(run_dir, [{"name": "env", "loader": "envloaders:dump", "kwargs": {"marker": str(marker)}}])
    with pytest.raises(AuditError, match="stopping here"):
        compute_audit(run_dir, "env", {}, timeout_s=120)
    seen = set(json.loads(marker.read_text()))
    assert {"PATH", "HOME", "DEBUGKIT_AUDIT_LOADERS"} <= seen
    assert not seen & {"AWS_SECRET_ACCESS_KEY", "DEBUGKIT_SECRET"}, seen
