"""What a failure capture's batch alone shows, without running any code.

``diagnose`` and ``info`` name the sample behind a failure when the captured tensors
show it by themselves (cheap checks, no replay): a label outside ``[0, num_classes)``,
a NaN/Inf in a floating input, or a tensor whose dtype or shape differs from the
healthy batches the Recorder saw before (the capture's ``batch_spec.json``). The
replay's checks go further (they run the step); these only read the batch.

Needs torch (the batch loads through safetensors); nothing from the run is unpickled.
"""

from __future__ import annotations

from ..errors import DebugkitError


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def check_captured_batch(record: dict, num_classes: int | None = None) -> dict | None:
    """The first thing the captured batch of ``record`` (from ``run.failures()``) shows.

    Returns ``{"check", "input", "sample_index", "dataset_index", "value", "detail"}``
    (``check``: ``labels``, ``finite_inputs``, ``shape`` or ``dtype``; ``value``: the bad
    label, ``"nan"``/``"inf"``, or None) or None when the batch shows nothing (or was not
    captured, or cannot be read).
    """
    if not (record.get("files") or {}).get("batch") or not record.get("path"):
        return None
    from . import datachecks
    from .loading import format_path, load_batch
    from .report import dataset_index

    try:
        batch = load_batch(record)
    except (DebugkitError, OSError, ValueError, RuntimeError):
        return None
    n_batch = datachecks.batch_size(batch)
    num_classes = record.get("num_classes") or num_classes
    target = datachecks.find_target(batch)

    def where(sample):
        di = dataset_index(record, sample, n_batch)
        return (f"sample {sample}" + (f" (dataset index {di})" if di is not None else "")
                if sample is not None else "the batch"), di

    if target is not None and num_classes:
        lab = datachecks.find_bad_labels(target[1], int(num_classes), path=target[0], n_batch=n_batch)
        if lab["count"]:
            s = lab["samples"][0]
            phrase, di = where(s["sample"])
            val = s["values"][0]
            more = f" ({lab['n_samples'] - 1} more samples)" if lab["n_samples"] > 1 else ""
            return {"check": "labels", "input": format_path(tuple(lab["path"])),
                    "sample_index": s["sample"], "dataset_index": di, "value": val,
                    "detail": f"{phrase} has label {_num(val)}, outside [0, {int(num_classes)}){more}"}
    bad = datachecks.find_nonfinite(batch, skip=target[0] if target else None, n_batch=n_batch)
    if bad:
        b = bad[0]
        s = b["samples"][0] if b["samples"] else {"sample": None, "positions": []}
        phrase, di = where(s["sample"])
        kind = "NaN" if b["nan"] else "Inf"
        pos = s.get("positions") or []
        at = f" at position {pos[0]}" if pos else ""
        more = f" ({b['n_samples'] - 1} more samples)" if b["n_samples"] > 1 else ""
        return {"check": "finite_inputs", "input": format_path(tuple(b["path"])),
                "sample_index": s["sample"], "dataset_index": di, "value": kind.lower(),
                "detail": f"{phrase} of {format_path(tuple(b['path']))} holds {kind}{at}{more}"}
    from .guard_suggestion import suggest_guard

    g = suggest_guard(record, num_classes)
    if g.source != "healthy_batches":
        return None  # a spec inferred from the failing batch itself proves nothing about shapes
    for v in g.violations:
        if v.rule in ("shape", "dtype", "structure"):
            phrase, di = where(v.sample)
            return {"check": "shape" if v.rule != "dtype" else "dtype", "input": v.tensor,
                    "sample_index": v.sample, "dataset_index": v.dataset_index or di, "value": None,
                    "detail": f"tensor {v.tensor!r} differs from the {g.healthy_batches} healthy "
                              f"batches before it: {v.message}"}
    return None
