"""Batch guards: a declared (or inferred) contract for what a training batch looks like.

A :class:`BatchSpec` names, per tensor of a batch (tuple/list positions or dict keys),
its dtype, its shape (fixed sizes and named symbolic dimensions with bounds, e.g.
``("batch", 1, 512)``; a symbolic name shared by tensors must have one size across
them), an optional value range ``[min, max_exclusive)`` and whether it must be finite.

    spec = BatchSpec.infer(healthy_batches, num_classes=10)
    spec.save("batch_spec.json")
    spec.validate((x, y))           # raises debugkit.InvalidInputError on a bad batch
    Recorder(..., guard=spec)       # checks every rec.step(batch)

The fast path is one reduction per tensor (``aminmax`` for integer ranges, a sum for
finiteness: a finite sum means every element is finite); per-sample detail is only
computed for a tensor that failed.
"""

from __future__ import annotations

import cmath
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._fsutil import MAX_JSON_BYTES, loads_capped, read_bytes_capped
from ..errors import MSG_BATCH_VIOLATION, InvalidInputError

SPEC_VERSION = 1
RULES = ("structure", "dtype", "shape", "range", "finite")
SINGLE = "batch"  # the tensor name of a batch that is one bare tensor


@dataclass(frozen=True)
class Dim:
    """A symbolic dimension: its size may vary within ``[min, max]`` (inclusive)."""

    name: str
    min: int = 0
    max: int | None = None

    def to_json(self):
        return [self.name, self.min, self.max]


@dataclass
class TensorSpec:
    """What one tensor of a batch must look like (``None`` fields are not checked)."""

    dtype: str | None = None
    shape: tuple | None = None  # entries: int (fixed) or Dim
    range: tuple | None = None  # (min, max_exclusive)
    finite: bool = False

    def __post_init__(self):
        if self.shape is not None:
            self.shape = tuple(_dim(d) for d in self.shape)
        if self.range is not None:
            lo, hi = self.range
            self.range = (lo, hi)
        if self.dtype is not None:
            self.dtype = str(self.dtype).replace("torch.", "")

    def to_json(self) -> dict:
        return {"dtype": self.dtype,
                "shape": None if self.shape is None else
                [d.to_json() if isinstance(d, Dim) else d for d in self.shape],
                "range": None if self.range is None else list(self.range),
                "finite": self.finite}


def _dim(d):
    if isinstance(d, Dim):
        return d
    if isinstance(d, bool):
        raise InvalidInputError(f"shape entry {d!r}: expected an int or (name, min, max)")
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        return Dim(d)
    if isinstance(d, (list, tuple)) and len(d) in (1, 2, 3) and isinstance(d[0], str):
        lo = int(d[1]) if len(d) > 1 and d[1] is not None else 0
        hi = int(d[2]) if len(d) > 2 and d[2] is not None else None
        return Dim(d[0], lo, hi)
    raise InvalidInputError(f"shape entry {d!r}: expected an int, a name or (name, min, max)")


@dataclass(frozen=True)
class Violation:
    """One broken rule: which tensor, which sample (and dataset index) when known."""

    tensor: str
    sample: int | None
    dataset_index: int | None
    rule: str
    message: str

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "sample": self.sample,
                "dataset_index": self.dataset_index, "rule": self.rule, "message": self.message}

    def __str__(self) -> str:
        where = f"tensor {self.tensor!r}"
        if self.sample is not None:
            where += f", sample {self.sample}"
        if self.dataset_index is not None:
            where += f" (dataset index {self.dataset_index})"
        return f"{where}: {self.message} [rule: {self.rule}]"


def _flatten(batch, is_tensor) -> tuple[str, dict]:
    """(structure, {name: value}) of a batch: one tensor, a tuple/list or a dict."""
    if is_tensor(batch):
        return "tensor", {SINGLE: batch}
    if isinstance(batch, (tuple, list)):
        return "sequence", {str(i): v for i, v in enumerate(batch)}
    if isinstance(batch, dict):
        return "mapping", {str(k): v for k, v in batch.items()}
    return type(batch).__name__, {}


