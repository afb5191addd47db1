"""The batch guard that would have stopped a captured failure.

A capture stores ``batch_spec.json``: the :class:`~debugkit.BatchSpec` the Recorder
inferred from the healthy batches before the failing one. Checked against the captured
batch, it says whether a guard (``Recorder(..., guard=spec)``) would have stopped the
batch before it reached the model, and which rule it breaks. A capture without it
(recorded by an older debugkit) falls back to a spec inferred from the captured batch
itself, with the labels held to ``[0, num_classes)`` and floating inputs to finite values:
weaker (it cannot know the healthy shapes or integer ranges), and said so.

Nothing here runs the capture's code: the batch loads through safetensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import DebugkitError
from ..recorder.batchspec import BatchSpec, Violation
from ..runschema import read_run_json

SPEC_FILE = "batch_spec.json"


@dataclass
class GuardSuggestion:
    """``spec``: the suggested BatchSpec; ``source``: ``"healthy_batches"`` (learned by the
    Recorder) or ``"captured_batch"`` (the fallback); ``healthy_batches``: how many it was
    learned from; ``violations``: what the captured batch breaks (empty: the guard would
    have let it through, so the failure is not in the batch's dtype, shape, range or
    finiteness); ``problem``: why no suggestion could be made, else ""."""

    spec: BatchSpec | None
    source: str
    healthy_batches: int = 0
    violations: list[Violation] = field(default_factory=list)
    problem: str = ""

    @property
    def catches(self) -> bool:
        return bool(self.violations)

    def spec_json(self) -> str:
        return self.spec.to_json() if self.spec is not None else ""


def _fallback(batch, num_classes) -> BatchSpec:
    from .datachecks import find_target

    spec = BatchSpec.infer([batch])
    target = find_target(batch)
    if target is not None and num_classes:
        key = str(target[0][0])
        if key in spec.tensors:
            spec.tensors[key].range = (0, int(num_classes))
    for t in spec.tensors.values():
        if t.range is not None and (target is None or t is not spec.tensors.get(str(target[0][0]))):
            t.range = None  # an integer range seen in one failing batch proves nothing
    return spec


def suggest_guard(record: dict, num_classes: int | None = None) -> GuardSuggestion:
    """The guard for a failure capture (``record`` from ``run.failures()``), checked
    against its captured batch."""
    from .loading import capture_file, load_batch

    try:
        batch = load_batch(record)
    except DebugkitError as exc:
        return GuardSuggestion(None, "none", problem=f"the captured batch cannot be read: {exc}")
    num_classes = record.get("num_classes", num_classes)
    p = capture_file(record, SPEC_FILE)
    spec, source, n = None, "captured_batch", 0
    if p.is_file():
        try:
            spec = BatchSpec.load(p)
            n = int((read_run_json(p, "batch_spec.json").get("inferred_from") or {}).get("healthy_batches") or 0)
            source = "healthy_batches"
        except (DebugkitError, ValueError, TypeError):
            spec = None
    if spec is None:
        try:
            spec = _fallback(batch, num_classes)
        except DebugkitError as exc:
            return GuardSuggestion(None, "none", problem=f"no spec fits this batch: {exc}")
    return GuardSuggestion(spec, source, n, spec.check(batch, record.get("dataset_indices")))
