"""The catalogue of finding kinds (debugkit.analysis.kinds) against the code and the docs.

Every ``Finding`` construction in debugkit/ is found with :mod:`ast` (``Finding(...)``,
``Finding.flag(...)``, ``Finding.for_audit(...)``); its ``kind`` is a string literal, or a
variable whose literal values are read from the same module (``kind = "rank_lost"``, a loop
over tuples of literals). Each must be in the catalogue, each catalogue entry must be
constructed somewhere, and each entry's doc section must exist and name its kind. Then
``debugkit diagnose --kinds`` is run through the console script, and ``diagnose`` on every
bundled sample must emit only catalogued kinds at catalogued severities.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
from pathlib import Path

import pytest

from debugkit.analysis.findings import SEVERITIES
from debugkit.analysis.kinds import CATALOGUE, KINDS

from ..conftest import ROOT, SAMPLE_RUNS, console_script

PKG = ROOT / "debugkit"
FACTORIES = {"Finding": 0, "Finding.flag": 0, "Finding.for_audit": None}


def _strings(node, out: set[str]) -> None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        out.add(node.value)
    elif isinstance(node, ast.IfExp):
        _strings(node.body, out)
        _strings(node.orelse, out)


def _literal_values(tree: ast.Module, scope: ast.AST, name: str, depth: int = 0) -> set[str]:
    """String literals the variable ``name`` can hold in ``scope`` (a function): ``name = "x"``,
    ``name = "x" if c else "y"``, ``for a, name, b in items`` (the literals at that position
    of the scope's tuples of that length: the items, or the tuples it builds into them); a
    parameter is followed to the module's calls of its function."""
    out: set[str] = set()
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
            _strings(n.value, out)
        elif isinstance(n, (ast.For, ast.comprehension)) and isinstance(n.target, ast.Tuple):
            elts = n.target.elts
            pos = [i for i, e in enumerate(elts) if isinstance(e, ast.Name) and e.id == name]
            if pos:
                for t in ast.walk(scope):
                    if isinstance(t, ast.Tuple) and t is not n.target and len(t.elts) == len(elts):
                        _strings(t.elts[pos[0]], out)
    params = [a.arg for a in getattr(getattr(scope, "args", None), "args", [])]
    if name in params and depth < 3:
        i = params.index(name)
        for fn in (f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for c in ast.walk(fn):
                if isinstance(c, ast.Call) and ast.unparse(c.func) == scope.name and len(c.args) > i:
                    arg = c.args[i]
                    if isinstance(arg, ast.Name):
                        out |= _literal_values(tree, fn, arg.id, depth + 1)
                    else:
                        _strings(arg, out)
    return out


def _enclosing_functions(tree: ast.Module) -> dict[ast.AST, ast.AST]:
    """``node -> the innermost function holding it`` (the module for top-level code)."""
    owner: dict[ast.AST, ast.AST] = {}

    def visit(node, fn):
        for child in ast.iter_child_nodes(node):
            owner[child] = fn
            visit(child, child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn)

    visit(tree, tree)
    return owner


@functools.cache
def constructed_kinds() -> dict[str, list[str]]:
    """``kind -> ["file:line", ...]`` for every Finding construction in debugkit/."""
    found: dict[str, list[str]] = {}
    unresolved = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name in ("findings.py", "kinds.py") and path.parent.name == "analysis":
            continue  # the factories themselves, and the catalogue
        tree = ast.parse(path.read_text())
        owner = _enclosing_functions(tree)
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call):
                continue
            name = ast.unparse(n.func)
            if name not in FACTORIES:
                continue
            kw = {k.arg: k.value for k in n.keywords}
            pos = FACTORIES[name]
            node = kw.get("kind", n.args[pos] if pos is not None and len(n.args) > pos else None)
            where = f"{path.relative_to(ROOT)}:{n.lineno}"
            if node is None:  # Finding.for_audit without kind=: its default
                values = {"fairness"}
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                values = {node.value}
            elif isinstance(node, ast.Name):
                values = _literal_values(tree, owner[n], node.id)
            else:
                values = set()
            if not values:
                unresolved.append(where)
            for v in values:
                found.setdefault(v, []).append(where)
    assert not unresolved, f"a Finding whose kind is not a literal this test can read: {unresolved}"
    return found


def test_every_kind_constructed_is_catalogued_and_every_entry_is_constructed():
    found = constructed_kinds()
    assert len(found) >= 20
    missing = {k: v for k, v in found.items() if k not in CATALOGUE}
    assert not missing, f"kinds emitted but not in debugkit/analysis/kinds.py: {missing}"
    unused = set(CATALOGUE) - set(found)
    assert not unused, f"catalogued kinds nothing constructs: {unused}"


def test_the_audit_flag_kinds_are_read_from_the_code():
    """The resolver is not vacuous: the two flag kinds come from attribution.py's tuples, and
    rank_crashed (a variable in lost_ranks.py) from its assignments."""
    found = constructed_kinds()
    assert any("attribution.py" in w for w in found["proxy"])
    assert any("attribution.py" in w for w in found["sensitive_feature"])
    assert any("lost_ranks.py" in w for w in found["rank_crashed"])


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _sections(doc: Path) -> dict[str, str]:
    """``anchor -> text`` of each heading's section (down to the next heading of any level)."""
    out, anchor, buf = {}, None, []
    in_code = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^#{1,6} (.*)$", line)
        if m:
            if anchor is not None:
                out[anchor] = "\n".join(buf)
            anchor, buf = _slug(m.group(1)), [line]
        else:
            buf.append(line)
    if anchor is not None:
        out[anchor] = "\n".join(buf)
    return out


@pytest.mark.parametrize("k", KINDS, ids=lambda k: k.kind)
def test_each_kind_is_documented_in_its_section(k):
    assert k.severity in SEVERITIES and set(k.severities) <= set(SEVERITIES)
    assert k.severity == k.severities[0] and len(set(k.severities)) == len(k.severities)
    assert k.title and "\n" not in k.title and k.area and k.page
    file, _, anchor = k.doc.partition("#")
    doc = ROOT / file
    assert doc.is_file(), k.doc
    sections = _sections(doc)
    assert anchor in sections, f"{k.doc}: no such heading (have {sorted(sections)})"
    assert f"`{k.kind}`" in sections[anchor], f"{k.doc} does not name `{k.kind}`"


def test_kinds_are_unique_and_docs_findings_md_is_the_catalogue():
    assert len(CATALOGUE) == len(KINDS)
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| ([\w /]+) \| (.+?) \| ([\w ]+) \| \[[^\]]+\]\(([^)]+)\) \|$",
                      (ROOT / "docs" / "findings.md").read_text(), flags=re.M)
    assert rows == [(k.kind, k.area, " / ".join(k.severities), k.title, k.page, k.doc.removeprefix("docs/"))
                    for k in KINDS], "docs/findings.md's table differs from debugkit/analysis/kinds.py"