class ArrayOps:
    """What :func:`check_batch` asks of a batch's arrays, for torch (imported on first use).

    :mod:`debugkit.replay.batchcheck_numpy` passes numpy's (the dashboard checks captured
    batches without importing torch), so the rules live in one place."""

    def __init__(self):
        import torch

        self._torch = torch
        self.isfinite, self.isnan, self.isinf = torch.isfinite, torch.isnan, torch.isinf

    def is_tensor(self, v) -> bool:
        return isinstance(v, self._torch.Tensor)

    def dtype(self, v) -> str:
        return str(v.dtype)[6:]

    def size(self, v) -> int:
        return v.numel()

    def is_float(self, v) -> bool:
        return v.dtype.is_floating_point or v.dtype.is_complex

    def ranged(self, v) -> bool:
        return not (v.dtype == self._torch.bool or v.dtype.is_complex)

    def minmax(self, v) -> tuple:
        mn, mx = v.aminmax()
        return mn.item(), mx.item()

    def total(self, v):
        return v.sum().item()

    def falses(self, v):
        return self._torch.zeros_like(v, dtype=self._torch.bool)

    def bad_samples(self, bad) -> list[int | None]:
        """Sample indices (dim 0) with any True in ``bad``; [None] for a 0-d tensor."""
        if bad.dim() == 0:
            return [None]
        return bad.reshape(bad.shape[0], -1).any(dim=1).nonzero().flatten().tolist()


_TORCH_OPS: list[ArrayOps] = []


def check_batch(spec: BatchSpec, batch, dataset_indices, ops: ArrayOps) -> list[Violation]:
    """Every rule of ``spec`` the batch breaks, its arrays read through ``ops``."""
    idx = list(dataset_indices) if dataset_indices is not None else None

    def ds(i):
        return idx[i] if idx is not None and i is not None and 0 <= i < len(idx) else None

    out: list[Violation] = []
    s, flat = _flatten(batch, ops.is_tensor)
    if s != spec.structure:
        return [Violation("<batch>", None, None, "structure",
                          f"batch is a {s}, expected a {spec.structure}")]
    for k in spec.tensors:
        if k not in flat:
            out.append(Violation(k, None, None, "structure", "missing from the batch"))
    if spec.structure == "sequence" and len(flat) != len(spec.tensors):
        out.append(Violation("<batch>", None, None, "structure",
                             f"has {len(flat)} entries, expected {len(spec.tensors)}"))
    symbols: dict[str, tuple[int, str]] = {}
    for k, t in spec.tensors.items():
        if k not in flat:
            continue
        v = flat[k]
        if not ops.is_tensor(v):
            out.append(Violation(k, None, None, "structure",
                                 f"is a {type(v).__name__}, expected a tensor"))
            continue
        dtype = ops.dtype(v)
        if t.dtype is not None and dtype != t.dtype:
            out.append(Violation(k, None, None, "dtype", f"dtype is {dtype}, expected {t.dtype}"))
            continue
        if t.shape is not None:
            bad = _check_shape(k, v, t.shape, symbols)
            if bad:
                out.extend(bad)
                continue
        if ops.size(v) == 0:
            continue
        if t.range is not None and ops.ranged(v):
            out.extend(_check_range(k, v, t.range, ds, ops))
        if t.finite and ops.is_float(v) and not cmath.isfinite(ops.total(v)):
            out.extend(_check_finite(k, v, ds, ops))
    return out


def _check_shape(k, v, shape, symbols) -> list[Violation]:
    got = tuple(v.shape)
    if len(got) != len(shape):
        return [Violation(k, None, None, "shape",
                          f"shape {got} has {len(got)} dims, expected {len(shape)} "
                          f"({_fmt_shape(shape)})")]
    out = []
    for i, (n, d) in enumerate(zip(got, shape)):
        if isinstance(d, int):
            if n != d:
                out.append(Violation(k, None, None, "shape",
                                     f"dim {i} is {n}, expected {d} (shape {got})"))
            continue
        if n < d.min or (d.max is not None and n > d.max):
            out.append(Violation(k, None, None, "shape",
                                 f"dim {i} ({d.name!r}) is {n}, expected "
                                 f"{d.min}..{'' if d.max is None else d.max} (shape {got})"))
            continue
        prev = symbols.get(d.name)
        if prev is None:
            symbols[d.name] = (n, k)
        elif prev[0] != n:
            out.append(Violation(k, None, None, "shape",
                                 f"dim {i} ({d.name!r}) is {n} but {prev[0]} in tensor "
                                 f"{prev[1]!r}; a symbolic dim must agree across tensors"))
    return out


