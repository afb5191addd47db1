"""What a new server's first visit of a page imports after ``debugkit ui``'s preload
(pages/_serve.py): nothing of debugkit, the pages, plotly, pandas or pyarrow. Each import
left to the first visit was CPU time before that page's first chart (30-80 ms a page,
``bench/pages.py``'s cold column). Each page is opened in a new process, so that nothing
another test imported hides an import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PROBE = """
import importlib, sys
from pages._serve import PAGE_MODULES, PRELOAD, preload
assert preload(PRELOAD) == []
for name in PAGE_MODULES:  # the launcher imports them once the server's runtime exists
    importlib.import_module(name)
from streamlit.testing.v1 import AppTest
before = set(sys.modules)
at = AppTest.from_file({app!r}, default_timeout=120)
for k, v in {query!r}.items():
    at.query_params[k] = v
at.switch_page({page!r})
at.run()
assert not at.exception, [e.value for e in at.exception]
assert {page!r}.endswith("home.py") or at.get("plotly_chart"), "no chart drawn"
assert "torch" not in sys.modules
print("imported:", " ".join(sorted(m for m in set(sys.modules) - before
                                    if m.split(".")[0] in ("debugkit", "pages", "plotly", "_plotly_utils",
                                                           "pandas", "pyarrow"))))
"""

PAGES = [("home", {}), ("overview", {"run": "digits-bad-label"}), ("scalars", {"run": "digits-exploding"}),
         ("gradients", {"run": "digits-exploding"}), ("layers", {"run": "digits-dead-relu"}),
         ("memory", {"run": "memory-leak"}), ("profiler", {"run": "digits-profiled"}),
         ("distributed", {"run": "ddp-straggler"}), ("checkpoints", {"run": "digits-resumed"}),
         ("compare", {"run": "digits-compare-lr", "base": "digits-compare-base"}),
         ("audit", {"run": "credit-audit"})]


@pytest.mark.parametrize("page, query", PAGES, ids=[p for p, _ in PAGES])
def test_a_new_servers_first_visit_imports_nothing_the_preload_could_have(page, query, tmp_path):
    code = PROBE.format(app=str(ROOT / "app.py"), query=query, page=f"pages/{page}.py")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "DEBUGKIT_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "imported:", out.stdout[-2000:]


def test_the_page_modules_list_names_every_shared_page_module():
    """PAGE_MODULES names every pages/_*.py but the launcher itself: a new one is
    preloaded too."""
    from pages._serve import PAGE_MODULES

    files = {f"pages.{p.stem}" for p in (ROOT / "pages").glob("_*.py")} - {"pages._serve"}
    assert set(PAGE_MODULES) == files


def test_the_page_modules_are_imported_only_once_the_runtime_exists(monkeypatch):
    """Their ``st.cache_data`` functions are made for the server's runtime: imported
    before it exists, Streamlit would log a warning for each and make them for a
    runtime-less cache. The launcher's thread waits for it (and gives up after a while)."""
    from streamlit.runtime import Runtime

    import pages._serve as serve

    imported, checks = [], []
    monkeypatch.setattr(serve, "_imported", lambda name: imported.append((name, len(checks))) or True)
    # and then the heap they made is frozen (no collection beside a visitor's script run)
    monkeypatch.setattr(serve, "freeze_heap", lambda collect=True: imported.append(("frozen", collect)))
    monkeypatch.setattr(Runtime, "exists", classmethod(lambda cls: checks.append(1) or len(checks) > 3))
    assert serve.preload_pages(("pages._ui", "pages._data"), wait_s=30) == []
    assert imported == [("pages._ui", 4), ("pages._data", 4), ("frozen", False)]  # after the runtime came

    checks.clear()
    monkeypatch.setattr(Runtime, "exists", classmethod(lambda cls: False))
    imported.clear()
    assert serve.preload_pages(("pages._ui",), wait_s=0.2) == ["pages._ui"] and imported == []


def test_the_launcher_preloads_before_the_server_opens_its_port(tmp_path):
    """``debugkit ui``'s launcher imports :data:`PRELOAD` before it starts Streamlit (which
    opens the port), not in a thread beside it: the thread's imports held the GIL while
    Streamlit started and while the first browser loaded the front end (a visit right
    after start-up drew its first chart 0.3 s later). New process: a clean sys.modules."""
    code = """
import sys
import pages._serve as serve
from streamlit.web import cli
seen = {}
def started(prog_name):
    seen["missing"] = [m for m in serve.PRELOAD if m not in sys.modules]
    return 0
cli.main = started
assert serve.main(["run", "app.py"]) == 0
print("missing:", seen["missing"])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "DEBUGKIT_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "missing: []", out.stdout[-2000:]


def test_the_launcher_leaves_the_preloaded_heap_out_of_every_collection(tmp_path):
    """Streamlit collects garbage in full after every script run, holding the GIL: with
    the preload's 140,000 objects that took 65 ms, and the event loop sent the page's
    last messages (the Bias audit's first chart among them) that much later. The launcher
    freezes the heap (``gc.freeze``) before Streamlit starts, after a collection, so a
    collection walks only what was made since. New process: the launcher as ``debugkit
    ui`` runs it, the server's start replaced by a probe of the collector."""
    code = """
import gc
import pages._serve as serve
from streamlit.web import cli
seen = {}
def started(prog_name):
    gc.collect()  # garbage made before the freeze would be frozen, not collected
    seen["frozen"], seen["walked"] = gc.get_freeze_count(), len(gc.get_objects())
    return 0
cli.main = started
assert serve.main(["run", "app.py"]) == 0
print(seen["frozen"], seen["walked"])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "DEBUGKIT_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-3000:]
    frozen, walked = map(int, out.stdout.split()[-2:])
    assert frozen > 50_000 and walked < frozen / 20, (frozen, walked)


def test_the_heap_freeze_collects_first_unless_told_not_to(monkeypatch):
    import gc

    import pages._serve as serve

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("collect") or 0)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    serve.freeze_heap()
    serve.freeze_heap(collect=False)
    assert calls == ["collect", "freeze", "freeze"]
