"""File paths as a reader wants them: a package's files relative to the package, the
standard library's without the interpreter's prefix.
"""

from __future__ import annotations

import re

_STDLIB_DIR = re.compile(r"/lib/python\d+(?:\.\d+)?/")
_ABS_PATH = re.compile(r"(?<![\w.:/])/[^\s,()'\"]+")


def display_path(file) -> str:
    """A recorded file path as the dashboard shows it, without the recording machine's
    folders: the part after ``site-packages/`` (``torch/nn/modules/module.py``), after the
    standard library's folder (``threading.py``), else an absolute path's last two parts
    (``examples/digits.py``); a relative path as it is."""
    if not isinstance(file, str) or not file:
        return "" if file is None else str(file)
    f = file.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in f:
            return f.split(marker, 1)[1]
    m = _STDLIB_DIR.search(f)
    if m:
        return f[m.end():]
    if f.startswith("/") or re.match(r"^[A-Za-z]:/", f):
        return "/".join([p for p in f.split("/") if p][-2:])
    return f


def display_paths_in(text: str) -> str:
    """``text`` (a command line, a sentence) with every absolute path in it shortened by
    :func:`display_path`."""
    return _ABS_PATH.sub(lambda m: display_path(m.group(0)), str(text))


def frame_package_path(file: str) -> str:
    """A file path made short for a sentence: the part after site-packages, else the
    file's name."""
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1]
    return file.replace("\\", "/").rsplit("/", 1)[-1]
