"""Every page on a run that holds only scalars (a TensorBoard import), on a run deleted
while it is shown, and with a read-only run store: an empty state or a clear message,
never an exception. And every cache in the app layer is bounded."""

from __future__ import annotations

import ast
import math
import shutil
import stat

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT

from ._apptest import open_page

RUN_PAGES = {
    "overview": None,  # the loss curve is there; checked below
    "scalars": None,  # the loss curve (the default pick) is there too
    "gradients": "This run has no gradient norms yet.",
    "layers": "This run has no layer statistics.",
    "memory": "No memory rows yet",
    "profiler": "This run holds no profiles yet.",
    "distributed": "This run has a single rank.",
    "checkpoints": "This run has no checkpoints.",
    "replay": "This run has no failure capture.",
    "audit": "No audit stored in this run yet.",
}


@pytest.fixture(scope="module")
def scalars_only(tmp_path_factory):
    from torch.utils.tensorboard import SummaryWriter

    from debugkit.cli import main

    d = tmp_path_factory.mktemp("scalars")
    w = SummaryWriter(str(d / "tb"), flush_secs=1)
    for s in range(30):
        w.add_scalar("train/loss", 2 * math.exp(-s / 10), s)
        w.add_scalar("lr", 0.1, s)
    w.close()
    assert main(["import", "tensorboard", str(d / "tb"), str(d / "run")]) == 0
    return d / "run"


def _open(path, page) -> AppTest:
    at = open_page(page, check=False, run_path=path)
    assert not at.exception, (page, [e.value for e in at.exception])
    return at


@pytest.mark.parametrize("page", list(RUN_PAGES))
def test_every_page_on_a_scalars_only_run(scalars_only, page):
    at = _open(scalars_only, page)
    if RUN_PAGES[page] is None:
        assert len(at.get("plotly_chart")) == 1  # the loss curve
    else:
        assert any(i.value.startswith(RUN_PAGES[page]) for i in at.info), [i.value for i in at.info]
    assert not at.error


@pytest.mark.parametrize("page", list(RUN_PAGES))
def test_every_page_when_the_run_is_deleted_while_shown(tmp_path, monkeypatch, page):
    store = tmp_path / "store"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", store / "gone")
    monkeypatch.setenv("DEBUGKIT_STORE", str(store))
    at = open_page(page, run="gone")
    shutil.rmtree(store / "gone")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("is gone (deleted or moved)" in w.value for w in at.warning)
    assert any(i.value.startswith("Pick a run in the sidebar") for i in at.info)


def test_a_read_only_store_shows_runs_and_refuses_uploads_clearly(tmp_path, monkeypatch):
    """Pages read a run in a store they cannot write; an upload into it says why it failed
    and writes nothing. (As root, permission bits do not stop writes, so the store is made
    unwritable by replacing its incoming folder with a file, which fails for root too.)"""
    store = tmp_path / "store"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", store / "ro-run")
    before = sorted(str(p.relative_to(store)) for p in store.rglob("*"))
    (store / ".incoming").write_text("not a folder")  # any write under .incoming fails
    for p in store.rglob("*"):
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    store.chmod(0o555)
    monkeypatch.setenv("DEBUGKIT_STORE", str(store))
    try:
        for page in ("overview", "gradients", "checkpoints", "replay"):
            at = open_page(page, check=False, run="ro-run")
            assert not at.exception, (page, [e.value for e in at.exception])
        from pages import _sidebar  # noqa: F401

        class F:
            def __init__(self, name, data):
                self.name, self._d = name, data

            def read(self, n=-1):
                d, self._d = self._d, b""
                return d

            def getvalue(self):
                return self._d

        files = [F(f"up/{p.relative_to(ROOT / 'sample_runs' / 'digits-mlp').as_posix()}", p.read_bytes())
                 for p in sorted((ROOT / "sample_runs" / "digits-mlp").rglob("*")) if p.is_file()]
        from debugkit.errors import DebugkitError
        from debugkit.io.upload import unpack_files

        with pytest.raises((DebugkitError, OSError)) as err:
            unpack_files([(f.name, f) for f in files], store)
        assert "up" not in {p.name for p in store.iterdir()}
        assert str(err.value)
    finally:
        store.chmod(0o755)
        for p in store.rglob("*"):
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    (store / ".incoming").unlink()
    assert sorted(str(p.relative_to(store)) for p in store.rglob("*")) == before


def _cache_calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("cache_data", "cache_resource"):
            yield node


def test_every_app_cache_is_bounded():
    """So memory does not grow with the number of distinct runs opened: every
    st.cache_data in the app layer has max_entries and ttl (directly or via _data.CACHE)."""
    import pages._data as common

    assert common.CACHE["max_entries"] <= 64 and common.CACHE["ttl"] <= 3600
    found = 0
    for f in [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]:
        for call in _cache_calls(ast.parse(f.read_text())):
            found += 1
            kw = {k.arg for k in call.keywords if k.arg}
            spread = any(k.arg is None and ast.unparse(k.value).endswith("CACHE") for k in call.keywords)
            assert spread or {"max_entries", "ttl"} <= kw, f"{f.name}:{call.lineno}: unbounded cache"
    assert found >= 20