def test_diagnose_kinds_through_the_console_script():
    exe = console_script("debugkit")
    p = subprocess.run([exe, "diagnose", "--kinds", "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)["kinds"]
    assert [d["kind"] for d in got] == [k.kind for k in KINDS]
    assert got[0] == KINDS[0].to_dict() and set(got[0]) == {"kind", "area", "severity", "severities",
                                                           "title", "page", "doc"}
    p = subprocess.run([exe, "diagnose", "--kinds"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:5] == ["kind", "area", "severity", "page", "doc"]
    assert any(line.startswith("nonfinite_grad ") and "docs/gradients.md#findings" in line for line in lines)
    assert len(lines) == len(KINDS) + 1
    # neither a run nor --kinds, or both: exit 2 with one line saying what to do
    p = subprocess.run([exe, "diagnose"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--kinds" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([exe, "diagnose", "--kinds", str(SAMPLE_RUNS / "digits-mlp")], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "reads no run" in p.stderr


def test_every_sample_emits_only_catalogued_kinds():
    from debugkit.diagnose import diagnose
    from debugkit.io.run import open_run

    seen = set()
    for run in sorted(p for p in SAMPLE_RUNS.iterdir() if (p / "manifest.json").is_file()):
        for f in diagnose(open_run(run)):
            for kind, severity in [(f.kind, f.severity)] + [(r["kind"], r["severity"])
                                                            for r in f.evidence.get("related", [])]:
                assert kind in CATALOGUE, f"{run.name}: {kind} is not catalogued"
                assert severity in CATALOGUE[kind].severities, (run.name, kind, severity)
                seen.add(kind)
    assert len(seen) >= 10
