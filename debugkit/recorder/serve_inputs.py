"""The inputs and outputs of a recorded request (:mod:`debugkit.recorder.serve`): the input
signature (cached by key, dtype and shape: a service sees few distinct shapes) and the output
finiteness check (one reduction, confirmed element-wise only when it is not finite)."""

from __future__ import annotations

from typing import Any

#: ``(key, dtype, shape) -> (signature part, numel)`` of tensor inputs: a service sees few
#: distinct shapes, and a lookup costs less than formatting (cleared past 4,096 entries).
_SIG_CACHE: dict = {}


def _leaf_sig(key: str, v, torch_tensor) -> tuple[str, int]:
    if isinstance(v, torch_tensor):
        ck = (key, v.dtype, v.shape)
        hit = _SIG_CACHE.get(ck)
        if hit is None:
            if len(_SIG_CACHE) >= 4096:
                _SIG_CACHE.clear()
            hit = _SIG_CACHE[ck] = (f"{key}:{str(v.dtype)[6:]}[{','.join(map(str, v.shape))}]",
                                    v.numel())
        return hit
    dtype = getattr(v, "dtype", None)
    shape = getattr(v, "shape", None)
    if dtype is not None and isinstance(shape, tuple):  # a numpy array
        n = 1
        for d in shape:
            n *= int(d)
        return f"{key}:{dtype}[{','.join(map(str, shape))}]", n
    if isinstance(v, (str, bytes)):
        return f"{key}:{type(v).__name__}[{len(v)}]", 0
    if isinstance(v, (list, tuple)):
        return f"{key}:{type(v).__name__}[{len(v)}]", 0
    return f"{key}:{type(v).__name__}", 0


def describe_inputs(inputs, torch_tensor=None) -> tuple[str, int]:
    """A request's input signature and element count.

    The signature names each top-level input by key (a dict), position (a tuple or list)
    or ``input`` (anything else), with its dtype and shape: ``input_ids:int64[1,128];
    attention_mask:int64[1,128]``. Non-tensor values give their type (and length for
    strings and sequences). ``input_numel`` counts tensor and array elements.

    A dict of tensors and a single tensor (what most services pass) are looked up by their
    keys, dtypes and shapes in one cache: this runs on the request thread, with the caches
    a model left behind, where every object touched counts.
    """
    if torch_tensor is None:
        import torch

        torch_tensor = torch.Tensor
    t = type(inputs)
    if t is dict:
        key: list = []
        for k, v in inputs.items():
            if type(v) is not torch_tensor:
                break
            key.append(k)
            key.append(v.dtype)
            key.append(v.shape)
        else:
            return _cached_signature(tuple(key), inputs, torch_tensor)
    elif t is torch_tensor:
        return _cached_signature((inputs.dtype, inputs.shape), inputs, torch_tensor)
    return _describe(inputs, torch_tensor)


def _cached_signature(key: tuple, inputs, torch_tensor) -> tuple[str, int]:
    hit = _INPUTS_CACHE.get(key)
    if hit is None:
        if len(_INPUTS_CACHE) >= 4096:
            _INPUTS_CACHE.clear()
        hit = _INPUTS_CACHE[key] = _describe(inputs, torch_tensor)
    return hit


#: ``(key, dtype, shape, ...) -> (signature, numel)`` of dicts of tensors and single tensors
_INPUTS_CACHE: dict = {}


def _describe(inputs, torch_tensor) -> tuple[str, int]:
    if isinstance(inputs, dict):
        items = [(str(k), v) for k, v in inputs.items()]
    elif isinstance(inputs, (tuple, list)) and not isinstance(inputs, torch_tensor):
        items = [(str(i), v) for i, v in enumerate(inputs)]
    elif inputs is None:
        return "", 0
    else:
        items = [("input", inputs)]
    parts, total = [], 0
    for k, v in items:
        s, n = _leaf_sig(k, v, torch_tensor)
        parts.append(s)
        total += n
    return ";".join(parts), total


def _nonfinite_outputs(out, torch, depth: int = 0) -> list[str]:
    """Names of the floating tensors in ``out`` that hold NaN or Inf ([] when all finite).

    A tensor's sum is finite only if every element is (cheap: ~1.5 us on a small CPU
    tensor, against ~6 us for ``isfinite().all()``); a non-finite sum is confirmed
    element-wise, so a sum that merely overflowed is not taken for a NaN.
    """
    if depth > 4:
        return []
    if isinstance(out, torch.Tensor):
        if out.dtype not in _float_dtypes(torch):
            return []
        total = (out.detach() if out.requires_grad else out).sum().item()
        if total - total == 0:  # NaN for a NaN or an Inf (and complex ones); 0 for an empty tensor
            return []
        return ["output"] if not bool(torch.isfinite(out).all()) else []
    items: Any = ()
    if isinstance(out, dict) or hasattr(out, "items") and callable(out.items):
        items = list(out.items())
    elif isinstance(out, (tuple, list)):
        items = list(enumerate(out))
    bad = []
    for k, v in items:
        for name in _nonfinite_outputs(v, torch, depth + 1):
            bad.append(str(k) if name == "output" else f"{k}.{name}")
    return bad


_FLOAT_DTYPES: frozenset = frozenset()


def _float_dtypes(torch) -> frozenset:
    """torch's floating and complex dtypes (a set lookup costs less than two method calls)."""
    global _FLOAT_DTYPES
    if not _FLOAT_DTYPES:
        _FLOAT_DTYPES = frozenset(d for d in vars(torch).values() if isinstance(d, torch.dtype)
                                  and (d.is_floating_point or d.is_complex))
    return _FLOAT_DTYPES


def _call_of(inputs) -> str:
    if isinstance(inputs, dict):
        return "kwargs"
    if isinstance(inputs, (tuple, list)):
        return "args"
    return "single"
