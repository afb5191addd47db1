"""Real-browser fixtures: a `streamlit run app.py` server on loopback and Debian's chromium
driven by Playwright (never `playwright install`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic", "--disable-dev-shm-usage"]


def chromium_path() -> str:
    path = os.environ.get("DEBUGKIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail("Debian's chromium is needed for the browser tests: apt-get install chromium "
                    "(.ci/run installs it)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StreamlitServer:
    def __init__(self, url: str, proc: subprocess.Popen, store: Path, log: Path):
        self.url = url
        self.proc = proc
        self.store = store
        self.log = log

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


def start_server(tmp: Path, env_extra: dict | None = None, args: tuple = (),
                 app: Path | None = None, preload: bool = True) -> StreamlitServer:
    """A Streamlit server of ``app`` (the dashboard by default), started the way
    ``debugkit ui`` starts it (``pages/_serve.py``; ``preload=False``: plain
    ``streamlit run``), once its health check answers."""
    port = _free_port()
    store = tmp / "store"
    store.mkdir(parents=True, exist_ok=True)
    log = tmp / "streamlit.log"
    env = {**os.environ, "DEBUGKIT_STORE": str(store), "DEBUGKIT_CACHE": str(tmp / "cache"),
           "PYTHONPATH": str(ROOT), **(env_extra or {})}
    env.pop("DEBUGKIT_ROOTS", None)
    env.update(env_extra or {})
    launcher = [str(ROOT / "pages" / "_serve.py")] if preload else ["-m", "streamlit"]
    cmd = [sys.executable, *launcher, "run", str(app or ROOT / "app.py"),
           "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    # under --server.baseUrlPath the health check is served below that path
    base = args[args.index("--server.baseUrlPath") + 1].strip("/") if "--server.baseUrlPath" in args else ""
    health = url + (f"/{base}" if base else "") + "/_stcore/health"
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("streamlit exited:\n" + log.read_text())
        try:
            with urllib.request.urlopen(health, timeout=1) as r:
                if r.status == 200:
                    return StreamlitServer(url, proc, store, log)
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("streamlit did not start in 60 s:\n" + log.read_text())


def stop_server(srv, grace_s: float = 60) -> None:
    """SIGTERM, then SIGKILL if Streamlit has not exited within ``grace_s`` (a loaded
    CI machine can take well over 10 s to shut a server down)."""
    srv.proc.terminate()
    try:
        srv.proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("srv"))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    yield pg
    ctx.close()


def wait_for_app(page) -> None:
    """Wait until Streamlit has finished its script run."""
    page.wait_for_selector("[data-testid='stApp']")
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000)
