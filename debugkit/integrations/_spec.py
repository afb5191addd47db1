"""Helpers the framework adapters share: callable specs of user classes, JSON-able kwargs."""

from __future__ import annotations

import json
import sys
import warnings

from ..errors import DebugkitWarning

MSG_MAIN_CLASS = ("debugkit: {cls} is defined in a script run as __main__, which replay cannot "
                  "import; run the script with `python -m package.module`, move the class into a "
                  "module, or pass model_factory='module:callable'")
MSG_NO_HPARAMS = ("debugkit: {cls}.__init__ takes {params} but the module saved no hyperparameters, "
                  "so replay cannot rebuild it: call self.save_hyperparameters() in __init__, or pass "
                  "factory_kwargs={{...}} (or model_factory='module:callable') to the callback")
MSG_KWARGS_NOT_JSON = ("debugkit: {what} are not JSON-serialisable ({error}); replay needs "
                       "factory_kwargs it can store: pass factory_kwargs= or model_factory=")


MSG_MAIN_UNSAFE = ("debugkit: {cls} is defined in the script {file}, which replay would import as "
                   "module {module!r}, but importing it would run {what} (line {line}); put the "
                   "training code under `if __name__ == \"__main__\":`, or pass "
                   "model_factory='module:callable'")


def _import_safe(path: str, qualname: str) -> tuple[int, str] | None:
    """See :func:`debugkit.recorder.codespec.import_safe`."""
    from ..recorder.codespec import import_safe

    return import_safe(path, qualname)


def class_spec(cls) -> str | None:
    """``"module:QualName"`` of a class, resolving ``__main__`` to the module run with ``-m``,
    or, for a script run as ``python path/to/train.py``, to the script's own module name
    (``train``, found on ``sys.path[0]``, the script's folder) when importing the script
    only defines things (checked on its source now, at record time).

    Returns None (with a warning that says what to pass) for a class replay could not import.
    """
    import os

    module = cls.__module__
    if module == "__main__":
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        module = getattr(spec, "name", None)
        if not module or module == "__main__":
            path = getattr(main, "__file__", None)
            name = os.path.splitext(os.path.basename(path))[0] if path else ""
            if not path or not name.isidentifier():
                warnings.warn(MSG_MAIN_CLASS.format(cls=cls.__qualname__), DebugkitWarning, stacklevel=3)
                return None
            why = _import_safe(path, cls.__qualname__)
            if why is not None:
                warnings.warn(MSG_MAIN_UNSAFE.format(cls=cls.__qualname__, file=path, module=name,
                                                     line=why[0], what=why[1]),
                              DebugkitWarning, stacklevel=3)
                return None
            module = name
    return f"{module}:{cls.__qualname__}"


def json_kwargs(kwargs, what: str) -> dict | None:
    """``dict(kwargs)`` if it survives a JSON round trip unchanged, else None (and a warning)."""
    try:
        out = dict(kwargs or {})
        if json.loads(json.dumps(out)) != out:
            raise ValueError("values change in a JSON round trip (tuples, non-string keys)")
        return out
    except (TypeError, ValueError) as exc:
        warnings.warn(MSG_KWARGS_NOT_JSON.format(what=what, error=exc), DebugkitWarning, stacklevel=3)
        return None


def missing_init_args(cls, kwargs: dict) -> list[str]:
    """The parameters of ``cls.__init__`` without a default that ``kwargs`` lacks."""
    import inspect

    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return []
    return [n for n, p in list(sig.parameters.items())[1:]
            if p.default is inspect.Parameter.empty and n not in kwargs
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
