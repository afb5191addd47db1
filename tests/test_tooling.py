"""The habits of the field (issue 31): ruff and mypy pass, CI runs them before the tests,
pre-commit runs the same, and every package a test imports is declared."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib import metadata

import pytest

from .conftest import ROOT


def test_ruff_passes():
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


@pytest.mark.slow
def test_mypy_passes():
    p = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_ruff_config_selects_the_agreed_rules():
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {"F", "I", "UP", "B"} <= set(cfg["tool"]["ruff"]["lint"]["select"])
    assert cfg["tool"]["mypy"]["files"] == ["debugkit"]


def test_ci_lints_and_type_checks_before_the_tests():
    lines = [x.strip() for x in (ROOT / ".ci" / "run").read_text().splitlines()]
    at = {cmd: next(i for i, x in enumerate(lines) if x.startswith(cmd))
          for cmd in ("python -m ruff check .", "python -m mypy", "python -m pytest")}
    assert at["python -m ruff check ."] < at["python -m pytest"]
    assert at["python -m mypy"] < at["python -m pytest"]
    hooks = (ROOT / ".pre-commit-config.yaml").read_text()
    assert "entry: python -m ruff check" in hooks and "entry: python -m mypy" in hooks


def _declared() -> set[str]:
    """Distribution names in requirements*.txt (following -r) and pyproject's dependencies."""
    import tomllib

    out: set[str] = set()

    def read(path):
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("-r"):
                read(path.parent / line[2:].strip())
            elif line and not line.startswith("-"):
                out.add(re.split(r"[<>=!~\[ ;]", line)[0])

    read(ROOT / "requirements-dev.txt")
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in proj["dependencies"] + [d for ds in proj["optional-dependencies"].values() for d in ds]:
        out.add(re.split(r"[<>=!~\[ ;]", dep)[0])
    return {re.sub(r"[-_.]+", "-", d).lower() for d in out}


def test_every_third_party_import_of_the_tests_is_declared():
    """markdown-it-py was imported by a test and installed only as a dependency of another
    package; a module the tests import must come from a declared distribution."""
    dists = metadata.packages_distributions()
    local = {p.name for p in ROOT.iterdir()} | {p.stem for p in ROOT.iterdir()}
    stdlib = set(sys.stdlib_module_names)
    declared = _declared()
    missing = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if "data" in path.relative_to(ROOT / "tests").parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in stdlib or top in local or top.startswith("_") or top not in dists:
                    continue
                if not any(re.sub(r"[-_.]+", "-", d).lower() in declared for d in dists[top]):
                    missing.setdefault(top, str(path.relative_to(ROOT)))
    assert not missing, f"imported by tests but not declared in requirements*.txt / pyproject: {missing}"


def test_contributing_is_self_contained_and_names_what_exists():
    """CONTRIBUTING needs nothing outside the repository (it used to send readers to
    ../shared/STYLE.md): every relative link resolves inside it, and the routing pieces it
    explains exist under those names."""
    doc = ROOT / "docs" / "CONTRIBUTING.md"
    text = doc.read_text()
    assert "shared/" not in text and (ROOT / "docs" / "STYLE.md").is_file()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT) and path.exists(), f"CONTRIBUTING links to {target}"
    for name, where in (("mark_routed", "pages/_routing.py"), ("page_guard", "pages/_routing.py"),
                        ("_apptest_runs_the_router", "tests/conftest.py"),
                        ("attach_related", "debugkit/analysis/findings.py")):
        assert name in text and f"def {name}(" in (ROOT / where).read_text(), name
    assert "_routing.mark_routed()" in (ROOT / "app.py").read_text()


def test_tests_find_console_scripts_next_to_the_interpreter():
    """A test runs `debugkit` as a user of this environment would, also when the venv is not
    activated (its bin/ not on PATH): through tests.conftest.console_script, never a bare
    name looked up on PATH."""
    bare = re.compile(r"""\[\s*["'](debugkit|streamlit|py-spy|torchrun)["']\s*,""")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "tests").rglob("*.py"))
             if "data" not in p.relative_to(ROOT / "tests").parts[:1]
             for i, line in enumerate(p.read_text().splitlines(), 1) if bare.search(line)]
    assert not found, f"console scripts looked up on PATH: {found}"
    assert "shutil.which(\"debugkit\")" not in "".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))


MAX_MODULE_LINES = 700
WHY_LONGER = "# Why this module is over the 700 lines"


def test_every_module_is_under_700_lines_or_says_why():
    """Small modules with one job (docs/STYLE.md): a module of debugkit/, pages/ or app.py
    over 700 lines either splits along its sections (as analysis/profile/ and
    analysis/gradients/ are packages) or says at its top, in a comment starting with
    WHY_LONGER within its first 30 lines, why it is one module."""
    files = [ROOT / "app.py", *sorted((ROOT / "debugkit").rglob("*.py")), *sorted((ROOT / "pages").rglob("*.py"))]
    long = []
    for f in files:
        lines = f.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_MODULE_LINES and not any(x.startswith(WHY_LONGER) for x in lines[:30]):
            long.append(f"{f.relative_to(ROOT)}: {len(lines)} lines")
    assert not long, "split these along their sections, or say why at the top:\n" + "\n".join(long)


def test_the_cpu_time_plugin_counts_the_test_and_the_processes_it_waits_for(tmp_path):
    """``-p tests._cputime`` (how CONTRIBUTING's slow rule is measured) lists an unmarked
    test over the threshold with the CPU its child process used, and leaves out a test
    already marked slow and one that only sleeps (wall time, no CPU)."""
    (tmp_path / "test_burn.py").write_text(
        "import subprocess, sys, time\nimport pytest\n\n"
        "def test_child_burns():\n"
        "    subprocess.run([sys.executable, '-c', 'import time\\nt=time.process_time()\\n"
        "while time.process_time() - t < 0.6: pass'], check=True)\n\n"
        "@pytest.mark.slow\ndef test_marked_burns():\n"
        "    t = time.process_time()\n    while time.process_time() - t < 0.6: pass\n\n"
        "def test_sleeps():\n    time.sleep(0.8)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests._cputime",
                        "--cpu-slow", "0.5", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                        str(tmp_path / "test_burn.py")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    over = p.stdout.split("unmarked test(s) over 0.5 CPU s", 1)[1]
    assert "1 unmarked test(s) over 0.5 CPU s" in p.stdout, p.stdout
    assert "test_child_burns" in over and "test_sleeps" not in over and "test_marked_burns" not in over
    assert "test_marked_burns  [slow]" in p.stdout
