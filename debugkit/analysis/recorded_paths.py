"""Paths a run recorded, as the dashboard shows them: without the recording machine's folders.

A run's manifest and captures record absolute paths of the machine that recorded it (the
model factory's file, the script, the working folder, every frame of a traceback). When
the run was recorded on the server those are the server's folders; when it was uploaded,
the uploader's home. A visitor sees each such path the way a hosted stack-trace viewer
shows an in-app frame: relative to the code root it was imported from
(``examples/layer_health.py``), after ``site-packages/`` for an installed package
(``torch/nn/functional.py``), after the standard library's folder (``threading.py``), and
else by its file name; the line and function next to it are kept.

The roots come from what the run recorded (:func:`recorded_roots`): the ``sys.path`` entry
each recorded module was imported from (its file less the module's dotted path), the
working folder, the script's folder and the interpreter's prefix. The command line's JSON
keeps the full paths (the operator runs it); only what a page shows goes through here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

_STDLIB_DIR = re.compile(r"/lib/python\d+(?:\.\d+)?t?/")
_DRIVE = re.compile(r"^[A-Za-z]:/")
#: A traceback's frame line: ``File "<path>", line N, in f`` (a quoted path may hold spaces).
_FRAME = re.compile(r'(File ")([^"\n]+)(")')
#: An absolute path inside a sentence (POSIX, or a Windows drive), not a URL's path
#: (``https://host/a``) nor a ratio or a metric key (``1/2``, ``loss/train``).
_ABS_PATH = re.compile(r"(?<![\w.:/\\~-])(?:/|[A-Za-z]:[\\/])[^\s,;()\[\]{}<>'\"`|]+")


def _norm(path: str) -> str:
    return path.replace("\\", "/")


def _module_root(module, file) -> str | None:
    """The folder ``module`` was imported from, given the ``file`` it was recorded at
    (``examples.digits`` at ``/src/proj/examples/digits.py``: ``/src/proj``); None when
    the file does not match the module's dotted name."""
    if not isinstance(module, str) or not module or not isinstance(file, str) or not file:
        return None
    parts = module.split(".")
    segs = _norm(file).rstrip("/").split("/")
    if segs[-1] == f"{parts[-1]}.py":
        pkg = parts[:-1]
    elif segs[-1] == "__init__.py":
        pkg = parts
    else:
        return None
    folder = segs[:-1]
    if len(folder) <= len(pkg) or (pkg and folder[len(folder) - len(pkg):] != pkg):
        return None
    return "/".join(folder[:len(folder) - len(pkg)])


def _code_records(code) -> Iterable[dict]:
    if isinstance(code, dict):
        for rec in code.values():
            if isinstance(rec, dict):
                yield rec


def recorded_roots(manifest: dict | None, *records: dict | None) -> tuple[str, ...]:
    """The recording machine's folders a recorded path is shown relative to, most telling
    first: the folder each recorded module was imported from (``code`` of the manifest and
    of each record, such as a failure capture), then the working folder (``env.cwd``), the
    script's folder (``env.argv[0]``) and the interpreter's prefix (``env.executable``
    less ``bin/python``). Forward slashes, no trailing slash; never ``/`` itself."""
    m = manifest if isinstance(manifest, dict) else {}
    modules: list[str] = []
    for source in (m, *records):
        if not isinstance(source, dict):
            continue
        for rec in _code_records(source.get("code")):
            root = _module_root(rec.get("module"), rec.get("file"))
            if root:
                modules.append(root)
    env = m.get("env")
    if not isinstance(env, dict):
        env = {}
    others: list[str] = []
    cwd = env.get("cwd")
    if isinstance(cwd, str):
        others.append(_norm(cwd))
    argv = env.get("argv")
    if isinstance(argv, list) and argv and isinstance(argv[0], str) and "/" in _norm(argv[0]):
        others.append(_norm(argv[0]).rsplit("/", 1)[0])
    exe = env.get("executable")
    if isinstance(exe, str) and "/bin/" in _norm(exe):
        others.append(_norm(exe).rsplit("/bin/", 1)[0])
    out: list[str] = []
    # among the modules' roots the deepest first (a src/ layout inside a project folder)
    for r in sorted(modules, key=len, reverse=True) + others:
        r = r.rstrip("/")
        if r and r not in out and not re.fullmatch(r"[A-Za-z]:", r):  # never "/" or "C:"
            out.append(r)
    return tuple(out)


def is_absolute(path: str) -> bool:
    p = _norm(path)
    return p.startswith("/") or bool(_DRIVE.match(p))


def display_path(file, roots: Iterable[str] = (), unknown: Callable[[str], str] | None = None) -> str:
    """A recorded ``file`` as a visitor sees it: after ``site-packages/`` (or
    ``dist-packages/``), relative to the first of ``roots`` it lies in, after the standard
    library's folder, else ``unknown(file)`` where that gives a relative path (the server's
    own naming of its served folders), else its file name; a relative path as it is. A
    ``:line`` after the path is kept (``/src/proj/examples/digits.py:64`` ->
    ``examples/digits.py:64``)."""
    if not isinstance(file, str) or not file:
        return "" if file is None else str(file)
    f = _norm(file)
    for marker in ("site-packages/", "dist-packages/"):
        if marker in f:
            return f.rsplit(marker, 1)[1]
    m = _STDLIB_DIR.search(f)
    if m:
        return f[m.end():]
    for root in roots:
        if f.startswith(root + "/"):
            return f[len(root) + 1:]
    if is_absolute(f):
        named = unknown(file) if unknown is not None else None
        if named and not is_absolute(named):
            return named
        return f.rstrip("/").rsplit("/", 1)[-1]
    return file


def display_paths_in(text, roots: Iterable[str] = (), unknown: Callable[[str], str] | None = None) -> str:
    """``text`` (a traceback, an error message, a diff's header, a command line) with every
    absolute path in it shown by :func:`display_path`: a traceback keeps each frame's
    relative file, line and function. ``unknown`` as for :func:`display_path`."""
    if text is None:
        return ""
    roots = tuple(roots)
    out = _FRAME.sub(lambda m: m.group(1) + display_path(m.group(2), roots, unknown) + m.group(3), str(text))
    # a root that holds a space ("/home/a/My Project") is cut whole: the pattern stops at spaces
    for root in sorted(roots, key=len, reverse=True):
        if " " in root:
            out = out.replace(root + "/", "")
    return _ABS_PATH.sub(lambda m: display_path(m.group(0), roots, unknown), out)

