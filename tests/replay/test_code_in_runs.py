"""Code that ships inside a run is never "verified" replay code (issue 28, item 1), and
a replay child or an audit worker gets a scrubbed environment, not the server's.

A run that carries its own ``model.py`` and names it (with its true SHA-256) had it run
by ``debugkit replay`` whenever the run lay under the working directory (the CLI's
default code root; ``./runs`` is both the README's recording folder and ``debugkit
ui``'s upload store), and by the dashboard when the store lay inside
``DEBUGKIT_CODE_ROOTS``. The dashboard's side is in tests/app/test_replay_page.py
(``test_code_shipped_in_an_uploaded_run_never_runs``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import console_script
from .conftest import ROOT

FID = "r0-s0000075-exception"
CLI_TIMEOUT_S = 300


def in_run_rule() -> str:
    """The refusal's rule: "code that ships inside a run never runs as replay code, ..."."""
    from debugkit.replay.policy import MSG_IN_RUN

    return MSG_IN_RUN.split("; ")[1].split(" (")[0]


def model_source(marker: Path) -> str:
    """A model factory that leaves ``marker`` behind when it is imported, and records the
    environment it sees."""
    return textwrap.dedent(f'''
        import json, os
        with open({str(marker)!r}, "w") as f:
            json.dump(sorted(os.environ), f)
        from torch import nn


        def build_model(hidden=64):
            return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    ''')


def carry_code(run: Path, code_file: Path, spec: str) -> None:
    """Make the run's capture name ``spec`` in ``code_file`` with its true hash."""
    digest = hashlib.sha256(code_file.read_bytes()).hexdigest()
    module, _, qual = spec.partition(":")
    fj = run / "failures" / FID / "failure.json"
    rec = json.loads(fj.read_text())
    rec["code"] = {"model_factory": {"spec": spec, "module": module, "qualname": qual,
                                     "file": str(code_file), "sha256": digest}}
    rec["factory_kwargs"] = {"hidden": 64}
    fj.write_text(json.dumps(rec))


def debugkit(*args, cwd, env):
    exe = console_script("debugkit")
    return subprocess.run([exe, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DEBUGKIT_CODE_ROOTS", "DEBUGKIT_STORE", "DEBUGKIT_ROOTS")}
    env.update(extra)
    return env


@pytest.mark.parametrize("where", ["in-the-run", "in-a-package-in-the-run", "in-the-store"])
@pytest.mark.parametrize("allow", [[], ["--allow-code"]])
def test_code_in_a_run_or_the_store_never_runs_from_the_cli(tmp_path, where, allow):
    """``debugkit replay runs/evil`` from the project folder (the CLI's code root): the
    run's own model.py (or one elsewhere in ./runs, the default store) is refused, with
    and without --allow-code, and never imported."""
    project = tmp_path / "project"
    run = project / "runs" / "evil"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run)
    marker = tmp_path / "imported"
    if where == "in-the-run":
        code, spec = run / "model.py", "model:build_model"
    elif where == "in-a-package-in-the-run":
        (run / "pkg").mkdir()
        (run / "pkg" / "__init__.py").write_text("")
        code, spec = run / "pkg" / "model.py", "pkg.model:build_model"
    else:  # a folder of the store with no manifest above it
        (project / "runs" / "shared").mkdir()
        code, spec = project / "runs" / "shared" / "model.py", "model:build_model"
    code.write_text(model_source(marker))
    carry_code(run, code, spec)
    p = debugkit("replay", "runs/evil", "--device", "cpu", *allow, cwd=project, env=_env())
    assert p.returncode == 2, p.stdout + p.stderr
    assert in_run_rule() in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not marker.exists()


def test_the_project_s_own_code_still_runs_and_sees_a_scrubbed_environment(tmp_path):
    """The same factory in the project folder (outside any run) runs, verified; the child
    sees PATH and HOME but none of the server's other variables."""
    project = tmp_path / "project"
    run = project / "runs" / "mine"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run)
    marker = tmp_path / "imported"
    code = project / "mymodel.py"
    code.write_text(model_source(marker))
    carry_code(run, code, "mymodel:build_model")
    env = _env(AWS_SECRET_ACCESS_KEY="not-for-the-child", DEBUGKIT_SECRET="share-secret",
               SOME_TOKEN="t0ken", LC_ALL="C.UTF-8", CUDA_VISIBLE_DEVICES="")
    p = debugkit("replay", "runs/mine", "--device", "cpu", "--json", cwd=project, env=env)
    assert marker.exists(), p.stdout + p.stderr
    seen = set(json.loads(marker.read_text()))
    assert {"PATH", "HOME", "LC_ALL", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"} <= seen
    assert not seen & {"AWS_SECRET_ACCESS_KEY", "DEBUGKIT_SECRET", "SOME_TOKEN"}, seen
    assert json.loads(p.stdout)["code"][0]["status"] == "verified"


def test_child_env_keeps_only_the_allow_list():
    from debugkit.child_harness import child_env

    env = child_env({"CUDA_LAUNCH_BLOCKING": "1"},
                    environ={"PATH": "/bin", "HOME": "/h", "LANG": "C", "LC_CTYPE": "C",
                             "TORCH_HOME": "/t", "PYTORCH_CUDA_ALLOC_CONF": "x", "AWS_PROFILE": "p",
                             "DEBUGKIT_SECRET": "s", "GITHUB_TOKEN": "g", "PYTHONPATH": "/a"})
    assert set(env) == {"PATH", "HOME", "LANG", "LC_CTYPE", "TORCH_HOME", "PYTORCH_CUDA_ALLOC_CONF",
                        "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
                        "CUDA_LAUNCH_BLOCKING"}
    import debugkit

    # first the folder that holds this debugkit package, so the child imports the same code
    first, *rest = env["PYTHONPATH"].split(os.pathsep)
    assert (Path(first) / "debugkit").resolve() == Path(debugkit.__file__).resolve().parent
    assert rest == ["/a"]
    assert sys.executable  # the child runs this interpreter (child_harness.run_child)


def test_a_factory_in_a_namespace_folder_is_found(tmp_path):
    """Issue 28: a factory module inside folders without ``__init__.py`` (namespace
    packages, ``deep.a.nspkg.model``) made `debugkit replay` die with ``KeyError: 'deep'``
    (the import system looked the parent up in sys.modules). It is found and replayed."""
    project = tmp_path / "project"
    run = project / "recorded" / "r1"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run)
    pkg = project / "deep" / "a" / "nspkg"
    pkg.mkdir(parents=True)
    code = pkg / "model.py"
    code.write_text(model_source(tmp_path / "imported"))
    carry_code(run, code, "deep.a.nspkg.model:build_model")
    p = debugkit("replay", "recorded/r1", "--device", "cpu", "--json", cwd=project, env=_env())
    assert "Traceback" not in p.stderr and "KeyError" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["code"][0]["status"] == "verified"
    assert report["code"][0]["local_file"] == str(code)
