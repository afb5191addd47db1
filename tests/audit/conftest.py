"""Fixtures of the audit tests: a real recorded run to store audits in, and the German
credit data with a fitted gradient-boosting pipeline (both built once per session)."""

from __future__ import annotations

import shutil

import pytest


def record_run(path):
    """A tiny real debugkit run (two steps of a linear model) to hold audits."""
    import torch

    from debugkit import Recorder

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(path, model, optimizer=opt, name="audit-test", flush_every_s=0.1) as rec:
        for _ in range(2):
            with rec.step():
                loss = model(torch.ones(4, 3)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                rec.log(loss=loss)
                opt.step()
    return path


@pytest.fixture(scope="session")
def _run_template(tmp_path_factory):
    return record_run(tmp_path_factory.mktemp("template") / "run")


@pytest.fixture
def run_dir(_run_template, tmp_path):
    """A fresh copy of a recorded run, per test."""
    dst = tmp_path / "run"
    shutil.copytree(_run_template, dst)
    return dst


@pytest.fixture(scope="session")
def credit():
    """German credit: raw X, y ("good"/"bad"), train/test positions, a GBM pipeline fitted
    on train."""
    from examples.credit import build_gbm, load_credit, split

    X, y = load_credit()
    tr, te = split(y, 0)
    gbm = build_gbm(X, 0).fit(X.iloc[tr], y.iloc[tr])
    Xte = X.iloc[te].reset_index(drop=True)
    yte = y.iloc[te].reset_index(drop=True)
    return {"X": X, "y": y, "train": tr, "test": te, "gbm": gbm, "X_test": Xte, "y_test": yte}
