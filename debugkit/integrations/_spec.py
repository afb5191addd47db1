"""Helpers the framework adapters share: callable specs of user classes, JSON-able kwargs."""

from __future__ import annotations

import json
import sys
import warnings

from ..errors import DebugkitWarning

MSG_MAIN_CLASS = ("debugkit: {cls} is defined in a script run as __main__, which replay cannot "
                  "import; run the script with `python -m package.module`, move the class into a "
                  "module, or pass model_factory='module:callable'")
MSG_KWARGS_NOT_JSON = ("debugkit: {what} are not JSON-serialisable ({error}); replay needs "
                       "factory_kwargs it can store: pass factory_kwargs= or model_factory=")


def class_spec(cls) -> str | None:
    """``"module:QualName"`` of a class, resolving ``__main__`` to the module run with ``-m``.

    Returns None (with a warning) for a class replay could not import.
    """
    module = cls.__module__
    if module == "__main__":
        spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        module = getattr(spec, "name", None)
        if not module or module == "__main__":
            warnings.warn(MSG_MAIN_CLASS.format(cls=cls.__qualname__), DebugkitWarning, stacklevel=3)
            return None
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
