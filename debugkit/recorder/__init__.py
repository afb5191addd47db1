"""Training-side recording: :class:`Recorder` and its helpers."""

from .recorder import Recorder

__all__ = ["Recorder"]
