"""Save nested batches (tuples, lists, dicts of tensors and plain values) without pickle.

A tree is split into its structure, which is JSON, and its tensors, which go into one
safetensors file. Loading needs neither pickle nor debugkit's own classes, so a capture
can be read by a standalone script.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .errors import InvalidInputError
from .runschema import read_run_json

STRUCTURE_VERSION = 1
_MAX_DEPTH = 64


def flatten_tree(obj: Any) -> tuple[dict, dict]:
    """Split ``obj`` into a JSON-able structure and a ``{ref: tensor}`` mapping.

    Returns
    -------
    structure : dict
        Nodes ``{"type": "tensor", "ref", "dtype", "shape", "device"}``, ``tuple``,
        ``list``, ``dict`` (``keys`` and ``values``), ``value`` (JSON scalars), ``float``
        (non-finite floats as strings), ``ndarray`` (a tensor ref restored as numpy) and
        ``opaque`` (an object that is recorded by its repr only).
    tensors : dict
        CPU, contiguous tensors keyed by ref.
    """
    tensors: dict = {}
    structure = _flatten(obj, tensors, 0)
    return {"version": STRUCTURE_VERSION, "root": structure}, tensors


def _flatten(obj: Any, tensors: dict, depth: int) -> dict:
    import torch

    if depth > _MAX_DEPTH:
        return {"type": "opaque", "repr": "<nested too deep>"}
    if isinstance(obj, torch.Tensor):
        ref = f"t{len(tensors)}"
        t = obj.detach()
        node = {"type": "tensor", "ref": ref, "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape), "device": str(t.device)}
        if t.layout != torch.strided:
            t = t.to_dense()
        tensors[ref] = t.to("cpu").contiguous().clone()
        return node
    if obj is None or isinstance(obj, (bool, int, str)):
        return {"type": "value", "value": obj}
    if isinstance(obj, float):
        if math.isfinite(obj):
            return {"type": "value", "value": obj}
        return {"type": "float", "value": repr(obj)}
    if type(obj).__module__ == "numpy" and hasattr(obj, "dtype"):
        import numpy as np

        arr = np.asarray(obj)
        if arr.dtype.kind in "biuf":
            node = _flatten(torch.from_numpy(arr.copy()), tensors, depth + 1)
            node["type"] = "ndarray" if arr.ndim or isinstance(obj, np.ndarray) else "npscalar"
            return node
    if isinstance(obj, tuple):
        node = {"type": "tuple", "items": [_flatten(x, tensors, depth + 1) for x in obj]}
        if hasattr(obj, "_fields"):
            node["namedtuple"] = type(obj).__name__
            node["fields"] = list(obj._fields)
        return node
    if isinstance(obj, list):
        return {"type": "list", "items": [_flatten(x, tensors, depth + 1) for x in obj]}
    if isinstance(obj, dict):
        keys = []
        for k in obj:
            if k is None or isinstance(k, (bool, int, float, str)):
                keys.append(k)
            else:
                keys.append(repr(k))
        return {"type": "dict", "keys": keys,
                "values": [_flatten(v, tensors, depth + 1) for v in obj.values()]}
    return {"type": "opaque", "repr": repr(obj)[:500], "class": type(obj).__qualname__}


def unflatten_tree(structure: dict, tensors: dict) -> Any:
    """Rebuild the object :func:`flatten_tree` split. Opaque nodes come back as ``None``."""
    if not isinstance(structure, dict) or "root" not in structure:
        raise InvalidInputError("batch structure: expected an object with a 'root' node")
    return _unflatten(structure["root"], tensors, 0)


def _unflatten(node: Any, tensors: dict, depth: int) -> Any:
    if depth > _MAX_DEPTH or not isinstance(node, dict):
        raise InvalidInputError(f"batch structure: malformed node {str(node)[:80]!r}")
    kind = node.get("type")
    if kind in ("tensor", "ndarray", "npscalar"):
        ref = node.get("ref")
        if ref not in tensors:
            raise InvalidInputError(f"batch structure: tensor {ref!r} missing from the tensor file")
        t = tensors[ref]
        if kind == "ndarray":
            return t.numpy()
        if kind == "npscalar":
            return t.numpy()[()]
        return t
    if kind == "value":
        return node.get("value")
    if kind == "float":
        return float(node["value"])
    if kind in ("tuple", "list"):
        items = [_unflatten(x, tensors, depth + 1) for x in node.get("items", [])]
        if kind == "list":
            return items
        if "namedtuple" in node:
            from collections import namedtuple

            try:
                return namedtuple(node["namedtuple"], node["fields"])(*items)
            except (TypeError, ValueError):
                return tuple(items)
        return tuple(items)
    if kind == "dict":
        values = [_unflatten(v, tensors, depth + 1) for v in node.get("values", [])]
        return dict(zip(node.get("keys", []), values))
    if kind == "opaque":
        return None
    raise InvalidInputError(f"batch structure: unknown node type {kind!r}")


def save_tree(obj: Any, tensor_path: Path, structure_path: Path) -> dict:
    """Write ``obj`` as a safetensors file plus a JSON structure file; return the structure."""
    from safetensors.torch import save_file

    structure, tensors = flatten_tree(obj)
    save_file(tensors, str(tensor_path))
    Path(structure_path).write_text(json.dumps(structure, indent=1))
    return structure


def load_tree(tensor_path: Path, structure_path: Path) -> Any:
    """Load what :func:`save_tree` wrote (safetensors + JSON only; no pickle)."""
    from .location import as_path, load_safetensors

    try:
        structure = read_run_json(as_path(structure_path), "batch.json")
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{structure_path}: unreadable batch structure ({exc})") from exc
    try:
        tensors = load_safetensors(tensor_path)
    except Exception as exc:  # safetensors raises its own error types
        raise InvalidInputError(f"{tensor_path}: unreadable safetensors file ({exc})") from exc
    return unflatten_tree(structure, tensors)