def _check_range(k, v, rng, ds, ops: ArrayOps) -> list[Violation]:
    lo, hi = rng
    mn, mx = ops.minmax(v)
    if (lo is None or mn >= lo) and (hi is None or mx < hi) and mn == mn and mx == mx:
        return []
    bad = ops.falses(v)
    if lo is not None:
        bad |= v < lo
    if hi is not None:
        bad |= v >= hi
    out = []
    for i in ops.bad_samples(bad):
        row = v[i] if v.ndim else v
        rb = bad[i] if v.ndim else bad
        shown = ", ".join(repr(x) for x in row[rb].reshape(-1)[:3].tolist())
        out.append(Violation(k, i, ds(i), "range", f"value {shown} outside [{lo}, {hi})"))
    return out


def _check_finite(k, v, ds, ops: ArrayOps) -> list[Violation]:
    bad = ~ops.isfinite(v)
    if not bool(bad.any()):
        return []
    out = []
    for i in ops.bad_samples(bad):
        row = v[i] if v.ndim else v
        kinds = []
        if bool(ops.isnan(row).any()):
            kinds.append("NaN")
        if bool(ops.isinf(row).any()):
            kinds.append("Inf")
        out.append(Violation(k, i, ds(i), "finite", f"contains {' and '.join(kinds)}"))
    return out


