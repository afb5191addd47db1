"""`pip check` is recorded for every run, even one whose script exits right away (issue 17,
item 8): it runs in a detached process, not in a daemon thread that dies with the script.
It stays off the training's back (issue 32, item 3): it starts after the first steps, at
nice 19 and the idle I/O class, and a run in an environment already checked takes the
cached result without running pip."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from debugkit import Recorder, open_run
from debugkit.recorder import pipcheck
from debugkit.recorder import recorder as recmod

SCRIPT = textwrap.dedent('''
    import sys
    import torch
    from debugkit import Recorder

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(sys.argv[1], model, optimizer=opt) as rec:
        with rec.step(None):
            loss = model(torch.randn(3, 2)).sum()
            opt.zero_grad(); loss.backward(); rec.log(loss=loss); opt.step()
''')


def _run_script(tmp_path, run, **extra_env):
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {**os.environ, "DEBUGKIT_CACHE": str(tmp_path / "cache")}
    for k, v in extra_env.items():  # PYTHONPATH: in front of the checkout's
        env[k] = os.pathsep.join([v, env[k]]) if env.get(k) else v
    p = subprocess.run([sys.executable, "train.py", f"runs/{run}"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return tmp_path / "runs" / run / "env.json"


def _wait_for(env_file):
    deadline = time.monotonic() + 400  # pip check at nice 19 on a loaded machine; not a timing assertion
    while not env_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    return json.loads(env_file.read_text())["pip_check"]


@pytest.mark.slow  # a training script and pip check: 22.4 CPU s (tests._cputime)
def test_pip_check_recorded_after_a_one_step_script_exits(tmp_path):
    pc = _wait_for(_run_script(tmp_path, "short"))
    assert pc["ok"] in (True, False) and isinstance(pc["conflicts"], list)
    assert isinstance(pc["checked_at"], float)
    # the same text pip prints, one line per broken requirement
    assert pc["ok"] == (not pc["conflicts"])
    assert pc["cached"] is False
    assert open_run(tmp_path / "runs" / "short").env()["pip_check"] == pc
    # it ran at the lowest CPU priority and, on Linux, in the idle I/O class
    assert pc["priority"]["nice"] == 19
    if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64"):
        assert pc["priority"]["io_class"] == "idle"

    # The same environment again: the cached result, in env.json before the script exits.
    env_file = _run_script(tmp_path, "again")
    assert env_file.is_file()
    again = json.loads(env_file.read_text())["pip_check"]
    assert again["cached"] is True
    assert {k: again[k] for k in ("ok", "conflicts", "checked_at")} == \
        {k: pc[k] for k in ("ok", "conflicts", "checked_at")}

    # A changed environment (one more distribution on the path): checked anew.
    extra = tmp_path / "extra"
    (extra / "dkfakepkg-1.0.dist-info").mkdir(parents=True)
    (extra / "dkfakepkg-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: dkfakepkg\nVersion: 1.0\n")
    fresh = _wait_for(_run_script(tmp_path, "changed", PYTHONPATH=str(extra)))
    assert fresh["cached"] is False and fresh["checked_at"] > pc["checked_at"]


def test_pip_check_starts_only_after_the_first_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("DEBUGKIT_CACHE", str(tmp_path / "cache"))  # an empty cache: a miss
    monkeypatch.setattr(recmod, "RSS_EVERY_S", 0.0)  # the check is looked at on that timer
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(tmp_path / "r", model, optimizer=opt)
    started = []
    for _ in range(pipcheck.AFTER_STEPS + 2):
        with rec.step(None):
            loss = model(torch.randn(3, 2)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        started.append(rec._pip_check.process is not None)
    rec.close()
    assert started.index(True) == pipcheck.AFTER_STEPS - 1  # at the end of the 10th step
    assert rec._pip_check.process.wait(timeout=400) == 0
    pc = open_run(tmp_path / "r").env()["pip_check"]
    assert pc["cached"] is False and pc["priority"]["nice"] == 19
    assert len(list((tmp_path / "cache" / "pip-check").glob("*.json"))) == 1
