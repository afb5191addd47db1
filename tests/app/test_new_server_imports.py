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
assert {page!r}.endswith("home.py") or at.get("plotly_chart") or at.get("bidi_component"), "no chart drawn"
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


def test_the_launcher_reads_the_page_url_paths_from_app_py(tmp_path):
    from pages._serve import page_url_paths

    assert page_url_paths(str(ROOT / "app.py")) == [
        "home", "overview", "scalars", "gradients", "layers", "memory", "profiler", "distributed",
        "checkpoints", "replay", "compare", "audit"]
    odd = tmp_path / "app.py"
    odd.write_text('PAGES = [("pages/a.py", "A", None, "a-1"), ("pages/b.py", "B", None, "../b"), "c"]\n')
    assert page_url_paths(str(odd)) == ["a-1"]  # what is not a URL path of one segment is left out
    odd.write_text("import streamlit as st\n")
    assert page_url_paths(str(odd)) == []
    assert page_url_paths(str(tmp_path / "missing.py")) == []


FRONTEND_PROBE = """
import json, os
from streamlit import file_util
import pages._serve as serve
before = file_util.get_static_dir()
made = serve.serve_index_for_pages({app!r})
after = file_util.get_static_dir()
index = open(os.path.join(after, "index.html")).read() if made else ""
print(json.dumps({{"made": made, "before": before, "after": after, "index": index,
                   "links": sorted((n, os.path.realpath(os.path.join(after, n))) for n in os.listdir(after)
                                   if n != "index.html")}}))
"""


def _frontend(app, tmp_path) -> dict:
    import json

    out = subprocess.run([sys.executable, "-c", FRONTEND_PROBE.format(app=str(app))], cwd=ROOT,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_launcher_serves_streamlits_front_end_with_its_script_first(tmp_path):
    """A mirror of Streamlit's static folder: its own files and folders linked, its
    index.html with the launcher's script at the top of ``<head>`` (before Streamlit's
    module script, which reads ``window.__streamlit`` when it loads), naming this app's
    pages and Streamlit's Plotly chunk; the static routes are pointed at it. The folder is
    removed when the process exits."""
    got = _frontend(ROOT / "app.py", tmp_path)
    assert got["made"] and got["after"] == got["made"] != got["before"]
    assert got["made"].startswith(str(tmp_path))
    original = open(os.path.join(got["before"], "index.html")).read()
    head = got["index"].split("<head>", 1)[1]
    assert head.index("window.__streamlit") < head.index('<script type="module"')
    assert '"audit"' in head and '"profiler"' in head and '"home"' in head
    chunk = [f for f in os.listdir(os.path.join(got["before"], "static", "js")) if f.startswith("PlotlyChart.")]
    assert f'"{chunk[0]}"' in head
    start = got["index"].index("<script>\n/* debugkit ui")
    end = got["index"].index("</script>\n", start) + len("</script>\n")
    assert got["index"][:start - 1] + got["index"][end:] == original  # nothing else of Streamlit's page changed
    assert got["links"] == sorted([n, os.path.realpath(os.path.join(got["before"], n))]
                                  for n in os.listdir(got["before"]) if n != "index.html")
    assert not os.path.exists(got["made"])  # gone with the process


def test_without_a_page_list_the_front_end_is_served_as_it_is(tmp_path):
    app = tmp_path / "app.py"
    app.write_text("import streamlit as st\nst.write('no page list')\n")
    got = _frontend(app, tmp_path)
    assert got["made"] is None and got["after"] == got["before"]
