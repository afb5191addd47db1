"""`debugkit ui` started from a user's folder (issue 17, items 3-4 and the acceptance).

The dashboard and the CLI started from the same folder resolve the same store (``./runs``)
and the same share secret, so a link made with `debugkit share` there opens in a fresh
browser; nothing is written inside the checkout; SIGTERM to `debugkit ui` stops Streamlit
and frees the port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from debugkit.audit import list_audits

from .conftest import ROOT, _free_port, wait_for_app

pytestmark = pytest.mark.browser
CONSOLE = Path(sys.executable).with_name("debugkit")


def user_env(tmp: Path) -> dict:
    """A user's environment: no store, roots or secret chosen by the test harness."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEBUGKIT_STORE", "DEBUGKIT_ROOTS", "DEBUGKIT_SECRET", "PYTHONPATH")}
    env["DEBUGKIT_CACHE"] = str(tmp / "cache")
    env["HOME"] = str(tmp / "home")  # no ~/.streamlit/secrets.toml of the machine
    return env


def port_is_free(port: int) -> bool:
    """Nobody listens on the port and a new server could bind it (as Streamlit does, with
    SO_REUSEADDR: the closed connections' TIME_WAIT entries do not count)."""
    with socket.socket() as c:
        c.settimeout(2)
        if c.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def wait_healthy(url: str, proc, log: Path, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("debugkit ui exited:\n" + log.read_text())
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("debugkit ui did not answer in time:\n" + log.read_text())


def untracked_in_checkout() -> set[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--ignored",
                          "--untracked-files=all"], capture_output=True, text=True, timeout=60).stdout
    return {line[3:] for line in out.splitlines() if line.startswith(("??", "!!"))
            and "__pycache__" not in line and ".egg-info" not in line}


def test_ui_and_share_from_the_same_folder_then_sigterm(browser, tmp_path):
    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    shutil.copytree(ROOT / "sample_runs" / "credit-audit", work / "runs" / "my-audit")
    (tmp_path / "home").mkdir()
    audit_id = list_audits(work / "runs" / "my-audit")[0]["id"]
    env = user_env(tmp_path)
    before = untracked_in_checkout()

    port = _free_port()
    log = tmp_path / "ui.log"
    proc = subprocess.Popen([str(CONSOLE), "ui", "--headless", "--port", str(port), "--host", "127.0.0.1"],
                            cwd=work, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log)
        share = subprocess.run([str(CONSOLE), "share", "runs/my-audit", "--audit", audit_id,
                                "--base-url", url], cwd=work, env=env, capture_output=True,
                               text=True, timeout=120)
        assert share.returncode == 0, share.stderr
        link = share.stdout.strip()
        assert link.startswith(f"{url}/audit?run=my-audit&audit={audit_id}&token=v1."), link
        assert "is not under the folders the dashboard serves" not in share.stderr
        # the secret lives in the user's store, not in the checkout
        assert (work / "runs" / ".debugkit-secret").is_file()

        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        page.set_default_timeout(120_000)
        try:
            page.goto(link)
            wait_for_app(page)
            page.get_by_text("Shared read-only view of audit").first.wait_for()
            page.get_by_text("Provenance").first.wait_for()
            assert page.get_by_text("token does not match").count() == 0
            assert page.get_by_text("Link not valid").count() == 0
            page.screenshot(path=str(tmp_path / "shared-from-folder.png"))
        finally:
            ctx.close()

        # `debugkit ui` *is* the Streamlit process: SIGTERM stops it and frees the port
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        assert rc == 0, log.read_text()
        deadline = time.monotonic() + 10
        while not port_is_free(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert port_is_free(port), f"port {port} still held after SIGTERM"
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30).stdout
        assert f"--server.port {port}" not in ps
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert untracked_in_checkout() == before, "debugkit ui wrote inside the checkout"


def test_sigint_stops_the_server_too(tmp_path):
    """One Ctrl-C (SIGINT) stops everything, as in a terminal."""
    (tmp_path / "home").mkdir()
    port = _free_port()
    log = tmp_path / "ui.log"
    proc = subprocess.Popen([str(CONSOLE), "ui", "--headless", "--port", str(port), "--host", "127.0.0.1"],
                            cwd=tmp_path, env=user_env(tmp_path), stdout=open(log, "w"),
                            stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not port_is_free(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert port_is_free(port), f"port {port} still held after SIGINT"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_share_only_flag_serves_share_links_and_nothing_else(browser, tmp_path):
    """`debugkit ui --share-only` (shown in --help): a valid link opens its audit; the
    plain address, another page and a run link are refused."""
    env = {**user_env(tmp_path), "PYTHONPATH": str(ROOT)}
    helptext = subprocess.run([str(CONSOLE), "ui", "--help"], env=env, capture_output=True,
                              text=True, timeout=120, cwd=tmp_path, check=False)
    assert "--share-only" in helptext.stdout and "share links" in helptext.stdout
    work = tmp_path / "work"
    (work / "runs").mkdir(parents=True)
    shutil.copytree(ROOT / "sample_runs" / "credit-audit", work / "runs" / "my-audit")
    (tmp_path / "home").mkdir()
    audit_id = list_audits(work / "runs" / "my-audit")[0]["id"]
    port = _free_port()
    log = tmp_path / "ui.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(CONSOLE), "ui", "--share-only", "--headless", "--port", str(port),
                                 "--host", "127.0.0.1"], cwd=work, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log)
        share = subprocess.run([str(CONSOLE), "share", "runs/my-audit", "--audit", audit_id,
                                "--base-url", url], cwd=work, env=env, capture_output=True,
                               text=True, timeout=120, check=False)
        assert share.returncode == 0, share.stderr
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        page = ctx.new_page()
        page.set_default_timeout(120_000)
        try:
            for address in (url, url + "/overview?run=my-audit", url + "/home"):
                page.goto(address)
                wait_for_app(page)
                page.get_by_text("this server only opens share links").first.wait_for()
                assert page.get_by_test_id("stSidebar").count() == 0
            page.goto(share.stdout.strip())
            wait_for_app(page)
            page.get_by_text("Shared read-only view of audit").first.wait_for()
            assert page.get_by_text("Link not valid").count() == 0
        finally:
            ctx.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
