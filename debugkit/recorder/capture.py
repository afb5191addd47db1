"""Failure capture: everything needed to replay a failing step, written without pickle.

Layout of ``failures/<id>/`` (see docs/run-format.md):

- ``failure.json``      the record; written last, so a directory with it is complete
- ``batch.safetensors`` + ``batch.json``   the batch's tensors and its structure
- ``model.safetensors`` the model's ``state_dict`` as the failing step saw it
- ``optimizer.pt``      the optimizer's ``state_dict`` (``torch.load(weights_only=True)``)
- ``rng.safetensors`` + ``rng.json``       CPU/CUDA/numpy generator states and Python's
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import traceback as tb
from pathlib import Path
from typing import Any

from .. import format as fmt
from .._fsutil import atomic_write_json, sha256_file
from ..tensortree import save_tree


def take_rng_state() -> dict:
    """CPU (and, once initialised, CUDA) torch generator states: taken at every step start.

    Copying numpy's and Python's generator states costs ~100x more than torch's (numpy
    copies 624 words into a new array), so those are taken by :func:`add_host_rng_state`
    only when a capture is written (they rarely drive a training step; DataLoader
    workers seed their own).
    """
    import torch

    state: dict[str, Any] = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_initialized():  # cheap; is_available() costs more per step
        try:
            state["torch_cuda"] = torch.cuda.get_rng_state_all()
        except RuntimeError:
            pass
    return state


def add_host_rng_state(state: dict) -> dict:
    """Add numpy's and Python's generator states (as of now) to a step-start state."""
    state = dict(state)
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    state["python"] = random.getstate()
    return state


def _write_rng(state: dict, d: Path) -> list[str]:
    import torch
    from safetensors.torch import save_file

    tensors = {"torch_cpu": state["torch_cpu"].clone()}
    meta: dict[str, Any] = {"cuda_devices": 0, "torch_taken": "step start",
                            "host_taken": "capture time"}
    for i, s in enumerate(state.get("torch_cuda", [])):
        tensors[f"torch_cuda_{i}"] = s.clone()
        meta["cuda_devices"] = i + 1
    if "numpy" in state:
        name, keys, pos, has_gauss, cached = state["numpy"]
        tensors["numpy_keys"] = torch.from_numpy(keys.astype("int64"))
        meta["numpy"] = {"name": name, "pos": int(pos), "has_gauss": int(has_gauss),
                         "cached_gaussian": float(cached)}
    version, internal, gauss = state["python"]
    meta["python"] = {"version": version, "state": list(internal), "gauss": gauss}
    save_file(tensors, str(d / "rng.safetensors"))
    (d / "rng.json").write_text(json.dumps(meta))
    return ["rng.safetensors", "rng.json"]


def _state_dict_tensors(model) -> tuple[dict, list[str]]:
    import torch

    out, skipped = {}, []
    for k, v in model.state_dict().items():
        if isinstance(v, torch.Tensor):
            out[k] = v.detach().to("cpu").contiguous().clone()
        else:
            skipped.append(k)
    return out, skipped


def write_capture(
    run_dir: Path,
    *,
    kind: str,
    step: int,
    rank: int,
    world_size: int,
    device: str,
    exc: BaseException | None,
    batch: Any,
    model=None,
    optimizer=None,
    rng_state: dict | None = None,
    code: dict | None = None,
    dataset_indices: list | None = None,
    message: str | None = None,
    extra: dict | None = None,
    batch_spec: dict | None = None,
    fid: str | None = None,
) -> str:
    """Write one failure capture under ``run_dir/failures/`` and return its id.

    Each part is written independently: when one fails (for example the model's tensors
    live on a CUDA context a device-side assert has broken), the others are still
    written and the record lists the failure under ``capture_errors``. ``fid`` is the id
    to use (an inference run reserves it on the request thread; see
    :mod:`debugkit.recorder.serve`); by default ``r<rank>-s<step>-<kind>``. Either way a
    folder that exists already gets a ``-2``, ``-3`` ... suffix.
    """
    failures = Path(run_dir) / fmt.FAILURES_DIR
    failures.mkdir(parents=True, exist_ok=True)
    base = fid or f"r{rank}-s{step:07d}-{kind}"
    fid, n = base, 1
    while (failures / fid).exists():
        n += 1
        fid = f"{base}-{n}"
    tmp = failures / f".tmp-{fid}-{os.getpid()}"
    tmp.mkdir(parents=True)
    files: dict[str, list[str]] = {}
    errors: dict[str, str] = {}

    def part(name, fn):
        try:
            files[name] = fn()
        except Exception as e:  # one broken part must not lose the others
            errors[name] = f"{type(e).__name__}: {e}"

    part("batch", lambda: (save_tree(batch, tmp / "batch.safetensors", tmp / "batch.json"),
                           ["batch.safetensors", "batch.json"])[1])
    if model is not None:
        def _model():
            from safetensors.torch import save_file

            tensors, skipped = _state_dict_tensors(model)
            save_file(tensors, str(tmp / "model.safetensors"))
            if skipped:
                errors["model_skipped_keys"] = ", ".join(skipped)
            return ["model.safetensors"]
        part("model", _model)
    if optimizer is not None:
        def _opt():
            import torch

            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            torch.load(tmp / "optimizer.pt", weights_only=True)  # prove it loads safely
            return ["optimizer.pt"]
        part("optimizer", _opt)
    if rng_state is not None:
        part("rng", lambda: _write_rng(add_host_rng_state(rng_state), tmp))
    if batch_spec is not None:  # the spec of the healthy batches before this one
        part("batch_spec", lambda: (atomic_write_json(tmp / "batch_spec.json", batch_spec),
                                    ["batch_spec.json"])[1])

    if exc is not None:
        error_type = type(exc).__name__
        error_module = type(exc).__module__
        msg = str(exc) if message is None else message
        trace = "".join(tb.format_exception(type(exc), exc, exc.__traceback__))
    else:
        error_type, error_module, msg, trace = None, None, message or "", ""
    record = {
        "id": fid,
        "kind": kind,
        "step": step,
        "rank": rank,
        "world_size": world_size,
        "device": device,
        "time": time.time(),
        "error_type": error_type,
        "error_module": error_module,
        "message": msg,
        "traceback": trace,
        "dataset_indices": dataset_indices,
        "code": code or {},
        "files": files,
        "capture_errors": errors,
        **(extra or {}),
    }
    if model is not None:  # replay restores train/eval mode (dropout, batch norm)
        record["model_training"] = bool(getattr(model, "training", True))
    for names in files.values():
        for name in names:
            record.setdefault("sha256", {})[name] = sha256_file(tmp / name)
    atomic_write_json(tmp / fmt.FAILURE_JSON, record)
    try:
        os.replace(tmp, failures / fid)
    except OSError:
        shutil.rmtree(failures / fid, ignore_errors=True)
        os.replace(tmp, failures / fid)
    return fid


def state_dict_sha256(model) -> str | None:
    """SHA-256 of a model's ``state_dict`` tensors: names, dtypes, shapes and bytes, in the
    state dict's order. The identity of an inference run's model when no factory is given
    (``manifest.json``'s ``weights_sha256``); None for an object without ``state_dict``."""
    import hashlib

    import torch

    sd = getattr(model, "state_dict", None)
    if sd is None:
        return None
    h = hashlib.sha256()
    for k, v in sd().items():
        if not isinstance(v, torch.Tensor):
            continue
        t = v.detach().to("cpu").contiguous()
        h.update(f"{k}|{str(t.dtype).replace('torch.', '')}|{list(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def describe_callable(spec: str | None) -> dict | None:
    """``{"spec", "module", "qualname", "file", "sha256"}`` for a ``"module:callable"`` spec.

    The module is located, not imported (it is usually imported already by the training
    script); ``file`` and ``sha256`` are None when it cannot be found.
    """
    if spec is None:
        return None
    import importlib.util
    import sys

    if not isinstance(spec, str) or ":" not in spec:
        from ..errors import InvalidInputError

        raise InvalidInputError(
            f"callable spec {spec!r}: expected 'module:callable', e.g. 'examples.digits:build_model'"
        )
    module, _, qualname = spec.partition(":")
    path = None
    mod = sys.modules.get(module)
    if mod is not None and getattr(mod, "__file__", None):
        path = mod.__file__
    else:
        try:
            found = importlib.util.find_spec(module)
            path = found.origin if found is not None else None
        except (ImportError, ValueError):
            path = None
    digest = sha256_file(path) if path and os.path.isfile(path) else None
    return {"spec": spec, "module": module, "qualname": qualname,
            "file": os.path.abspath(path) if path else None, "sha256": digest}