class BatchSpec:
    """The expected structure, dtypes, shapes, value ranges and finiteness of a batch.

    Parameters
    ----------
    tensors : dict
        ``{position or key: TensorSpec or dict(dtype=..., shape=..., range=..., finite=...)}``.
        Integer keys describe a tuple/list batch, string keys a dict batch.
    structure : str, optional
        ``"sequence"``, ``"mapping"`` or ``"tensor"`` (a bare tensor, key ``"batch"``);
        default: from the keys.
    """

    def __init__(self, tensors: dict, structure: str | None = None):
        if not tensors:
            raise InvalidInputError("BatchSpec: expected at least one tensor")
        if structure is None:
            structure = "sequence" if all(isinstance(k, int) for k in tensors) else "mapping"
        if structure not in ("sequence", "mapping", "tensor"):
            raise InvalidInputError(f"BatchSpec structure={structure!r}: expected "
                                    "'sequence', 'mapping' or 'tensor'")
        self.structure = structure
        self.tensors: dict[str, TensorSpec] = {}
        for k, v in tensors.items():
            if isinstance(v, dict):
                unknown = set(v) - {"dtype", "shape", "range", "finite"}
                if unknown:
                    raise InvalidInputError(f"BatchSpec tensor {k!r}: unknown fields "
                                            f"{sorted(unknown)}")
                v = TensorSpec(**v)
            elif not isinstance(v, TensorSpec):
                raise InvalidInputError(f"BatchSpec tensor {k!r}: expected a TensorSpec or dict")
            self.tensors[str(k)] = v

    def __repr__(self):
        return f"BatchSpec({self.to_json()})"

    def __eq__(self, other):
        return isinstance(other, BatchSpec) and self.to_dict() == other.to_dict()

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        return {"debugkit_batch_spec": SPEC_VERSION, "structure": self.structure,
                "tensors": {k: t.to_json() for k, t in self.tensors.items()}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text, where: str = "batch spec") -> BatchSpec:
        try:
            # nesting capped: a spec 100,000 brackets deep is refused, not a RecursionError
            d = loads_capped(text, where) if isinstance(text, (str, bytes)) else text
        except ValueError as e:
            raise InvalidInputError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(d, dict) or d.get("debugkit_batch_spec") != SPEC_VERSION \
                or not isinstance(d.get("tensors"), dict):
            raise InvalidInputError(f"{where}: not a debugkit batch spec (expected an object "
                                    f"with debugkit_batch_spec={SPEC_VERSION} and 'tensors')")
        tensors = {}
        for k, t in d["tensors"].items():
            if not isinstance(t, dict):
                raise InvalidInputError(f"{where}: tensor {k!r} is not an object")
            try:
                tensors[k] = TensorSpec(**t)
            except (TypeError, ValueError) as e:
                raise InvalidInputError(f"{where}: tensor {k!r}: {e}") from None
        return cls(tensors, structure=d.get("structure"))

    def save(self, path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def load(cls, path) -> BatchSpec:
        p = Path(path)
        try:  # the 64 MiB cap of every JSON file of a run (FileLimitError past it)
            text = read_bytes_capped(p, MAX_JSON_BYTES, "a batch spec").decode("utf-8", "replace")
        except OSError as e:
            raise InvalidInputError(f"{p}: cannot read batch spec ({e.strerror})") from None
        return cls.from_json(text, where=str(p))

    # ------------------------------------------------------------------ infer
    @classmethod
    def infer(cls, batches: Iterable, num_classes: int | None = None) -> BatchSpec:
        """Derive a spec from healthy batches.

        Floating tensors must be finite; integer tensors get ``[min, max + 1)`` of what
        was seen, or ``[0, num_classes)`` when ``num_classes`` is given and every value
        seen lies in it (labels; a token-id tensor with larger values keeps its own
        range). Dimension 0 of every tensor is the shared symbolic ``"batch"`` dim with
        bounds ``[1, largest seen]`` (a loader's last batch may be short); other dims
        that vary become symbolic with the bounds seen, one name for dims whose sizes
        were equal in every batch.
        """
        b = SpecBuilder()
        for batch in batches:
            b.add(batch)
        return b.build(num_classes)

    # ------------------------------------------------------------------ check
    def check(self, batch, dataset_indices=None) -> list[Violation]:
        """Every rule the batch breaks (an empty list for a good batch)."""
        if not _TORCH_OPS:
            _TORCH_OPS.append(ArrayOps())
        return check_batch(self, batch, dataset_indices, _TORCH_OPS[0])

    def validate(self, batch, dataset_indices=None) -> None:
        """Raise :class:`debugkit.InvalidInputError` naming the first broken rule."""
        bad = self.check(batch, dataset_indices)
        if bad:
            raise InvalidInputError(format_violations(bad))


def format_violations(bad: list[Violation]) -> str:
    more = f" (and {len(bad) - 1} more violations)" if len(bad) > 1 else ""
    return MSG_BATCH_VIOLATION.format(first=str(bad[0]), more=more)


def _fmt_shape(shape) -> str:
    return "(" + ", ".join(d.name if isinstance(d, Dim) else str(d) for d in shape) + ")"


def coerce_spec(guard) -> BatchSpec | None:
    """A Recorder's ``guard=``: a BatchSpec, a dict, a path to a saved spec, or None."""
    if guard is None or isinstance(guard, BatchSpec):
        return guard
    if isinstance(guard, dict):
        return BatchSpec.from_json(guard, where="guard")
    if isinstance(guard, (str, Path)):
        return BatchSpec.load(guard)
    raise InvalidInputError(f"guard={type(guard).__name__}: expected a debugkit.BatchSpec, "
                            "a dict or the path of a saved spec")


__all__ = ["BatchSpec", "TensorSpec", "Dim", "Violation", "RULES", "format_violations"]


class SpecBuilder:
    """:meth:`BatchSpec.infer`, one batch at a time: ``observe`` a batch (cheap: its
    structure, shapes and one ``aminmax`` per integer tensor), ``commit`` what was observed
    once the batch proved healthy, ``build`` the spec of everything committed.

    The Recorder uses it to learn the spec of the healthy batches it sees, so that a
    failure capture can say which spec would have caught the failing batch.
    """

    def __init__(self):
        self.structure = None
        self.names = None
        self.seen: dict = {}
        self.n = 0

    def observe(self, batch) -> dict:
        """The per-tensor facts of one batch (raises InvalidInputError if it does not fit
        the batches committed so far)."""
        import torch

        s, flat = _flatten(batch, torch.is_tensor)
        if self.structure is None and not flat:
            raise InvalidInputError(f"BatchSpec.infer: batch 0 is a {s}, expected a "
                                    "tensor, a tuple/list or a dict of tensors")
        if self.structure is not None and (s != self.structure or list(flat) != self.names):
            raise InvalidInputError(f"BatchSpec.infer: batch {self.n} has structure {s} "
                                    f"{list(flat)}, batch 0 had {self.structure} {self.names}")
        obs = {}
        for k, v in flat.items():
            if not isinstance(v, torch.Tensor):
                raise InvalidInputError(f"BatchSpec.infer: batch {self.n} tensor {k!r} is a "
                                        f"{type(v).__name__}, expected a tensor")
            info = self.seen.get(k)
            if info is not None and (v.dtype != info["dtype"] or v.dim() != len(info["shapes"][0])):
                raise InvalidInputError(
                    f"BatchSpec.infer: batch {self.n} tensor {k!r} is {v.dtype} of shape "
                    f"{tuple(v.shape)}, batch 0 had {info['dtype']} of "
                    f"{len(info['shapes'][0])} dims")
            lo = hi = None
            if v.numel() and not v.dtype.is_floating_point and not v.dtype.is_complex \
                    and v.dtype != torch.bool:
                lo, hi = (int(t) for t in v.aminmax())
            obs[k] = (v.dtype, tuple(v.shape), lo, hi)
        return {"structure": s, "names": list(flat), "tensors": obs}

    def commit(self, obs: dict) -> bool:
        """Add an observed batch; returns whether it widened what was learned (a tensor or
        a shape not seen before, or an integer value outside the range so far)."""
        new = self.structure is None
        if new:
            self.structure, self.names = obs["structure"], obs["names"]
        for k, (dtype, shape, lo, hi) in obs["tensors"].items():
            info = self.seen.get(k)
            if info is None:
                info = self.seen[k] = {"dtype": dtype, "shapes": [], "lo": None, "hi": None,
                                       "distinct": set()}
            info["shapes"].append(shape)
            if shape not in info["distinct"]:
                info["distinct"].add(shape)
                new = True
            if lo is not None:
                if info["lo"] is None or lo < info["lo"] or hi > info["hi"]:
                    new = True
                    info["lo"] = lo if info["lo"] is None else min(lo, info["lo"])
                    info["hi"] = hi if info["hi"] is None else max(hi, info["hi"])
        self.n += 1
        return new

    def add(self, batch) -> None:
        self.commit(self.observe(batch))

    def build(self, num_classes: int | None = None) -> BatchSpec:
        if self.structure is None:
            raise InvalidInputError("BatchSpec.infer: no batches given")
        # Varying dims (beyond dim 0) grouped by their size sequence across batches.
        groups: dict[tuple, str] = {}
        tensors = {}
        for k, info in self.seen.items():
            shapes = info["shapes"]
            dims = []
            for i in range(len(shapes[0])):
                sizes = tuple(s[i] for s in shapes)
                if i == 0:
                    dims.append(Dim("batch", 1, max(sizes)))
                elif len(set(sizes)) == 1:
                    dims.append(sizes[0])
                else:
                    name = groups.setdefault(sizes, f"{k}.dim{i}")
                    dims.append(Dim(name, min(sizes), max(sizes)))
            dt = info["dtype"]
            rng = None
            if info["lo"] is not None:
                if num_classes is not None and info["lo"] >= 0 and info["hi"] < num_classes:
                    rng = (0, int(num_classes))
                else:
                    rng = (info["lo"], info["hi"] + 1)
            tensors[k] = TensorSpec(dtype=str(dt), shape=tuple(dims), range=rng,
                                    finite=bool(dt.is_floating_point or dt.is_complex))
        return BatchSpec(tensors, structure=self.structure)
