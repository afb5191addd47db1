"""Learn the spec of the healthy batches a run trains on (for failure captures).

The recorder observes a sample of the batches (every step up to :data:`SPEC_DENSE`
batches, then every :data:`SPEC_EVERY`-th step, backing off geometrically to every
:data:`SPEC_EVERY_MAX`-th while the batches teach it nothing new, at most :data:`SPEC_MAX`
in all) and commits an observation only when its step ends well. A failure capture stores the spec
learned so far, so the Replay page can say which guard would have stopped the failing
batch.
"""

from __future__ import annotations

from .batchspec import SpecBuilder

SPEC_DENSE = 256  # healthy batches observed at every step...
SPEC_EVERY = 16   # ...then every SPEC_EVERY-th step; each observed batch that adds nothing
SPEC_EVERY_MAX = 1024  # (no new shape or value range) doubles the interval, up to this;
SPEC_MAX = 4096   # one that does sets it back to SPEC_EVERY; no more than SPEC_MAX in all


class SpecSampler:
    """The healthy-batch spec of one recorder: :meth:`observe` a step's batch when it
    begins (on the steps :attr:`every` asks for), :meth:`commit` it when the step ended
    well (or :meth:`discard` it).

    ``every`` is 1 for the first :data:`SPEC_DENSE` committed batches, then
    :data:`SPEC_EVERY`, doubled (up to :data:`SPEC_EVERY_MAX`) by each committed batch
    that widened nothing and set back to :data:`SPEC_EVERY` by one that did (the spec
    still changes: a new shape or integer range), and 0 once :data:`SPEC_MAX` batches are
    in (or the batches changed structure): the Recorder observes step ``s`` when ``every and s % every == 0``, so an
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
            new = sb.commit(self.obs)
            self._steps = [self._steps[0] if self._steps[0] is not None else step, step]
            if sb.n >= SPEC_MAX:
                self.every = 0
            elif sb.n < SPEC_DENSE:
                self.every = 1
            elif new or self.every < SPEC_EVERY:  # the dense phase ends, or the spec grew
                self.every = SPEC_EVERY
            else:
                self.every = min(2 * self.every, SPEC_EVERY_MAX)
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
