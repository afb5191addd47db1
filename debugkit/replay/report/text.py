"""Small helpers of the replay report: paths and sample phrases for people, error messages
normalized and told apart (shape, dtype/device).
"""

from __future__ import annotations

import math
import re

SHAPE_PATTERNS = re.compile("|".join([
    r"shapes cannot be multiplied", r"size mismatch", r"must match the size of tensor",
    r"Expected input batch_size", r"Given groups=", r"is invalid for input of size",
    r"The size of tensor a", r"to have \d+ channels", r"Sizes of tensors must match",
    r"Dimension out of range", r"Expected \d+D", r"input\.size\(-1\) must be equal",
    r"size of tensor .* must match", r"shape mismatch", r"Expected .* dimension",
    r"expected input with shape", r"normalized_shape", r"mat1 and mat2 shapes",
    r"Expected target size", r"only batches of spatial targets supported",
]), re.IGNORECASE)
DTYPE_DEVICE_PATTERNS = re.compile("|".join([
    r"Expected all tensors to be on the same device", r"must have the same dtype",
    r"expected scalar type", r"Input type \(.*\) and weight type", r"not implemented for '",
    r"Expected object of scalar type", r"Found dtype .* but expected", r"same dtype",
    r"on the same device", r"Expected tensor for argument .* to have .* scalar type",
    r"should be the same", r"but got .*Float.*Long|but got .*Long.*Float",
]), re.IGNORECASE)

_HEX = re.compile(r"0x[0-9a-fA-F]+")
_WS = re.compile(r"\s+")


def fmt_path(path) -> str | None:
    from ..loading import format_path

    if path is None:
        return None
    return format_path(tuple(path)) if isinstance(path, (list, tuple)) else str(path)


def dataset_index(record: dict, sample: int | None, n_batch: int | None) -> int | None:
    """The dataset index of a batch position, where the capture knows it."""
    idx = record.get("dataset_indices")
    if sample is None or not isinstance(idx, list) or not isinstance(sample, int):
        return None
    if n_batch is not None and len(idx) != n_batch:
        return None
    if 0 <= sample < len(idx) and isinstance(idx[sample], int):
        return idx[sample]
    return None


def sample_phrase(record: dict, sample: int | None, n_batch: int | None) -> str:
    if sample is None:
        return "the batch"
    di = dataset_index(record, sample, n_batch)
    return f"sample {sample}" + (f" (dataset index {di})" if di is not None else "")


def _num(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:g}"
    return str(v)


def _module(name: str | None) -> str:
    if name is None:
        return "(outside the model)"
    return f"`{name}`" if name else "the model's top-level forward"


def normalize_message(msg: str | None) -> str:
    """Compare messages without addresses or whitespace differences."""
    return _WS.sub(" ", _HEX.sub("0x…", msg or "")).strip()


def is_shape_error(err: dict | None) -> bool:
    return bool(err) and bool(SHAPE_PATTERNS.search(err.get("message") or ""))


def is_dtype_device_error(err: dict | None) -> bool:
    return bool(err) and bool(DTYPE_DEVICE_PATTERNS.search(err.get("message") or ""))
