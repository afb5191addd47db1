"""Describe a training dataset cheaply: its length and a fingerprint of sampled items.

Written once per dataset by :meth:`debugkit.Recorder.track` into ``data.json`` (see
docs/run-format.md) so that ``debugkit compare`` can say whether two runs trained on the
same data. Only :data:`SAMPLE_ITEMS` items are read, at fixed evenly spaced indices (the
same indices for two datasets of the same length, whatever the seed), with every random
generator seeded and restored around the reads, so random transforms give the same
bytes in two runs and the training's own random streams are untouched.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

SAMPLE_ITEMS = 16   # items read per dataset
MAX_ITEM_BYTES = 64 << 20  # an item larger than this is hashed by shape and dtype only


def sample_indices(length: int, k: int = SAMPLE_ITEMS) -> list[int]:
    """``k`` evenly spaced indices of ``range(length)``, first and last included."""
    if length <= 0:
        return []
    if length <= k:
        return list(range(length))
    return sorted({round(i * (length - 1) / (k - 1)) for i in range(k)})


def _feed(h, obj: Any) -> None:
    """Hash an item's content: tensors and arrays by dtype, shape and bytes."""
    import numpy as np
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"tensor|{t.dtype}|{tuple(t.shape)}|".encode())
        if t.numel() * t.element_size() <= MAX_ITEM_BYTES:
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"ndarray|{a.dtype}|{a.shape}|".encode())
        if a.nbytes <= MAX_ITEM_BYTES and a.dtype != object:
            h.update(a.tobytes())
    elif isinstance(obj, dict):
        h.update(b"dict{")
        for k in sorted(obj, key=str):
            h.update(f"{k!s}:".encode())
            _feed(h, obj[k])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}[".encode())
        for v in obj:
            _feed(h, v)
        h.update(b"]")
    elif isinstance(obj, (bytes, bytearray)):
        h.update(b"bytes|" + bytes(obj))
    else:  # numbers, strings, None, PIL images' repr...
        h.update(f"{type(obj).__name__}|{obj!r}".encode())


def describe_dataset(dataset, k: int = SAMPLE_ITEMS) -> dict:
    """``{"class", "length", "sampled_indices", "item_sha256", "fingerprint", "error"}``.

    ``fingerprint`` is the SHA-256 of the sampled items' hashes in order; ``length`` and
    ``fingerprint`` are None when the dataset has no ``len`` (an iterable dataset) or its
    items cannot be read, with ``error`` saying why.
    """
    import torch

    out: dict[str, Any] = {"class": f"{type(dataset).__module__}.{type(dataset).__qualname__}",
                           "length": None, "sampled_indices": [], "item_sha256": [],
                           "fingerprint": None, "error": None}
    try:
        length = len(dataset)
    except TypeError:
        out["error"] = "the dataset has no len() (an iterable dataset): no items sampled"
        return out
    out["length"] = int(length)
    idx = sample_indices(int(length), k)
    py_state = random.getstate()
    try:
        import numpy as np

        np_state = np.random.get_state()
    except ImportError:  # pragma: no cover - numpy comes with torch here
        np, np_state = None, None
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            random.seed(0)
            if np is not None:
                np.random.seed(0)
            hashes = []
            for i in idx:
                h = hashlib.sha256()
                _feed(h, dataset[i])
                hashes.append(h.hexdigest())
    except Exception as exc:  # a dataset that cannot be read here: say so, never break training
        out["error"] = f"reading item(s) for the fingerprint failed: {type(exc).__name__}: {exc}"[:500]
        return out
    finally:
        random.setstate(py_state)
        if np is not None:
            np.random.set_state(np_state)
    out["sampled_indices"] = idx
    out["item_sha256"] = hashes
    out["fingerprint"] = hashlib.sha256("".join(hashes).encode()).hexdigest()
    return out
