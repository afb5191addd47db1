"""Reading runs: :func:`open_run`, the run store, safe upload unpacking."""

from .run import Run, open_run

__all__ = ["Run", "open_run"]
