"""Every command of README.md's ``bash`` blocks, run as written (issue 17, acceptance).

The blocks are parsed from the README at test time, so the test follows it as it
changes. Each command runs through the installed console scripts (``debugkit``,
``streamlit``) in a subprocess, from a temporary copy of the checkout, and the blocks
that name no file of the checkout also from an empty user folder; its output is checked.
Servers (``streamlit run``, ``debugkit ui``) are started, probed over HTTP, stopped with
SIGTERM, and their port must be free afterwards.

Skipped, and why (nothing else may be):

- ``pip install ...``: it installs from the network into the environment that runs this
  test; the install it describes is the one under test.
- ``bash .ci/run``: it runs this whole test suite (this test included) and installs
  Debian packages.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import ROOT, _free_port
from .test_ui_from_a_folder import port_is_free, untracked_in_checkout

pytestmark = pytest.mark.browser

README = ROOT / "README.md"
BIN = Path(sys.executable).parent

SKIP = {
    "pip install": "installs from the network into the environment under test",
    "bash .ci/run": "runs this whole suite (recursion) and installs Debian packages",
    "python -m pytest": "runs this test suite (recursion)",
}
SERVERS = (("streamlit", "run"), ("debugkit", "ui"))
# Files of the checkout a command may name; a block naming none runs from a user folder too.
CHECKOUT_FILES = ("sample_runs/", "app.py", "requirements.txt", "-e .", "examples.", "requirements-dev.txt")
# The run the Quick start's script records (its Recorder's path), made by that script as
# written: saved as train.py in the folder the commands run in, run with `python train.py`.
QUICK_START_RUN = "runs/my-first-run"


def readme_commands() -> list[tuple[int, list[str]]]:
    """``(block number, commands)`` of every ```bash block; ``a && b`` are two commands."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    out = []
    for i, block in enumerate(blocks):
        cmds = []
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                cmds += [c.strip() for c in line.split(" && ") if c.strip()]
        out.append((i, cmds))
    return out


def quick_start_script() -> str:
    """The Quick start's ```python block, as a user pastes it."""
    m = re.search(r"^## Quick start\n.*?^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    assert m, "README.md has no Quick start python block"
    return m.group(1)


def skipped(cmd: str) -> str | None:
    return next((why for prefix, why in SKIP.items() if cmd.startswith(prefix)), None)


# Output checks for the commands the README has now (a new command gets the generic ones:
# exit 0, output, no traceback).
CHECKS = [
    (r"^debugkit info \S+ --json", lambda o: '"status"' in o and '"row_counts"' in o),
    (r"^debugkit info ", lambda o: "status:" in o and "ranks:" in o),
    (r"^debugkit diagnose sample_runs/digits-exploding", lambda o: "exploding_grad" in o and "lr grew" in o),
    (r"^debugkit diagnose ", lambda o: o.strip() != ""),
    (r"^debugkit replay sample_runs/digits-bad-label", lambda o: "reproduced: yes" in o and "label 12" in o),
    (r"^debugkit audit list ", lambda o: "verdict" in o),
    (r"^debugkit share ", lambda o: o.startswith("http://") and "token=v1." in o),
    (r"^debugkit profile-summary ", lambda o: "samples" in o and "top self" in o),
]


def user_env(tmp: Path, port: int) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEBUGKIT_STORE", "DEBUGKIT_ROOTS", "DEBUGKIT_SECRET", "PYTHONPATH")}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", DEBUGKIT_CACHE=str(tmp / "cache"),
               HOME=str(tmp / "home"),
               # where a server listens: Streamlit's own settings, not part of the command
               STREAMLIT_SERVER_PORT=str(port), STREAMLIT_SERVER_HEADLESS="true",
               STREAMLIT_SERVER_ADDRESS="127.0.0.1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    (tmp / "home").mkdir(exist_ok=True)
    return env


def copy_checkout(dest: Path) -> Path:
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, text=True, timeout=60,
                           check=True).stdout.splitlines()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


def run_quick_start(cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """Save the Quick start as ``train.py`` in ``cwd`` and run ``python train.py``."""
    (cwd / "train.py").write_text(quick_start_script())
    return subprocess.run([sys.executable, "train.py"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def ensure_inputs(cmd: str, cwd: Path, env: dict) -> None:
    """Record the run a command after the Quick start reads, with the Quick start itself."""
    if QUICK_START_RUN in cmd and not (cwd / QUICK_START_RUN).exists():
        p = run_quick_start(cwd, env)
        assert p.returncode == 0, p.stderr[-3000:]


def run_server(cmd: str, cwd: Path, env: dict, port: int, log: Path) -> None:
    proc = subprocess.Popen(["bash", "-c", f"exec {cmd}"], cwd=cwd, env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"{cmd!r} exited:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, f"{cmd!r} did not answer:\n{log.read_text()[-3000:]}"
                time.sleep(0.5)
        with urllib.request.urlopen(url + "/", timeout=10) as r:
            assert r.status == 200 and b"<html" in r.read(4000).lower()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 15
        while not port_is_free(port) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert port_is_free(port), f"{cmd!r}: port {port} still held after SIGTERM"
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def run_command(cmd: str, cwd: Path, env: dict) -> None:
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=600)
    out = p.stdout
    assert p.returncode == 0, f"{cmd!r} in {cwd}: exit {p.returncode}\n{p.stderr[-3000:]}"
    assert out.strip(), f"{cmd!r}: no output"
    assert "Traceback" not in out + p.stderr, p.stderr[-3000:]
    check = next((c for rx, c in CHECKS if re.search(rx, cmd)), None)
    if check is not None:
        assert check(out), f"{cmd!r}: unexpected output:\n{out[:3000]}"


def run_block(cmds: list[str], cwd: Path, checkout: Path, tmp: Path) -> list[str]:
    done = []
    for cmd in cmds:
        if skipped(cmd):
            continue
        port = _free_port()
        env = user_env(tmp, port)
        ensure_inputs(cmd, cwd, env)
        if tuple(shlex.split(cmd)[:2]) in SERVERS:
            run_server(cmd, cwd, env, port, tmp / f"server-{len(done)}.log")
        else:
            run_command(cmd, cwd, env)
        done.append(cmd)
    return done


def test_the_readme_has_runnable_blocks():
    blocks = readme_commands()
    cmds = [c for _, b in blocks for c in b]
    assert len(blocks) >= 3 and len(cmds) >= 8
    # every skip is one of the justified ones; placeholders are not commands
    for c in cmds:
        assert not re.search(r"\b(RUN|PATH|FILE|ID|PID|STEP)\b", c), f"placeholder in a bash block: {c!r}"
    assert {skipped(c) for c in cmds if skipped(c)} <= set(SKIP.values())


def test_the_quick_start_is_a_complete_script(tmp_path):
    """Pasted into train.py in an empty folder and run (issue 31: it used to stop at
    `NameError: model`, lacked opt and loader, and named examples.digits from the checkout).
    Its run id is its own: `?run=` of a bundled sample's name would open the sample."""
    script = quick_start_script()
    assert "examples." not in script
    samples = {p.name for p in (ROOT / "sample_runs").iterdir()}
    assert Path(QUICK_START_RUN).name not in samples
    assert f"?run={Path(QUICK_START_RUN).name}" in README.read_text()
    env = user_env(tmp_path, _free_port())
    p = run_quick_start(tmp_path, env)
    assert p.returncode == 0, p.stderr[-3000:]
    from debugkit.io.run import open_run

    run = open_run(tmp_path / QUICK_START_RUN)
    assert run.status == "finished" and run.manifest["model_factory"] == "train:build_model"
    assert len(run.grad_norms()) > 0 and not run.failures()
    # the run is served under its own id next to the samples, as the README says
    from debugkit.io.served_runs import find_runs

    ids = {e.id: e.path for e in find_runs([ROOT / "sample_runs", tmp_path / "runs"])}
    assert Path(ids[Path(QUICK_START_RUN).name]).resolve() == (tmp_path / QUICK_START_RUN).resolve()


@pytest.mark.parametrize("block", [i for i, _ in readme_commands()])
def test_readme_block_runs_as_written(block, tmp_path_factory, request, monkeypatch):
    cmds = dict(readme_commands())[block]
    if any("s3://my-bucket/" in c for c in cmds):
        # "Runs in a bucket": against the real S3 server the tests start, its credentials
        # in the environment as a user gives them (AWS_*), the README's bucket made first
        server = request.getfixturevalue("s3_server")
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        fs = server.filesystem()
        if not fs.exists("my-bucket"):
            fs.mkdir("my-bucket")
    before = untracked_in_checkout()
    tmp = tmp_path_factory.mktemp(f"readme-{block}")
    checkout = copy_checkout(tmp / "checkout")
    ran = run_block(cmds, checkout, checkout, tmp)
    if not any(f in " ".join(cmds) for f in CHECKOUT_FILES):
        user = tmp / "user"
        user.mkdir()
        ran += run_block(cmds, user, checkout, tmp)
    assert ran or all(skipped(c) for c in cmds)
    assert untracked_in_checkout() == before, "a README command wrote inside the installed checkout"
