"""Learn the spec of the healthy batches a run trains on (for failure captures).

The recorder observes a sample of the batches (every step up to :data:`SPEC_DENSE`
batches, then every :data:`SPEC_EVERY`-th step, at most :data:`SPEC_MAX` in all) and
commits an observation only when its step ends well. A failure capture stores the spec
learned so far, so the Replay page can say which guard would have stopped the failing
batch.
"""

from __future__ import annotations

from .batchspec import SpecBuilder

SPEC_DENSE = 256  # healthy batches observed at every step...
SPEC_EVERY = 16   # ...then every SPEC_EVERY-th step
SPEC_MAX = 4096   # and no more than this many in all


class SpecSampler:
    """The healthy-batch spec of one recorder: :meth:`observe` a step's batch when it
    begins (on the steps :attr:`every` asks for), :meth:`commit` it when the step ended
    well (or :meth:`discard` it).

    ``every`` is 1 for the first :data:`SPEC_DENSE` committed batches, then
    :data:`SPEC_EVERY`, and 0 once :data:`SPEC_MAX` batches are in (or the batches changed
    structure): the Recorder observes step ``s`` when ``every and s % every == 0``, so an
    unobserved step costs it one attribute read. ``obs`` is the open step's observation
    (None when none was taken).
    """

    def __init__(self):
        self._specs: SpecBuilder | None = SpecBuilder()
        self.obs = None
        self.every = 1
        self._steps = [None, None]  # first and last step observed

    def observe(self, step: int, batch) -> None:
        self.obs = None
        sb = self._specs
        if sb is None or batch is None or not self.every or step % self.every:
            return
        try:
            self.obs = sb.observe(batch)
        except Exception:  # batches of changing structure (InvalidInputError) or any other
            self._specs = None  # error: no spec to learn, never a broken step
            self.every = 0

    def commit(self, step: int) -> None:
        """The step ended well: its observed batch (if any) joins the spec."""
        sb = self._specs
        if self.obs is not None and sb is not None:
            sb.commit(self.obs)
            self._steps = [self._steps[0] if self._steps[0] is not None else step, step]
            self.every = 0 if sb.n >= SPEC_MAX else 1 if sb.n < SPEC_DENSE else SPEC_EVERY
        self.obs = None

    def discard(self) -> None:
        self.obs = None

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
