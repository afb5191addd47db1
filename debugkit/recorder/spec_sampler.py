"""Learn the spec of the healthy batches a run trains on (for failure captures).

The recorder observes a sample of the batches (every step up to :data:`SPEC_DENSE`
batches, then every :data:`SPEC_EVERY`-th step, at most :data:`SPEC_MAX` in all) and
commits an observation only when its step ends well. A failure capture stores the spec
learned so far, so the Replay page can say which guard would have stopped the failing
batch.
"""

from __future__ import annotations

from ..errors import InvalidInputError
from .batchspec import SpecBuilder

SPEC_DENSE = 256  # healthy batches observed at every step...
SPEC_EVERY = 16   # ...then every SPEC_EVERY-th step
SPEC_MAX = 4096   # and no more than this many in all


class SpecSampler:
    """The healthy-batch spec of one recorder: :meth:`observe` a step's batch when it
    begins, :meth:`commit` it when the step ended well (or :meth:`discard` it)."""

    def __init__(self):
        self._specs: SpecBuilder | None = SpecBuilder()
        self._obs = None
        self._steps = [None, None]  # first and last step observed

    def observe(self, step: int, batch) -> None:
        self._obs = None
        sb = self._specs
        if sb is None or batch is None or sb.n >= SPEC_MAX or (sb.n >= SPEC_DENSE and step % SPEC_EVERY):
            return
        try:
            self._obs = sb.observe(batch)
        except InvalidInputError:
            self._specs = None  # batches of changing structure: no spec to learn
        except Exception:  # never break a step for an optional observation
            self._specs = None

    def commit(self, step: int) -> None:
        """The step ended well: its observed batch (if any) joins the spec."""
        if self._obs is not None and self._specs is not None:
            self._specs.commit(self._obs)
            self._steps = [self._steps[0] if self._steps[0] is not None else step, step]
        self._obs = None

    def discard(self) -> None:
        self._obs = None

    def spec(self, num_classes) -> dict | None:
        """The spec learned so far as a dict (``inferred_from`` says from what), or None."""
        sb = self._specs
        if sb is None or not sb.n:
            return None
        try:
            spec = sb.build(num_classes).to_dict()
        except Exception:
            return None
        spec["inferred_from"] = {"healthy_batches": sb.n, "first_step": self._steps[0],
                                 "last_step": self._steps[-1], "num_classes": num_classes}
        return spec
