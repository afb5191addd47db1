"""``"module:qualname"`` specs of the user's callables, as a replay process can import them.

A replay rebuilds what the run used from code (the model, the dataset, the collate
function) by importing ``module`` and looking up ``qualname``, after checking the
module's file against the SHA-256 recorded here (:func:`debugkit.recorder.capture.
describe_callable`, :mod:`debugkit.replay.code`). Only module-level functions and
classes have such a spec: a lambda, a closure, a bound method, a ``functools.partial``
or a callable object does not.

A function defined in the script that was started as ``python train.py`` lives in
``__main__``, which no other process can import. It gets the script's own module name
(``train``, found on the replay's path beside the script) when importing the script
only defines things (:func:`import_safe`, checked on its source at record time), and the
module name ``python -m pkg.train`` ran it under.
"""

from __future__ import annotations

import ast
import os
import sys

MSG_LOCAL = ("{name} is a lambda or a function defined inside another function: no other "
             "process can import it; define it at the top level of a module")
MSG_NOT_FUNCTION = ("{name} is a {type}, not a module-level function or class: no other process "
                    "can rebuild it; pass a function defined at the top level of a module")
MSG_MAIN = ("{name} is defined in a script run as __main__ that replay cannot import ({why}); "
            "put the training code under `if __name__ == \"__main__\":`, or move {name} into a module")
MSG_GONE = "{name} is not what {spec} names at import (it was rebound or is created at run time)"


def import_safe(path: str, name: str) -> tuple[int, str] | None:
    """Why importing the script at ``path`` would do more than define things: ``(line,
    what)`` of its first top-level statement that runs code (a call other than
    ``sys.path`` set-up, a loop, a ``with``), or of ``name`` missing as a top-level
    ``def``/``class``; None when importing it only defines its classes and functions."""
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        return 0, f"nothing it can parse ({type(exc).__name__})"
    top = name.split(".")[0]
    if not any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == top for n in tree.body):
        return 0, f"no top-level class or function {top}"
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.ClassDef, ast.Pass)):
            continue
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and ast.unparse(node.value.func).startswith("sys.path."):
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            value = node.value
            calls = [c for c in ast.walk(value) if isinstance(c, ast.Call)] if value is not None else []
            if not calls or all(ast.unparse(c.func).split(".")[0] in ("Path", "os", "torch", "dict",
                                                                         "tuple", "list", "frozenset")
                                for c in calls):
                continue
        return node.lineno, f"`{ast.unparse(node).splitlines()[0][:80]}`"
    return None


def main_module_name(qualname: str) -> tuple[str | None, str | None]:
    """``(module, None)``: the name under which replay imports what ``__main__`` defines
    as ``qualname``; ``(None, why)`` when it cannot."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if name and name != "__main__":
        return name, None  # python -m pkg.train
    path = getattr(main, "__file__", None)
    name = os.path.splitext(os.path.basename(path))[0] if path else ""
    if not path or not name.isidentifier():
        return None, "no script file"
    why = import_safe(path, qualname)
    if why is not None:
        return None, f"importing {os.path.basename(path)} would run {why[1]} (line {why[0]})"
    return name, None


def callable_spec(fn) -> tuple[str | None, str | None]:
    """``(spec, None)`` for a module-level function or class, else ``(None, why)``.

    The spec is checked to name ``fn`` itself (``getattr(module, qualname) is fn``), so a
    function rebound after definition or built at run time is not mistaken for it.
    """
    import inspect

    target = inspect.unwrap(fn) if callable(fn) else fn
    name = getattr(target, "__qualname__", None) or type(fn).__name__
    if not (inspect.isfunction(target) or inspect.isclass(target)):
        return None, MSG_NOT_FUNCTION.format(name=type(fn).__name__, type=type(fn).__name__)
    if "<locals>" in name or "<lambda>" in name:
        return None, MSG_LOCAL.format(name=name)
    module = getattr(target, "__module__", None)
    if not module:
        return None, MSG_NOT_FUNCTION.format(name=name, type=type(fn).__name__)
    obj = sys.modules.get(module)
    for part in name.split("."):
        obj = getattr(obj, part, None)
    if obj is not fn and obj is not target:
        return None, MSG_GONE.format(name=name, spec=f"{module}:{name}")
    if module == "__main__":
        module, why = main_module_name(name)
        if module is None:
            return None, MSG_MAIN.format(name=name, why=why)
    return f"{module}:{name}", None
