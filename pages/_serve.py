"""The Streamlit server of ``debugkit ui``, with the pages' imports done while it starts.

``python pages/_serve.py run app.py [streamlit options]`` is ``python -m streamlit run
...`` that first imports what the dashboard pages need (pandas, pyarrow, plotly and
debugkit's readers, analyses and charts; :data:`PRELOAD`) and builds a figure of each
kind the pages draw (:func:`warm_plotly`), before the server opens its port; the pages'
shared modules (:data:`PAGE_MODULES`) follow in a thread once Streamlit's runtime exists.
Streamlit imports nothing of a page until a browser opens it, so without this the first
visit of each page pays those imports (``bench/pages.py --preload both``).

It also serves Streamlit's front end with a script of its own at the top of
``index.html`` (:func:`serve_index_for_pages`): on a page's URL the front end asks the
server's root first instead of a 404 and a 100 ms back-off, and a chart page fetches the
Plotly chart code while the front end starts. ``DEBUGKIT_FRONTEND_PATCH=0`` serves the
front end as Streamlit ships it.

torch is left out: only Replay and Checkpoints use it, and its import (1-2 s of CPU)
would compete with the first page on a two-core machine. ``DEBUGKIT_PRELOAD=0`` turns
the preload off. It lives with the pages, not in ``debugkit/``: the library never imports
Streamlit (``tests/test_layers.py``).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading

PRELOAD = (
    "numpy",
    # st.set_page_config imports PIL for any page icon that is not an emoji or a Material
    # icon (app.py's favicon is a data URL), in each new server's first script run
    "PIL.Image",
    "PIL.ImageFile",
    "pandas",
    "pyarrow.ipc",
    # the first Parquet read (the audit's rows, its size check) imports pyarrow's Parquet
    # and dataset modules, and the first Arrow table made a DataFrame pandas_compat: 16 ms
    # of CPU of a new server's first Bias audit / Profiler visit before its chart
    "pyarrow.parquet",
    "pyarrow.dataset",
    "pyarrow.pandas_compat",
    "plotly.graph_objects",
    # the Material icon names Streamlit checks a page's first icon against (st.info, st.page_link)
    "streamlit.material_icon_names",
    "debugkit.io.run",
    "debugkit.io.served_runs",
    "debugkit.diagnose.run_summaries",
    "debugkit.analysis.findings",
    "debugkit.analysis.gradients",
    "debugkit.analysis.memory",
    "debugkit.analysis.profile",
    "debugkit.analysis.distributed",
    "debugkit.io.run_profiles",
    "debugkit.io.profile_cache",
    "debugkit.charts.gradients",
    "debugkit.charts.memory",
    "debugkit.charts.profile",
    "debugkit.charts.distributed",
    "debugkit.charts.scalars",
    # what the chart pages' first visits imported after the above (each listed module
    # pulls in the rest): 30-80 ms of CPU before a new server's first chart of a page, 30 ms
    # of it in every page (the router's share-link check, the CSV button, TensorBoard runs)
    "debugkit.audit.share",
    "debugkit.audit.stored_audits",
    "debugkit.audit.auditor",
    "debugkit.audit.report",
    "debugkit.charts.audit",
    "debugkit.charts.export",
    "debugkit.analysis.recorded_paths",
    "debugkit.analysis.scalars",
    "debugkit.io.tensorboard",
    "debugkit.io.chrome_trace",
    "debugkit.io.profile_types",
    "debugkit.io.profiles",
    "debugkit.io.run_memsnaps",
    "debugkit.io.rank_traces",
    "debugkit.diagnose.failures",
    "debugkit.diagnose.gradients",
    "debugkit.diagnose.memory",
    "debugkit.diagnose.profiles",
    "debugkit.diagnose.distributed",
    "debugkit.diagnose.checkpoints",
    "debugkit.diagnose.layers",
    "debugkit.diagnose.serving",
    "debugkit.diagnose.audit",
    "debugkit.recorder",  # the failures' descriptions (torch is imported only when recording)
    "debugkit.replay",
    "debugkit.analysis.gradients.layers",
    "debugkit.analysis.gradients.steps",
    "debugkit.analysis.checkpoints",
    "debugkit.analysis.run_diff",
    "debugkit.run_comparison",
    "debugkit.io.compare_facts",
    "debugkit.analysis.kinds",
    "debugkit.io.distributed",
    "debugkit.checkpoints",
    "debugkit.charts.checkpoints",
    "debugkit.charts.run_overlay",
    "debugkit.charts.layers",
    "debugkit.analysis.collectives",
    "debugkit.io.collapsed",
    "debugkit.io.speedscope",
    "debugkit.io.stackdump",
    "debugkit.replay.batchcheck",
    "debugkit.replay.batchcheck_numpy",
    "debugkit.replay.datachecks",
    "debugkit.replay.guard_suggestion",
    "safetensors.numpy",
    "pandas.core.methods.to_dict",
    "pandas.core.arrays.arrow.extension_types",
    "pandas.core.reshape.reshape",
    "plotly.colors",
    "plotly.subplots",
)

#: The pages' shared modules (pages/_*.py but this one), imported once the server's
#: runtime exists (their ``st.cache_data`` functions are made for it): 20-40 ms of a new
#: server's first visit of a page otherwise.
PAGE_MODULES = ("pages._auth", "pages._data", "pages._flamegraph", "pages._inference", "pages._profile_dump",
                "pages._profile_load", "pages._profile_sampled", "pages._profile_trace",
                "pages._query", "pages._routing", "pages._runs", "pages._share", "pages._sidebar",
                "pages._ui")


def warm_plotly() -> None:
    """Build and serialise one small figure: plotly loads its figure machinery (base
    types, layout validators, the JSON encoder) on the first figure, 0.05-0.07 s here,
    which the first chart page would otherwise pay; and one with the audit's template
    (``plotly_white``, loaded and validated on its first use: 0.07-0.1 s of the Bias
    audit's first chart on a new server); and one of a NumPy array: plotly hands every
    array to narwhals, which on its first one lists the installed packages' entry points
    for its plugins (7-27 ms of CPU of a page's first chart on a new server)."""
    import numpy as np
    import plotly.graph_objects as go
    import plotly.io as pio

    pio.to_json(go.Figure(go.Bar(y=np.zeros(1)), layout={"height": 100}), validate=False)
    pio.to_json(go.Figure(go.Bar(y=[0]), layout={"height": 100, "template": "plotly_white"}), validate=False)
    # and the trace types and layout parts the pages' first charts use, each of whose
    # classes plotly imports, and whose validators it makes, on its first use (the Memory
    # page's first timeline: 65 ms on a new server, 26 ms after)
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=["a", "b"])
    line = {"color": "#555", "dash": "dot", "width": 1}
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines+markers", name="a", line=line,
                             marker={"size": 4, "color": "#555", "symbol": "x"}, legendgroup="a",
                             customdata=[0, 1], hovertemplate="%{y}<extra></extra>",
                             error_x={"type": "data", "array": [0, 0], "visible": True},
                             textfont={"color": "#555"}), row=1, col=1)
    fig.add_trace(go.Scattergl(x=[0, 1], y=[0, 1], mode="lines", line=line), row=2, col=1)
    fig.add_trace(go.Heatmap(z=[[0, 1]], colorscale="Viridis", colorbar={"title": {"text": "a"}}), row=2, col=1)
    fig.update_layout(
        height=100, margin={"l": 4, "r": 4, "t": 4, "b": 4}, hovermode="closest",
        legend={"orientation": "h", "y": -0.1}, title={"text": "a"},
        shapes=[{"type": "rect", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": 0, "y1": 1,
                 "fillcolor": "#eee", "line": {"width": 0}},
                {"type": "line", "xref": "x", "x0": 0, "x1": 0, "yref": "y domain", "y0": 0, "y1": 1, "line": line}],
        annotations=list(fig.layout.annotations) + [
            {"text": "a", "xref": "x domain", "x": 0, "yref": "y", "y": 1, "showarrow": False,
             "font": {"size": 11}, "bgcolor": "#fff"}])
    fig.update_xaxes(type="log", tickvals=[1], ticktext=["1"], title_text="a", dtick=1)
    fig.update_yaxes(title_text="a", rangemode="tozero", range=[0, 1])
    pio.to_json(fig, validate=False)
    pio.to_json(go.Figure(go.Bar(x=[1], y=["a"], orientation="h", marker={"color": "#555"}, text=["a"],
                                 textposition="outside")), validate=False)


