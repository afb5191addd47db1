"""The import graph of debugkit/: one-way layers, no module cycles, no streamlit.

Every ``import`` / ``from ... import`` in every module counts, function-local and
``TYPE_CHECKING`` ones included (a function-local import is still a dependency; it only
runs later). See docs/CONTRIBUTING.md for the layers and what belongs in each.

The graph is built from the source with :mod:`ast` (nothing is imported), so the test is
fast and needs none of the optional packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "debugkit"

#: Layers, lowest first. A module may import only from its own layer or a lower one.
#: Keys are top-level names under ``debugkit`` (a module or a subpackage).
LAYERS: dict[str, int] = {
    # 0 base: errors, file-system helpers, the version, the run layout and its one writer,
    # the child-process harness (stdlib only; replay and the audit worker run through it).
    "errors": 0, "_fsutil": 0, "location": 0, "objcache": 0, "runpack": 0, "_version": 0, "format": 0, "runschema": 0, "tensortree": 0, "checkpoints": 0,
    "child_harness": 0,
    # 1 training side writes runs, io reads them (the two never import each other).
    "recorder": 1, "io": 1,
    # 2 on top of one of them.
    "integrations": 2, "retry": 2, "analysis": 2,
    # 3 figures of analysis results.
    "charts": 3,
    # 4 services.
    "diagnose": 4, "replay": 4, "audit": 4, "run_comparison": 4,
    # 5 the command line.
    "cli": 5, "__main__": 5,
}
#: Same-layer pairs that must not depend on each other (either direction).
SEPARATE = {frozenset({"recorder", "io"})}
#: ``debugkit/__init__.py`` is the public face: it may import (lazily) from anywhere, and
#: nothing inside the package imports it (``__version__`` lives in ``debugkit._version``).
FACE = "debugkit"

#: Known edges that run up a layer (or between separate packages), as
#: ``"importer -> imported"``. None: a new one is a design decision, not an exception.
KNOWN_UPWARD: frozenset[str] = frozenset()

#: Known module cycles (each a sorted tuple of module names). None: keep it that way.
KNOWN_CYCLES: frozenset[tuple[str, ...]] = frozenset()


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules(pkg: Path = PKG) -> dict[str, Path]:
    return {_module_name(p, pkg.parent): p for p in sorted(pkg.rglob("*.py"))}


def _imports(path: Path, name: str, modules: dict[str, Path]):
    """Yield ``(imported_module, lineno)`` for every import of a debugkit module in a file;
    ``from pkg import sub`` counts as an import of ``pkg.sub`` when that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in modules else target), node.lineno


def import_graph(pkg: Path = PKG) -> dict[str, dict[str, int]]:
    """``{module: {imported debugkit module: first line}}`` over debugkit/."""
    modules = _modules(pkg)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in _imports(path, name, modules):
            if target == "debugkit" or target.startswith("debugkit."):
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target != name:
                    edges.setdefault(target, line)
        graph[name] = edges
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else FACE


def upward_edges(graph) -> list[str]:
    """Edges that run up a layer, join separate packages, or import the public face."""
    bad = []
    for a, targets in graph.items():
        ta = _top(a)
        for b, line in targets.items():
            tb = _top(b)
            if ta == FACE or ta == tb:
                continue
            if tb == FACE:
                why = "imports the package face (use debugkit._version / the module itself)"
            elif ta not in LAYERS or tb not in LAYERS:
                why = "module not in LAYERS (add it to tests/test_layers.py and CONTRIBUTING)"
            elif LAYERS[tb] > LAYERS[ta]:
                why = f"layer {LAYERS[ta]} imports layer {LAYERS[tb]}"
            elif frozenset({ta, tb}) in SEPARATE:
                why = f"{ta} and {tb} must not import each other"
            else:
                continue
            bad.append((f"{a} -> {b}", line, why))
    return sorted(bad)


def module_cycles(graph) -> list[tuple[str, ...]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(tuple(sorted(comp)))
    return sorted(found)


def _cycle_edges(graph, comp) -> list[str]:
    members = set(comp)
    return [f"{a} -> {b} (line {line})" for a in comp for b, line in graph[a].items()
            if b in members]


def test_every_top_level_module_has_a_layer():
    tops = {_top(m) for m in _modules()} - {FACE}
    assert tops <= set(LAYERS), f"give these a layer: {sorted(tops - set(LAYERS))}"


def test_no_import_runs_up_a_layer():
    found = upward_edges(import_graph())
    new = [f"{edge} (line {line}): {why}" for edge, line, why in found if edge not in KNOWN_UPWARD]
    assert not new, "imports that run up a layer:\n  " + "\n  ".join(new)


def test_known_upward_edges_still_exist():
    # An entry that no longer exists is stale: remove it so the list only shrinks.
    current = {edge for edge, _, _ in upward_edges(import_graph())}
    stale = sorted(KNOWN_UPWARD - current)
    assert not stale, f"KNOWN_UPWARD entries that are gone (delete them): {stale}"


def test_no_module_cycles():
    graph = import_graph()
    new = [c for c in module_cycles(graph) if c not in KNOWN_CYCLES]
    lines = [f"{list(c)}:\n    " + "\n    ".join(_cycle_edges(graph, c)) for c in new]
    assert not new, "import cycles between modules:\n  " + "\n  ".join(lines)


def test_nothing_imports_streamlit():
    hits = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                mods = [node.module or ""]
            hits += [f"{name} (line {node.lineno}): {m}" for m in mods
                     if m == "streamlit" or m.startswith("streamlit.")]
    assert not hits, "debugkit/ must not import streamlit:\n  " + "\n  ".join(hits)


def test_the_checks_catch_function_local_upward_imports_and_cycles(tmp_path):
    # A tiny package with the shapes issue 21 removed: io importing recorder inside a
    # function, base importing the face, and two io modules importing each other.
    files = {
        "__init__.py": "",
        "errors.py": "from . import __version__\n",
        "io/__init__.py": "",
        "io/run.py": "def f():\n    from ..recorder.writer import ticks\n    from .upload import x\n",
        "io/upload.py": "def g():\n    from debugkit.io import run\n",
        "recorder/__init__.py": "",
        "recorder/writer.py": "import os\n",
    }
    for rel, text in files.items():
        (tmp_path / "debugkit" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "debugkit" / rel).write_text(text)
    graph = import_graph(tmp_path / "debugkit")
    assert graph["debugkit.io.run"] == {"debugkit.recorder.writer": 2, "debugkit.io.upload": 3}
    assert graph["debugkit.io.upload"] == {"debugkit.io.run": 2}
    up = {edge: why for edge, _, why in upward_edges(graph)}
    assert up == {
        "debugkit.errors -> debugkit": "imports the package face (use debugkit._version / the module itself)",
        "debugkit.io.run -> debugkit.recorder.writer": "io and recorder must not import each other",
    }
    assert module_cycles(graph) == [("debugkit.io.run", "debugkit.io.upload")]


if __name__ == "__main__":  # ``python tests/test_layers.py``: print the current state
    g = import_graph()
    for edge, line, why in upward_edges(g):
        print(f"{'known ' if edge in KNOWN_UPWARD else ''}UP {edge} (line {line}): {why}")
    for comp in module_cycles(g):
        print("CYCLE", list(comp))
        for e in _cycle_edges(g, comp):
            print("   ", e)
