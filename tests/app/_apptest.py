"""The one way tests open the app: an AppTest of app.py (router + pages), fresh session.

``new_app`` builds it (query params, a run path in session state, auth secrets) without
running it; ``open_page`` also switches to a page, runs it and, by default, checks that
no exception reached the page. Both are used directly by helper functions and through the
``app`` fixture (tests/app/conftest.py).
"""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from ..conftest import ROOT

APP = ROOT / "app.py"
#: Seconds one ``at.run()`` may take; pages that replay or audit pass more.
TIMEOUT_S = 120


def new_app(*, timeout: float = TIMEOUT_S, auth: dict | None = None, run_path=None, **query) -> AppTest:
    """An AppTest of the whole app, not yet run.

    ``auth`` goes to ``st.secrets["auth"]``, ``run_path`` to the session's run picked by
    path (``debugkit_run_path``), and every other keyword is a query parameter.
    """
    at = AppTest.from_file(str(APP), default_timeout=timeout)
    if auth is not None:
        at.secrets["auth"] = auth
    if run_path is not None:
        at.session_state["debugkit_run_path"] = str(run_path)
    for k, v in query.items():
        at.query_params[k] = v
    return at


def open_page(page: str | None = None, *, check: bool = True, **kwargs) -> AppTest:
    """``new_app(**kwargs)`` switched to ``page`` ("gradients" or "pages/gradients.py";
    None: the home page) and run; with ``check``, no exception reached the page."""
    at = new_app(**kwargs)
    if page is not None:
        at.switch_page(page if page.endswith(".py") else f"pages/{page}.py")
    at.run()
    if check:
        assert not at.exception, [e.value for e in at.exception]
    return at


def figures(at) -> dict[str, str]:
    """The figures a page draws with ``pages._ui.figures`` (label over value, the look of
    ``st.metric``), label -> value, in the order drawn; ``st.metric`` cards are included."""
    from html.parser import HTMLParser

    got: dict[str, str] = {}

    class Cells(HTMLParser):
        def __init__(self):
            super().__init__()
            self.part, self.label = None, None

        def handle_starttag(self, tag, attrs):
            cls = dict(attrs).get("class") or ""
            self.part = ("label" if "dk-figure-label" in cls else
                         "value" if "dk-figure-value" in cls else None)

        def handle_endtag(self, tag):
            self.part = None

        def handle_data(self, data):
            if self.part == "label":
                self.label = data
            elif self.part == "value" and self.label is not None:
                got[self.label] = data

    for el in at.get("html"):
        if 'class="dk-figures"' in el.proto.body:
            Cells().feed(el.proto.body)
    for m in at.metric:
        got[m.label] = m.value
    return got


#: The name of the Profiler's flamegraph component (pages._flamegraph.NAME).
FLAMEGRAPH = "debugkit.flamegraph"


def flames(at) -> dict:
    """The canvas flamegraphs a page drew (``pages._flamegraph``), key -> the data they were
    given (:func:`debugkit.charts.profile.flamegraph_data`)."""
    import json

    return {c.key: json.loads(c.proto.json) for c in at.get("bidi_component")
            if c.proto.component_name == FLAMEGRAPH}


def chart_keys(at) -> list:
    """The keys of the charts a page drew, in the order drawn: its plotly charts and its
    canvas flamegraphs."""
    out = []

    def walk(node):
        kind = getattr(node, "type", None)
        if kind == "plotly_chart" or (kind == "bidi_component" and node.proto.component_name == FLAMEGRAPH):
            out.append(node.key)
        for _, child in sorted(getattr(node, "children", {}).items()):
            walk(child)

    walk(at._tree)
    return out
