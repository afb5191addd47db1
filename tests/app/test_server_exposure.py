"""What a visitor's input may make the server say or do (issue 28, items 9 and 10).

- No server paths in messages a visitor sees: ``?run=does-not-exist`` listed the absolute
  sample and store folders; a refusal by ``DEBUGKIT_ALLOWED_ROOTS`` listed the allowed
  folders.
- No server-side fetch of URLs nobody allowed: with ``DEBUGKIT_ALLOWED_ROOTS`` unset (the
  ``debugkit ui`` default), a typed ``http://127.0.0.1:PORT/x`` made the server send a
  GET. A URL opens only under a root the operator names; root lists with ports parse.
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from pathlib import Path

import pytest

from debugkit.io.fs import split_roots
from tests.conftest import ROOT, SAMPLE_RUNS

from ._apptest import new_app


def _texts(at) -> str:
    return "\n".join(str(x.value) for x in [*at.error, *at.sidebar.error, *at.warning,
                                            *at.sidebar.warning, *at.info, *at.caption,
                                            *at.markdown, *at.sidebar.markdown, *at.exception])


def test_an_unknown_run_link_names_no_server_folder():
    at = new_app(run="does-not-exist")
    at.run()
    assert not at.exception
    errors = [e.value for e in at.sidebar.error]
    assert any("does\\-not\\-exist" in e or "does-not-exist" in e for e in errors), errors
    shown = _texts(at)
    store = Path(os.environ["DEBUGKIT_STORE"])
    for folder in (str(SAMPLE_RUNS), str(store), str(store.parent), str(ROOT)):
        assert folder not in shown.replace("\\", ""), folder


def test_a_close_run_id_is_suggested():
    at = new_app(run="digits-mpl")
    at.run()
    errors = [e.value.replace("\\", "") for e in at.sidebar.error]
    assert any("did you mean 'digits-mlp'" in e for e in errors), errors


def test_a_refused_path_names_no_allowed_folder(tmp_path, monkeypatch):
    allowed = tmp_path / "served-area"
    (allowed / "store").mkdir(parents=True)
    monkeypatch.setenv("DEBUGKIT_STORE", str(allowed / "store"))
    monkeypatch.setenv("DEBUGKIT_ALLOWED_ROOTS", str(allowed))
    at = _open_typed(str(SAMPLE_RUNS / "digits-mlp"))
    errors = [e.value.replace("\\", "") for e in at.sidebar.error]
    assert any("outside the folders this server may open" in e for e in errors), errors
    assert str(allowed) not in _texts(at).replace("\\", "")


class _Counter(http.server.BaseHTTPRequestHandler):
    hits: list = []

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        type(self).hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def listener():
    """A real HTTP server on loopback (port 0: a free one) counting the requests it gets."""
    _Counter.hits = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", _Counter.hits
    srv.shutdown()
    srv.server_close()


def _open_typed(value: str):
    at = new_app()
    at.session_state["sidebar_open_path"] = True  # the box is drawn when its expander is open
    at.run()
    box = next(t for t in at.sidebar.text_input if t.label.startswith("Run directory"))
    box.input(value)
    next(b for b in at.sidebar.button if b.label == "Open").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_typed_url_sends_no_request_when_nobody_allowed_it(listener, monkeypatch):
    base, hits = listener
    monkeypatch.delenv("DEBUGKIT_ALLOWED_ROOTS", raising=False)
    monkeypatch.delenv("DEBUGKIT_ROOTS", raising=False)
    at = _open_typed(f"{base}/x")
    errors = [e.value.replace("\\", "") for e in at.sidebar.error]
    assert any("this server opens a URL only under a root its operator names" in e for e in errors), errors
    assert hits == []


def test_a_url_under_an_allowed_root_with_a_port_is_fetched(listener, monkeypatch, tmp_path):
    """An allowed root with a port (``http://127.0.0.1:PORT/runs``) parses as one root:
    a URL under it is fetched (there is no run there: a clean refusal after the request),
    one outside it is not."""
    base, hits = listener
    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setenv("DEBUGKIT_ALLOWED_ROOTS", os.pathsep.join([str(store), f"{base}/runs"]))
    at = _open_typed(f"{base}/elsewhere/x")
    assert hits == []
    assert any("outside the folders this server may open" in e.value.replace("\\", "")
               for e in at.sidebar.error)
    at = _open_typed(f"{base}/runs/x")
    assert hits and all(h.startswith("/runs/x") for h in hits), hits
    assert at.sidebar.error  # no run there: refused with a message, no traceback


@pytest.mark.parametrize("text, roots", [
    ("http://127.0.0.1:8629/runs", ["http://127.0.0.1:8629/runs"]),
    ("/srv/a:http://127.0.0.1:8629/runs:s3://b/runs", ["/srv/a", "http://127.0.0.1:8629/runs", "s3://b/runs"]),
    ("runs:s3://bucket/runs", ["runs", "s3://bucket/runs"]),
    ("http://host:80", ["http://host:80"]),
])
def test_root_lists_with_ports_parse(text, roots):
    assert split_roots(text) == roots


def test_local_paths_keep_todays_default(tmp_path, monkeypatch):
    """With the allow-list unset, a typed local run folder still opens."""
    monkeypatch.delenv("DEBUGKIT_ALLOWED_ROOTS", raising=False)
    run = tmp_path / "elsewhere" / "mine"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", run)
    at = _open_typed(str(run))
    assert not at.sidebar.error, [e.value for e in at.sidebar.error]
    assert at.session_state["debugkit_run_path"] == str(run)


def test_an_error_box_names_files_relative_to_the_served_folder():
    """A reader's refusal names the file; the page's error box shows it under the store's
    name (``store/ckpt-bad/checkpoints/index.json``), not at the server's absolute path."""
    from ._apptest import open_page

    store = Path(os.environ["DEBUGKIT_STORE"])
    run = store / "ckpt-bad"
    shutil.copytree(SAMPLE_RUNS / "digits-resumed", run)
    (run / "checkpoints" / "index.json").write_text("{not json")
    at = open_page("checkpoints", run="ckpt-bad")
    shown = _texts(at).replace("\\", "")
    assert f"{store.name}/ckpt-bad/checkpoints/index.json" in shown, shown[-2000:]
    assert str(store) not in shown


def test_the_replay_page_names_code_relative_to_its_code_root():
    """The Replay page's "File here" and the code's messages name the factory's file from
    the code root it was found in (``examples/digits.py``), not the server's absolute path."""
    from ._apptest import open_page

    at = open_page("replay", timeout=240, run="digits-bad-label")
    shown = _texts(at).replace("\\", "")
    assert "File here: `examples/digits.py`" in shown, shown[-1500:]
    assert str(ROOT) not in shown
