"""The audit worker's size is the operator's, not the upload's (issue 28, item 8): through
the Audit page, an uploaded ``models/mlp.json`` cannot size the model the allowed loader
builds, the worker's memory cap is a fixed default, and a server computes at most
``DEBUGKIT_AUDIT_WORKERS`` audits at once, telling the next visitor to try again."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from debugkit.audit.targets import MSG_OUT_OF_BOUNDS, write_targets
from debugkit.audit.worker import DEFAULT_MEMORY_MB, MSG_BUSY, audit_slot
from debugkit.io.served_runs import default_store

from ..conftest import SAMPLE_RUNS
from ._apptest import new_app


def uploaded_credit_run(name="uploaded-credit"):
    run = default_store() / name
    shutil.copytree(SAMPLE_RUNS / "credit-audit", run, ignore=shutil.ignore_patterns("audits"))
    return run


def compute(run_id: str, model: str | None = None):
    """Open the Audit page of ``run_id``, pick ``model`` and click *Compute audit*."""
    at = new_app(timeout=240, run=run_id)
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    next(n for n in at.number_input if n.label == "Bootstrap resamples").set_value(0)
    if model is not None:
        box = next(s for s in at.selectbox if s.label == "Model")
        box.set_value(model)
    next(b for b in at.button if b.label == "Compute audit").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def errors(at) -> str:
    return "\n".join(e.value for e in at.error)


def test_an_uploaded_mlp_json_cannot_size_the_model(monkeypatch):
    monkeypatch.delenv("DEBUGKIT_AUDIT_LOADERS", raising=False)  # the default: the sample's loader
    monkeypatch.delenv("DEBUGKIT_AUDIT_BOUNDS", raising=False)
    run = uploaded_credit_run()
    meta = json.loads((run / "models" / "mlp.json").read_text())
    meta["factory_kwargs"]["hidden"] = 16000
    (run / "models" / "mlp.json").write_text(json.dumps(meta))
    at = compute("uploaded-credit", "mlp")
    want = MSG_OUT_OF_BOUNDS.format(what="uploaded-credit/models/mlp.json factory_kwargs",
                                    name="hidden", value=16000, lo=1, hi=1024)
    assert want in errors(at)
    assert not (run / "audits").exists() or not any((run / "audits").iterdir())


def test_the_operator_sets_the_bounds(monkeypatch):
    """A bound in DEBUGKIT_AUDIT_BOUNDS replaces the loader's: n_features=61 is refused
    under 1..8, and a target's own kwargs are bounded too (seed=7 under 0..5)."""
    monkeypatch.delenv("DEBUGKIT_AUDIT_LOADERS", raising=False)
    run = uploaded_credit_run()
    monkeypatch.setenv("DEBUGKIT_AUDIT_BOUNDS", "n_features=1..8")
    at = compute("uploaded-credit", "mlp")
    assert MSG_OUT_OF_BOUNDS.format(what="uploaded-credit/models/mlp.json factory_kwargs",
                                    name="n_features", value=61, lo=1, hi=8) in errors(at)
    write_targets(run, [{"name": "gbm", "loader": "examples.credit:audit_target",
                         "kwargs": {"model": "gbm", "seed": 7}}])
    monkeypatch.setenv("DEBUGKIT_AUDIT_BOUNDS", "seed=0..5")
    at = compute("uploaded-credit")
    assert MSG_OUT_OF_BOUNDS.format(what="audit_targets.json: target 'gbm' kwargs", name="seed",
                                    value=7, lo=0, hi=5) in errors(at)


def test_a_busy_server_says_try_again(monkeypatch):
    """With every slot taken (here the one slot of DEBUGKIT_AUDIT_WORKERS=1, held as a
    running audit holds it), *Compute audit* is refused at once with a clear message."""
    monkeypatch.delenv("DEBUGKIT_AUDIT_LOADERS", raising=False)
    monkeypatch.setenv("DEBUGKIT_AUDIT_WORKERS", "1")
    run = uploaded_credit_run()
    with audit_slot():
        at = compute("uploaded-credit", "gbm")
    assert MSG_BUSY.format(limit=1) in errors(at)
    assert not (run / "audits").exists() or not any((run / "audits").iterdir())


@pytest.fixture
def hog_loader(tmp_path, monkeypatch):
    """An operator's loader that asks for 6 GiB (``bytes(n)`` is calloc'd: untouched
    pages, so without a cap under 6 GiB it costs address space, not memory)."""
    mod = tmp_path / "hogloader"
    mod.mkdir()
    (mod / "__init__.py").write_text(textwrap.dedent('''
        def hog(run_dir):
            return {"big": bytes(6 << 30)}
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("DEBUGKIT_AUDIT_LOADERS", "hogloader:hog")
    return "hogloader:hog"


def test_the_default_memory_cap_is_fixed_not_half_the_machine(hog_loader, monkeypatch):
    monkeypatch.delenv("DEBUGKIT_AUDIT_MEMORY_MB", raising=False)
    run = uploaded_credit_run()
    write_targets(run, [{"name": "hog", "loader": hog_loader}])
    at = compute("uploaded-credit")
    assert f"out of memory under the cap of {DEFAULT_MEMORY_MB} MiB (DEBUGKIT_AUDIT_MEMORY_MB)" in errors(at)
