"""What a failure capture's batch alone shows, without running any code.

``diagnose`` and ``info`` name the sample behind a failure when the captured tensors
show it by themselves (cheap checks, no replay): a label outside ``[0, num_classes)``,
a NaN/Inf in a floating input, or a tensor whose dtype or shape differs from the
healthy batches the Recorder saw before (the capture's ``batch_spec.json``). The
replay's checks go further (they run the step); these only read the batch.

The batch loads through ``safetensors.numpy`` and is checked in numpy
(:mod:`.batchcheck_numpy`), so this does not import torch; a dtype numpy cannot hold
(bfloat16, float8, complex) falls back to the torch checks. Nothing from the run is
unpickled.
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
    from . import batchcheck_numpy as npc
    from . import datachecks

    num_classes = record.get("num_classes") or num_classes
    try:
        batch = npc.load_batch_numpy(record)
    except npc.NeedsTorch:
        pass
    except (DebugkitError, OSError, ValueError, RuntimeError):
        return None
    else:
        return _shows(record, num_classes, batch, npc.find_target,
                      lambda t, n, path, n_batch: npc.find_bad_labels(t, n, path=path, n_batch=n_batch),
                      npc.find_nonfinite, lambda: _numpy_violations(record, batch))
    from .loading import load_batch

    try:
        batch = load_batch(record)
    except (DebugkitError, OSError, ValueError, RuntimeError):
        return None
    return _shows(record, num_classes, batch, datachecks.find_target,
                  lambda t, n, path, n_batch: datachecks.find_bad_labels(t, n, path=path, n_batch=n_batch),
                  datachecks.find_nonfinite, lambda: _torch_violations(record, num_classes))


def _numpy_violations(record: dict, batch) -> tuple[int, list] | None:
    """``(healthy batches, violations)`` of the capture's learned spec, or None without one."""
    from ..recorder.batchspec import BatchSpec
    from ..runschema import read_run_json
    from .batchcheck_numpy import check_spec
    from .guard_suggestion import SPEC_FILE
    from .loading import capture_file

    p = capture_file(record, SPEC_FILE)
    if not p.is_file():
        return None
    try:
        spec = BatchSpec.load(p)
        n = int((read_run_json(p, "batch_spec.json").get("inferred_from") or {}).get("healthy_batches") or 0)
    except (DebugkitError, ValueError, TypeError):
        return None
    return n, check_spec(spec, batch, record.get("dataset_indices"))


def _torch_violations(record: dict, num_classes) -> tuple[int, list] | None:
    from .guard_suggestion import suggest_guard

    g = suggest_guard(record, num_classes)
    if g.source != "healthy_batches":
        return None  # a spec inferred from the failing batch itself proves nothing about shapes
    return g.healthy_batches, g.violations


def _shows(record, num_classes, batch, find_target, find_bad_labels, find_nonfinite, violations):
    from . import datachecks
    from .loading import format_path
    from .report import dataset_index

    n_batch = datachecks.batch_size(batch)
    target = find_target(batch)

    def where(sample):
        di = dataset_index(record, sample, n_batch)
        return (f"sample {sample}" + (f" (dataset index {di})" if di is not None else "")
                if sample is not None else "the batch"), di

    if target is not None and num_classes:
        lab = find_bad_labels(target[1], int(num_classes), target[0], n_batch)
        if lab["count"]:
            s = lab["samples"][0]
            phrase, di = where(s["sample"])
            val = s["values"][0]
            more = f" ({lab['n_samples'] - 1} more samples)" if lab["n_samples"] > 1 else ""
            return {"check": "labels", "input": format_path(tuple(lab["path"])),
                    "sample_index": s["sample"], "dataset_index": di, "value": val,
                    "detail": f"{phrase} has label {_num(val)}, outside [0, {int(num_classes)}){more}"}
    bad = find_nonfinite(batch, skip=target[0] if target else None, n_batch=n_batch)
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
    got = violations()
    if got is None:
        return None
    healthy, found = got
    for v in found:
        if v.rule in ("shape", "dtype", "structure"):
            phrase, di = where(v.sample)
            return {"check": "shape" if v.rule != "dtype" else "dtype", "input": v.tensor,
                    "sample_index": v.sample, "dataset_index": v.dataset_index or di, "value": None,
                    "detail": f"tensor {v.tensor!r} differs from the {healthy} healthy "
                              f"batches before it: {v.message}"}
    return None
