"""debugkit: debug PyTorch training runs, from symptom to root cause.

``from debugkit import Recorder, open_run`` imports neither torch nor pandas until
they are used.
"""

from __future__ import annotations

from ._version import __version__
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
    "Recorder", "BatchSpec", "resume_latest", "watch", "retry", "open_run", "Run", "DebugkitError", "RunDirError", "SchemaVersionError",
    "InvalidInputError", "UploadError", "ReplayError", "NonFiniteError",
    "MissingDependencyError", "__version__",
]


def __getattr__(name):
    if name == "Recorder":
        from .recorder import Recorder

        return Recorder
    if name == "BatchSpec":
        from .recorder.guard import BatchSpec

        return BatchSpec
    if name == "watch":
        from .recorder.watch import watch

        return watch
    if name == "resume_latest":
        from .checkpoints import resume_latest

        return resume_latest
    if name in ("open_run", "Run"):
        from .io import run as _run

        return getattr(_run, name)
    raise AttributeError(f"module 'debugkit' has no attribute {name!r}")
