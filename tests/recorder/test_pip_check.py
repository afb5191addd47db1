"""`pip check` is recorded for every run, even one whose script exits right away (issue 17,
item 8): it runs in a detached process, not in a daemon thread that dies with the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent('''
    import torch
    from debugkit import Recorder

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder("runs/short", model, optimizer=opt) as rec:
        with rec.step(None):
            loss = model(torch.randn(3, 2)).sum()
            opt.zero_grad(); loss.backward(); rec.log(loss=loss); opt.step()
''')


def test_pip_check_recorded_after_a_one_step_script_exits(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    env_file = tmp_path / "runs" / "short" / "env.json"
    deadline = time.monotonic() + 240  # pip check on a loaded machine; not a timing assertion
    while not env_file.is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    pc = json.loads(env_file.read_text())["pip_check"]
    assert pc["ok"] in (True, False) and isinstance(pc["conflicts"], list)
    assert isinstance(pc["checked_at"], float)
    # the same text pip prints, one line per broken requirement
    assert pc["ok"] == (not pc["conflicts"])
    from debugkit import open_run

    assert open_run(tmp_path / "runs" / "short").env()["pip_check"] == pc
