"""debugkit: debug PyTorch training runs, from symptom to root cause.

``from debugkit import Recorder, open_run`` imports neither torch nor pandas until
they are used; nor do ``diagnose`` (every finding of a run), ``Finding``,
``audit_model`` (a SHAP + fairness bias audit) and ``scan_dataset`` (every sample that
breaks a batch spec). The package ``debugkit.diagnose`` is
``importlib.import_module("debugkit.diagnose")``: the attribute is the function.
"""

from __future__ import annotations

from ._version import __version__

# Eager for the same reason: ``debugkit.diagnose`` is also the package that holds the
# function, and the package is imported by every page. It needs only the standard library
# until called (its sources import pandas when they run).
from .diagnose import diagnose
from .errors import (
    DebugkitError,
    InvalidInputError,
    MissingDependencyError,
    NonFiniteError,
    ReplayError,
    RunDirError,
    SchemaVersionError,
    UploadError,
)

# Imported eagerly, unlike the names below: the module shares the function's name, so a
# lazy import would leave ``debugkit.retry`` bound to the module whenever something
# imported ``debugkit.retry`` (the module) first. It needs only the standard library
# (torch is imported when retry() is called with the default ``on``).
from .retry import retry

__all__ = [
    "Recorder", "serve", "ServeRecorder", "BatchSpec", "resume_latest", "watch", "retry", "open_run", "Run", "DebugkitError", "RunDirError", "SchemaVersionError",
    "InvalidInputError", "UploadError", "ReplayError", "NonFiniteError",
    "MissingDependencyError", "__version__", "diagnose", "Finding", "audit_model", "scan_dataset",
]

#: The lazily imported names: ``name -> (module, attribute)``.
_LAZY = {
    "Recorder": ("debugkit.recorder", "Recorder"),
    "serve": ("debugkit.recorder.serve", "serve"),
    "ServeRecorder": ("debugkit.recorder.serve", "ServeRecorder"),
    "BatchSpec": ("debugkit.recorder.batchspec", "BatchSpec"),
    "watch": ("debugkit.recorder.watch", "watch"),
    "resume_latest": ("debugkit.checkpoints", "resume_latest"),
    "open_run": ("debugkit.io.run", "open_run"),
    "Run": ("debugkit.io.run", "Run"),
    "Finding": ("debugkit.analysis.findings", "Finding"),
    "audit_model": ("debugkit.audit.auditor", "audit_model"),
    "scan_dataset": ("debugkit.recorder.scan", "scan_dataset"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'debugkit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