def preload_pages(names=PAGE_MODULES, wait_s: float = 60.0) -> list[str]:
    """Import the pages' modules once Streamlit's runtime exists (waiting up to
    ``wait_s``); returns the names that failed (every one if the runtime never came)."""
    import time

    from streamlit.runtime import Runtime

    deadline = time.monotonic() + wait_s
    while not Runtime.exists():
        if time.monotonic() > deadline:
            return list(names)
        time.sleep(0.05)
    failed = [name for name in names if not _imported(name)]
    # the page modules and the runtime made since the first freeze: no collection here (a
    # visitor's script may run beside this thread; their garbage is small and made once)
    freeze_heap(collect=False)
    return failed


def _imported(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - the page that needs it says why
        return False
    return True


#: Where the server reads runs and audits from: a URL here means an object store whose
#: client library (s3fs with aiobotocore and aiohttp: about 0.7 s of CPU) the first page
#: would otherwise import.
STORE_SETTINGS = ("DEBUGKIT_ROOTS", "DEBUGKIT_STORE", "DEBUGKIT_AUDIT_STORE")


def store_packages(env=None) -> list[str]:
    """The fsspec implementation modules (``s3fs``, ``gcsfs``, ...) of the URL schemes in
    :data:`STORE_SETTINGS`, in the order they first appear."""
    import re

    env = os.environ if env is None else env
    schemes = []
    for name in STORE_SETTINGS:
        for scheme in re.findall(r"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*)://", env.get(name, "")):
            if scheme not in ("file", "local") and scheme not in schemes:
                schemes.append(scheme)
    if not schemes:
        return []
    from fsspec.registry import known_implementations

    out = []
    for scheme in schemes:
        cls = (known_implementations.get(scheme) or {}).get("class", "")
        module = cls.split(".")[0]
        if module and module != "fsspec" and module not in out:
            out.append(module)
    return out


def preload_names(env=None) -> tuple[str, ...]:
    """:data:`PRELOAD`, with the object-store packages of the server's settings
    (:func:`store_packages`) right after the run reader that lists the store."""
    at = PRELOAD.index("debugkit.io.served_runs") + 1
    return PRELOAD[:at] + tuple(store_packages(env)) + PRELOAD[at:]


def preload(names=PRELOAD) -> list[str]:
    """Import ``names`` in order, then :func:`warm_plotly`; returns the names that failed
    (a missing optional dependency is the page's to report, with its own message, when
    it is opened)."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the page that needs it says why
            failed.append(name)
    if "plotly.graph_objects" not in failed:
        try:
            warm_plotly()
        except Exception:  # noqa: BLE001 - the first chart page reports its own errors
            failed.append("warm_plotly")
    return failed


def freeze_heap(collect: bool = True) -> None:
    """Move every object alive now out of the garbage collector's reach (``gc.freeze``),
    after a full collection (``collect``) so that no garbage is kept.

    Streamlit runs a full collection after every script run (``runner.postScriptGC``),
    holding the GIL throughout: with pandas, pyarrow, plotly and debugkit imported it
    walks some 140,000 objects, 65 ms of CPU here, and the event loop, which sends the
    page's messages, waits for it. The script has enqueued its elements by then but the
    loop has not sent them all: on the Bias audit, whose first chart comes mid-page, the
    chart reached the browser 90 ms (warm) to 280 ms (a new server's first visit) late.
    The imported modules live as long as the server, so leaving them out of every
    collection loses nothing; what the script runs allocate is still collected.
    """
    import gc

    if collect:
        gc.collect()
    gc.freeze()


#: Pages whose first visit draws no Plotly chart (their URL paths): the front end is not
#: told to fetch plotly.js early there.
NO_CHART_PAGES = ("home", "replay")


def page_url_paths(app_file: str) -> list[str]:
    """The URL paths of the app's pages: the last item of each entry of ``app.py``'s
    ``PAGES`` list, read without running the app (empty if that list is not found)."""
    import ast

    try:
        with open(app_file, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PAGES" for t in node.targets)
                and isinstance(node.value, ast.List)):
            out = []
            for entry in node.value.elts:
                last = entry.elts[-1] if isinstance(entry, ast.Tuple) and entry.elts else None
                if isinstance(last, ast.Constant) and isinstance(last.value, str) and _is_url_path(last.value):
                    out.append(last.value)
            return out
    return []


def _is_url_path(text: str) -> bool:
    """One path segment of the kind ``st.Page(url_path=...)`` takes here."""
    import re

    return re.fullmatch(r"[a-z0-9_-]+", text) is not None


#: What the front end's page (index.html) runs first, before Streamlit's own code.
HEAD_SCRIPT = """<script>
/* debugkit ui (pages/_serve.py): a page's own URL (/audit) is not where the server answers
   (its root is): Streamlit's front end would first ask /audit/_stcore/health, get a 404, wait
   100 ms and ask /_stcore/health. Name the root for the app's pages; and on a chart page start
   fetching the Plotly chart code now, with the front end's own, not when the chart arrives. */
(function () {
  var pages = %(pages)s, noChart = %(no_chart)s, plotly = %(plotly)s;
  var path = window.location.pathname.replace(/\\/+$/, "");
  var cut = path.lastIndexOf("/"), page = path.slice(cut + 1);
  if (pages.indexOf(page) < 0) return;
  window.__streamlit = Object.assign({}, window.__streamlit || {},
                                     {BACKEND_BASE_URL: window.location.origin + path.slice(0, cut) + "/"});
  if (plotly && noChart.indexOf(page) < 0) {
    var link = document.createElement("link");
    link.rel = "modulepreload"; link.crossOrigin = ""; link.href = "./static/js/" + plotly;
    document.head.appendChild(link);
  }
})();
</script>
"""


def serve_index_for_pages(app_file: str) -> str | None:
    """Serve Streamlit's front end with :data:`HEAD_SCRIPT` in its ``index.html``.

    A mirror of Streamlit's static folder (a link to each of its files and folders, and
    its own ``index.html``) is made in a temporary folder, removed when the server exits,
    and Streamlit's static routes are pointed at it. Returns the folder, or None where
    anything is not as expected (no page list, no ``<head>``, no symbolic links): the
    front end is then served as it is.
    """
    import atexit
    import json
    import shutil
    import tempfile

    try:
        from streamlit import file_util
    except ImportError:  # pragma: no cover - Streamlit is a dependency
        return None
    pages = page_url_paths(app_file)
    src = getattr(file_util, "get_static_dir", lambda: "")()
    index = os.path.join(src, "index.html")
    if not pages or not os.path.isfile(index):
        return None
    with open(index, encoding="utf-8") as f:
        html = f.read()
    if html.count("<head>") != 1:
        return None
    js_dir = os.path.join(src, "static", "js")
    chunks = sorted(f for f in os.listdir(js_dir) if f.startswith("PlotlyChart.") and f.endswith(".js")) \
        if os.path.isdir(js_dir) else []
    script = HEAD_SCRIPT % {"pages": json.dumps(pages), "no_chart": json.dumps(list(NO_CHART_PAGES)),
                            "plotly": json.dumps(chunks[0] if len(chunks) == 1 else None)}
    dest = tempfile.mkdtemp(prefix="debugkit-frontend-")
    try:
        for name in os.listdir(src):
            if name != "index.html":
                os.symlink(os.path.join(src, name), os.path.join(dest, name))
        with open(os.path.join(dest, "index.html"), "w", encoding="utf-8") as f:
            f.write(html.replace("<head>", "<head>\n" + script, 1))
    except OSError:
        shutil.rmtree(dest, ignore_errors=True)
        return None
    atexit.register(shutil.rmtree, dest, True)
    file_util.get_static_dir = lambda: dest
    return dest


def _navigation_mode() -> None:
    """Start the server in ``st.navigation`` mode.

    A main script with a ``pages/`` folder beside it starts Streamlit in its older
    pages-directory mode, where a fresh server's first request runs the page file
    directly until a script run calls ``st.navigation``; ``pages._routing.page_guard``
    then reruns it under the router (0.1 s of every cold first page). app.py always
    calls ``st.navigation``, which sets this same flag on its first run; setting it
    before the server starts routes the first request through app.py at once. The guard
    stays for a plain ``streamlit run app.py``.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without the older mode
        return
    PagesManager.uses_pages_directory = False


def _no_direct_run_check() -> None:
    """Skip Streamlit's check for a script run without ``streamlit run``.

    The first element any session draws on a server makes Streamlit ask whether it runs
    in a REPL (``inspect.stack()``, which resolves the source file of every module loaded:
    with pandas, pyarrow, plotly and debugkit imported, 40-100 ms of CPU in the first
    visit's script run before its first element, more while the preload thread holds the
    GIL; ``bench/pages.py``'s cold shell floor). Its only outcome is a warning for a script
    run directly with ``python``, which this launcher never is: it starts ``streamlit run``.
    """
    try:
        import streamlit.delta_generator as dg
    except ImportError:  # pragma: no cover - Streamlit is a dependency
        return
    dg._use_warning_has_been_displayed = True


def main(argv: list[str] | None = None) -> int:
    # Run as a script, this folder is sys.path[0]: its page files (memory.py, audit.py,
    # ...) must not shadow modules of those names.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    from streamlit.web import cli

    _navigation_mode()
    _no_direct_run_check()
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "run" and os.environ.get("DEBUGKIT_FRONTEND_PATCH", "1") != "0":
        serve_index_for_pages(args[1])
    if os.environ.get("DEBUGKIT_PRELOAD", "1") != "0":
        # Before the server opens its port, not beside it: a thread's imports held the GIL
        # while Streamlit started and while the first browser loaded the front end, and a
        # visit right after start-up drew its first chart 0.3 s later (Profiler, median of
        # 5: 3.10 s with the thread, 2.77 s after it), with the port open 0.3 s sooner:
        # later from the launch to the chart. The pages' own modules wait for the runtime.
        preload(preload_names())
        freeze_heap()
        threading.Thread(target=preload_pages, name="debugkit-preload", daemon=True).start()
    sys.argv = ["streamlit", *(sys.argv[1:] if argv is None else argv)]
    return cli.main(prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main())
