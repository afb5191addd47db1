"""Load test: concurrent browser sessions against one debugkit server, on loopback only.

Writes a run of --rows gradient-norm rows with the Recorder's own writer (see
bench/gradients_page.py) into a fresh run store, starts `streamlit run app.py` headless
on a free loopback port, and drives Debian's chromium with Playwright: --sessions
browser contexts at once each open the Overview and then the Gradients page of that run
and wait until a plotly chart has drawn, while one more context uploads a run directory
through the sidebar's uploader. Prints the errors (page exceptions, failed waits, error
boxes), the 50th and 95th percentile time to a rendered chart per page, the upload's
time, and the server's peak resident memory (the server process, polled every 0.2 s).

    python bench/load.py [--sessions 20] [--rows 1000000] [--timeout 300]

Bounded: every wait has a timeout, the whole run stops after --timeout seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CHART = "() => [...document.querySelectorAll('.js-plotly-plot')].some(p => p.querySelector('.main-svg'))"
IDLE = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakRSS(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.peak = max(self.peak, _rss_bytes(self.pid))
            self.stop.wait(0.2)


def _pct(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


async def _session(browser, url: str, run_id: str, timeout_ms: int, out: dict) -> None:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(timeout_ms)
    page = await ctx.new_page()
    page.on("pageerror", lambda exc: out["errors"].append(f"page error: {exc}"))
    try:
        for name in ("overview", "gradients"):
            t0 = time.perf_counter()
            await page.goto(f"{url}/{name}?run={run_id}", timeout=timeout_ms)
            await page.wait_for_function(CHART, timeout=timeout_ms)
            out[name].append(time.perf_counter() - t0)
            await page.wait_for_function(IDLE, timeout=timeout_ms)
            n_err = await page.locator("[data-testid='stException'], [data-testid='stAlertContentError']").count()
            if n_err:
                out["errors"].append(f"{name}: {n_err} error box(es) shown")
    except Exception as exc:  # a timeout or a crash is an error of the load test
        out["errors"].append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    finally:
        await ctx.close()


async def _upload(browser, url: str, src: Path, timeout_ms: int, out: dict) -> None:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(timeout_ms)
    page = await ctx.new_page()
    try:
        t0 = time.perf_counter()
        await page.goto(f"{url}/overview", timeout=timeout_ms)
        await page.wait_for_function(IDLE, timeout=timeout_ms)
        await page.get_by_text("Upload a run").click()
        zone = page.get_by_test_id("stFileUploaderDropzone").first
        async with page.expect_file_chooser() as fc:
            await zone.get_by_role("button", name="Upload directories").click()
        chooser = await fc.value
        await chooser.set_files(str(src))
        await page.get_by_text("Target 12 is out of bounds.").first.wait_for(timeout=timeout_ms)
        out["upload"].append(time.perf_counter() - t0)
    except Exception as exc:
        out["errors"].append(f"upload: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    finally:
        await ctx.close()


async def _drive(url: str, run_id: str, sessions: int, upload_src: Path, timeout_s: float) -> dict:
    from playwright.async_api import async_playwright

    from tests.e2e.conftest import CHROMIUM_ARGS, chromium_path

    out = {"overview": [], "gradients": [], "upload": [], "errors": []}
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        ms = int(timeout_s * 1000)
        jobs = [_session(browser, url, run_id, ms, out) for _ in range(sessions)]
        jobs.append(_upload(browser, url, upload_src, ms, out))
        await asyncio.wait_for(asyncio.gather(*jobs), timeout_s + 30)
        await browser.close()
    return out


def run_load(sessions: int = 20, rows: int = 1_000_000, timeout_s: float = 300.0) -> dict:
    """Run the load test; returns its measurements (see the module docstring)."""
    from gradients_page import write_run

    from debugkit import open_run
    from tests.e2e.conftest import start_server

    tmp = Path(tempfile.mkdtemp(prefix="dk-load-"))
    srv = start_server(tmp / "srv")
    try:
        run_id = f"load-{rows}"
        write_run(srv.store / run_id, rows)
        n_rows = len(open_run(srv.store / run_id).grad_norms())
        src = tmp / "uploaded-run"
        shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", src)
        mon = PeakRSS(srv.proc.pid)
        mon.start()
        t0 = time.perf_counter()
        # In a thread of its own: the caller may already run an event loop (pytest with
        # Playwright's sync API does), and asyncio.run() refuses to nest.
        # A caller that already runs an event loop (pytest with Playwright's sync API)
        # gets the driver in a thread of its own; asyncio.run() refuses to nest.
        try:
            asyncio.get_running_loop()
            in_loop = True
        except RuntimeError:
            in_loop = False
        if not in_loop:
            out = asyncio.run(_drive(srv.url, run_id, sessions, src, timeout_s))
        else:
            box: dict = {}

            def drive():
                try:
                    box["out"] = asyncio.run(_drive(srv.url, run_id, sessions, src, timeout_s))
                except BaseException as exc:  # re-raised in the caller's thread
                    box["exc"] = exc

            th = threading.Thread(target=drive, name="load-driver")
            th.start()
            th.join()
            if "exc" in box:
                raise box["exc"]
            out = box["out"]
        out["wall_s"] = time.perf_counter() - t0
        mon.stop.set()
        mon.join()
        out.update(rows=n_rows, sessions=sessions, server_peak_rss_bytes=mon.peak)
        stored = sorted(p.name for p in srv.store.iterdir() if not p.name.startswith("."))
        out["store_after"] = stored
        return out
    finally:
        srv.proc.terminate()
        try:
            srv.proc.wait(15)
        except Exception:
            srv.proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--timeout", type=float, default=300.0)
    a = ap.parse_args(argv)
    r = run_load(a.sessions, a.rows, a.timeout)
    print(f"{r['sessions']} sessions + 1 upload, run of {r['rows']:,} gradient-norm rows, "
          f"{r['wall_s']:.1f} s in all")
    for name in ("overview", "gradients"):
        v = r[name]
        print(f"  {name:<9} time to a rendered chart: p50 {_pct(v, 50):.2f} s, p95 {_pct(v, 95):.2f} s "
              f"({len(v)} of {r['sessions']} rendered)")
    up = r["upload"]
    print(f"  upload: {f'{up[0]:.2f} s' if up else 'did not finish'}; store now holds {r['store_after']}")
    print(f"  server peak RSS {r['server_peak_rss_bytes'] / 2**20:.0f} MiB")
    print(f"  errors: {len(r['errors'])}")
    for e in r["errors"][:20]:
        print(f"    {e}")
    return 1 if r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
