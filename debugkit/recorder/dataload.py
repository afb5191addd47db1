"""A failure raised while a DataLoader fetched or collated a batch, described from the
dataset itself: the batch's samples are re-read one by one in the main process (the
same ``dataset[i]`` a worker calls), each with its shapes and dtypes, and the odd
ones named.

``phase`` is ``fetch`` when re-reading a sample raises (that sample is the culprit) and
``collate`` when every sample reads and the samples differ in structure, shape or dtype
(the default collate stacks them, so they must agree), else ``unknown``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: At most this many samples of a failed batch are re-read.
MAX_SAMPLES = 512
#: torch's own collate functions (``module:qualname``): they stack samples, so every
#: dimension must agree. A custom ``collate_fn`` may pad, so a dimension whose size varies
#: across most samples (a sequence length) is not what makes a sample odd.
TORCH_COLLATE = ("torch.utils.data._utils.collate:default_collate",
                 "torch.utils.data._utils.collate:default_convert",
                 "torch.utils.data.dataloader:default_collate")

ADVICE_SHAPE = ("the samples have different shapes, and the default collate stacks them: pad "
                "them to one length in a collate_fn (torch.nn.utils.rnn.pad_sequence with "
                "batch_first=True, plus a mask or the lengths), bucket samples of similar length "
                "into batches, or crop/resize them to one size in the dataset")
ADVICE_STRUCTURE = ("the samples are not built alike (a different type, a missing key, a None "
                    "field): make __getitem__ return the same structure for every index, or "
                    "handle the odd ones in a collate_fn")
ADVICE_DTYPE = ("the samples hold different dtypes: cast them to one dtype in the dataset "
                "(torch.as_tensor(x, dtype=...)) or in a collate_fn")
ADVICE_SHAPE_CUSTOM = ("a sample's shape differs from the others' in a dimension they all share (the "
                       "collate_fn cannot batch it): fix that sample in the dataset, or make the "
                       "collate_fn handle such samples (crop, pad or drop them)")
ADVICE_FETCH = ("reading the sample itself raised: fix the dataset's __getitem__ for that index "
                "(a missing file, a bad row), or skip and log such samples when the dataset is built")


def raised_by_data_loader(exc: BaseException) -> bool:
    """Whether ``exc`` left a DataLoader's iterator (fetching or collating a batch, in this
    process or re-raised from a worker): a frame of ``torch/utils/data/dataloader.py`` is
    on its traceback."""
    tb = getattr(exc, "__traceback__", None)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("torch/utils/data/dataloader.py"):
            return True
        tb = tb.tb_next
    return False


def _leaves(obj: Any, path: str = "", depth: int = 0, out: list | None = None) -> list:
    """``(path, type, shape, dtype)`` of each leaf of a sample."""
    out = [] if out is None else out
    if depth > 6 or len(out) > 64:
        return out
    shape = getattr(obj, "shape", None)
    dtype = getattr(obj, "dtype", None)
    if shape is not None and dtype is not None:
        out.append((path or "sample", type(obj).__name__, [int(s) for s in shape],
                    str(dtype).replace("torch.", "")))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _leaves(v, f"{path}[{k!r}]", depth + 1, out)
    elif isinstance(obj, (list, tuple)) and not (obj and all(isinstance(x, (int, float)) for x in obj)
                                                 and len(obj) > 8):
        for i, v in enumerate(obj):
            _leaves(v, f"{path}[{i}]", depth + 1, out)
    else:
        out.append((path or "sample", type(obj).__name__,
                    [len(obj)] if isinstance(obj, (list, tuple, str, bytes)) else [], None))
    return out


def _shared_dims(samples: list[dict]) -> set:
    """``(path, dim)`` of the leaf dimensions whose most common size at least half the
    samples share (the others, a sequence length, vary from sample to sample)."""
    sizes: dict = {}
    for s in samples:
        for lf in s["leaves"]:
            for d, n in enumerate(lf["shape"] or []):
                sizes.setdefault((lf["path"], d), []).append(n)
    return {k for k, v in sizes.items() if Counter(v).most_common(1)[0][1] * 2 >= len(samples)}


def _key(s: dict, shared: set | None) -> str:
    return repr([(lf["path"], lf["type"],
                  lf["shape"] if shared is None else
                  [n if (lf["path"], d) in shared else "*" for d, n in enumerate(lf["shape"] or [])],
                  lf["dtype"]) for lf in s["leaves"]])


def describe_failed_batch(dataset, indices: list | None, exc: BaseException, *,
                          stacks: bool = True) -> dict:
    """What the failed batch's samples look like, read one by one from ``dataset``.

    ``stacks``: the loader's collate function stacks samples (torch's own), so any shape
    difference makes a sample odd; False (a custom ``collate_fn``, which may pad) ignores
    the dimensions whose size varies across most samples.

    Returns ``{"phase", "samples", "odd", "usual", "advice", "n_indices", "read"}``:
    ``samples`` one ``{"position", "dataset_index", "leaves": [{"path", "type", "shape",
    "dtype"}]}`` (or ``"error"`` when reading it raised) per sample read, ``odd`` the
    positions whose leaves differ from the usual ones (``usual``: the most common
    description, or the first sample's when all differ), ``advice`` one sentence.
    """
    import random

    samples: list[dict[str, Any]] = []
    items: list[Any] = []
    idx = list(indices or [])[:MAX_SAMPLES]
    state = random.getstate()
    try:
        for pos, i in enumerate(idx):
            try:
                item = dataset[i]
            except Exception as e:  # the sample that cannot be read is the culprit
                samples.append({"position": pos, "dataset_index": i,
                                "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]})
                items.append(None)
                continue
            leaves = [{"path": p, "type": t, "shape": s, "dtype": d} for p, t, s, d in _leaves(item)]
            samples.append({"position": pos, "dataset_index": i, "leaves": leaves})
            items.append(item)
    finally:
        random.setstate(state)
    failed = [s["position"] for s in samples if "error" in s]
    if failed:
        return {"phase": "fetch", "samples": samples, "odd": failed, "usual": None,
                "advice": ADVICE_FETCH, "n_indices": len(indices or []), "read": len(samples),
                "items": items}
    shared = None if stacks else _shared_dims(samples)
    keys = [_key(s, shared) for s in samples]
    counts = Counter(keys)
    usual_key = counts.most_common(1)[0][0] if counts else None
    if usual_key is not None and counts[usual_key] == 1:
        usual_key = keys[0]  # all differ: name those unlike the first, as torch's message does
    odd = [s["position"] for s, k in zip(samples, keys) if k != usual_key]
    usual = next((s["leaves"] for s, k in zip(samples, keys) if k == usual_key), None)
    advice, phase = "", "unknown"
    if odd:
        phase = "collate"
        first = samples[odd[0]]["leaves"]
        if [lf["path"] for lf in first] != [lf["path"] for lf in usual or []] or \
                [lf["type"] for lf in first] != [lf["type"] for lf in usual or []]:
            advice = ADVICE_STRUCTURE
        elif [lf["shape"] for lf in first] != [lf["shape"] for lf in usual or []]:
            advice = ADVICE_SHAPE if stacks else ADVICE_SHAPE_CUSTOM
        else:
            advice = ADVICE_DTYPE
    return {"phase": phase, "samples": samples, "odd": odd, "usual": usual, "advice": advice,
            "n_indices": len(indices or []), "read": len(samples), "items": items}


def describe_leaves(leaves: list | None) -> str:
    """``[0]: Tensor [5] float32, [1]: int`` for a sample's leaves."""
    if not leaves:
        return "-"
    return ", ".join(f"{lf['path']}: {lf['type']}"
                     + (f" {lf['shape']}" if lf.get("shape") else "")
                     + (f" {lf['dtype']}" if lf.get("dtype") else "") for lf in leaves[:6])


def odd_phrase(info: dict) -> str:
    """One sentence naming the odd samples of :func:`describe_failed_batch`'s result."""
    s = info.get("samples") or []
    odd = [s[p] for p in info.get("odd") or [] if p < len(s)]
    if not odd:
        return ""
    if info.get("phase") == "fetch":
        o = odd[0]
        return f"reading dataset index {o['dataset_index']} (sample {o['position']}) raised {o['error']}"
    names = "; ".join(f"dataset index {o['dataset_index']} (sample {o['position']}): "
                      f"{describe_leaves(o.get('leaves'))}" for o in odd[:3])
    more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
    return (f"{len(odd)} of {len(s)} samples differ from the others ({describe_leaves(info.get('usual'))}): "
            f"{names}{more}")


MSG_DATASET_KWARGS = ("dataset_kwargs: {error}; replay rebuilds the dataset as "
                      "dataset_factory(**dataset_kwargs), so they must be plain JSON data "
                      "(strings, numbers, booleans, null, lists and string-keyed objects)")
MSG_DATASET_NOT_FOUND = ("debugkit: dataset_factory {spec!r}: module {module!r} is not found from "
                         "this process, so its file and SHA-256 are not recorded and replay will "
                         "not rebuild the dataset without --allow-code")


def dataset_code(spec: str, kwargs) -> dict:
    """The recorded identity of a dataset factory: ``{"code": describe_callable(spec),
    "kwargs": {...}}``. A bad spec or kwargs that do not survive a JSON round trip raise
    :class:`~debugkit.errors.InvalidInputError`; a module that cannot be located warns."""
    import json
    import warnings

    from ..errors import DebugkitWarning, InvalidInputError
    from .capture import describe_callable

    entry = describe_callable(spec)
    try:
        out = dict(kwargs or {})
        if json.loads(json.dumps(out, allow_nan=False)) != out:
            raise ValueError("values change in a JSON round trip (tuples, non-string keys)")
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(MSG_DATASET_KWARGS.format(error=exc)) from None
    if entry is not None and entry.get("sha256") is None:
        warnings.warn(MSG_DATASET_NOT_FOUND.format(spec=spec, module=entry["module"]),
                      DebugkitWarning, stacklevel=4)
    return {"code": entry, "kwargs": out}


def collate_code(fn) -> dict:
    """What a capture records of a loader's ``collate_fn``: ``{"spec", "code", "why_not"}``.

    ``spec`` is ``module:qualname`` (a script's ``__main__`` resolved as
    :func:`debugkit.recorder.codespec.callable_spec` does) or, for a callable replay
    cannot import, its ``module:qualname`` as it reads; ``code`` its file and SHA-256
    (:func:`~debugkit.recorder.capture.describe_callable`) when it is importable, else
    None with ``why_not`` saying why (a lambda, a closure, a callable object...).
    """
    from .capture import describe_callable
    from .codespec import callable_spec

    if fn is None:
        return {"spec": None, "code": None, "why_not": "the loader has no collate_fn"}
    spec, why = callable_spec(fn)
    if spec is None:
        shown = f"{getattr(fn, '__module__', None) or type(fn).__module__}:" \
                f"{getattr(fn, '__qualname__', None) or type(fn).__qualname__}"
        return {"spec": shown, "code": None, "why_not": why}
    return {"spec": spec, "code": describe_callable(spec), "why_not": None}
