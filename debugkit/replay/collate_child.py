"""The child process of a data-loading replay: fetch the batch again and collate it.

A ``data_loading`` capture holds the failed batch's samples as the Recorder re-read
them from the dataset (one by one, before collation) and, when the run named one with
``rec.track(loader, dataset_factory=...)``, the dataset's factory (its file's SHA-256)
and keyword arguments. With a factory the parent allowed (verified code in an allowed
folder, :mod:`debugkit.replay.code`), this child rebuilds the dataset, fetches the
batch's dataset indices from it again and compares each sample with the captured one
(a difference means the dataset changed since the run); the batch it then collates is
the re-fetched one. Without one, it collates the captured samples.

It collates with the loader's collate function: torch's own, or the run's module-level
``collate_fn`` when the capture recorded its file's SHA-256 and the parent verified it
(a lambda, a closure or a callable object has no such identity and is not run). Then it
collates each sample with the first usual one to name the samples that cannot go in one
batch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ..child_harness import Channel, serve
from ..recorder.dataload import TORCH_COLLATE  # torch's own: imported and run as they are


def _error(exc) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)[:2000]}


def _diff(a: dict, b: dict, ta: dict, tb: dict, path: str = "") -> str | None:
    """The first difference between two :func:`~debugkit.tensortree.flatten_tree` nodes
    (``ta``/``tb`` their tensors), as ``"<path>: <what>"``, or None when they are equal."""
    import torch

    at = path or "sample"
    ka, kb = a.get("type"), b.get("type")
    if ka != kb:
        return f"{at}: {ka} in the capture, {kb} now"
    if ka in ("tensor", "ndarray", "npscalar"):
        x, y = ta[a["ref"]], tb[b["ref"]]
        if x.dtype != y.dtype or list(x.shape) != list(y.shape):
            return (f"{at}: {str(x.dtype).replace('torch.', '')} {list(x.shape)} in the capture, "
                    f"{str(y.dtype).replace('torch.', '')} {list(y.shape)} now")
        if torch.equal(x, y):
            return None
        if x.is_floating_point() or x.is_complex():
            same = torch.isclose(x, y, rtol=0.0, atol=0.0, equal_nan=True)
            if bool(same.all()):
                return None
            d = (x - y).abs().nan_to_num(nan=float("inf"))[~same]
            return f"{at}: {int((~same).sum())} of {x.numel()} values differ (max |difference| {float(d.max()):.4g})"
        n = int((x != y).sum())
        return f"{at}: {n} of {x.numel()} values differ"
    if ka in ("tuple", "list"):
        ia, ib = a.get("items", []), b.get("items", [])
        if len(ia) != len(ib):
            return f"{at}: {len(ia)} items in the capture, {len(ib)} now"
        for i, (x, y) in enumerate(zip(ia, ib)):
            d = _diff(x, y, ta, tb, f"{path}[{i}]")
            if d:
                return d
        return None
    if ka == "dict":
        if a.get("keys") != b.get("keys"):
            return f"{at}: keys {a.get('keys')} in the capture, {b.get('keys')} now"
        for k, x, y in zip(a.get("keys", []), a.get("values", []), b.get("values", [])):
            d = _diff(x, y, ta, tb, f"{path}[{k!r}]")
            if d:
                return d
        return None
    if ka == "opaque":
        return None if a.get("repr") == b.get("repr") else f"{at}: {a.get('repr')!r} in the capture, {b.get('repr')!r} now"
    if a.get("value") != b.get("value"):
        return f"{at}: {a.get('value')!r} in the capture, {b.get('value')!r} now"
    return None


def sample_difference(captured, fetched) -> str | None:
    """How a re-fetched sample differs from the captured one (None: equal), compared
    after both went through the capture's own tree form (what the capture could hold)."""
    from ..tensortree import flatten_tree

    sa, ta = flatten_tree(captured)
    sb, tb = flatten_tree(fetched)
    return _diff(sa["root"], sb["root"], ta, tb)


def refetch(req: dict, samples: list, chan: Channel) -> tuple[dict, list | None]:
    """Rebuild the dataset with the verified factory and fetch the batch's indices again.
    Returns the report (``{"ran", "spec", "n", "errors", "mismatched", "why"}``) and the
    re-fetched samples (None when any fetch raised or the dataset was not built)."""
    from ..errors import CodeRefusedError
    from .code import load_verified_module
    from .policy import check_plain_kwargs

    ident = req["dataset"]
    for root in reversed([r for r in dict.fromkeys([ident.get("search_root"), *(req.get("sys_path") or [])]) if r]):
        if root not in sys.path:
            sys.path.insert(0, root)
    kwargs = check_plain_kwargs(req.get("dataset_kwargs") or {}, req["failure_dir"])
    chan.send("progress", message=f"Rebuilding the dataset with {ident['spec']}")
    out: dict[str, Any] = {"ran": False, "spec": ident["spec"], "kwargs": kwargs, "n": 0,
                           "errors": [], "mismatched": [], "why": None}
    factory = load_verified_module(ident, bool(req.get("allow_code")), req.get("code_roots"))
    try:
        dataset = factory(**kwargs)
    except CodeRefusedError:
        raise
    except Exception as exc:  # the user's factory failing is part of the report
        out["why"] = f"{ident['spec']}(**dataset_kwargs) raised {type(exc).__name__}: {str(exc)[:500]}"
        return out, None
    indices = [int(i) for i in req.get("indices") or []][:len(samples) or None]
    chan.send("progress", message=f"Fetching dataset indices {indices[:4]}{'...' if len(indices) > 4 else ''} again")
    fetched: list = []
    for pos, i in enumerate(indices):
        try:
            item = dataset[i]
        except Exception as exc:  # a sample that no longer reads: the replay's finding
            out["errors"].append({"position": pos, "dataset_index": i, **_error(exc)})
            fetched.append(None)
            continue
        fetched.append(item)
        if pos < len(samples):
            d = sample_difference(samples[pos], item)
            if d:
                out["mismatched"].append({"position": pos, "dataset_index": i, "what": d})
    out.update(ran=True, n=len(fetched))
    return out, (None if out["errors"] else fetched)


def _collate_fn(req: dict):
    """The collate function to run, or ``(None, why)``."""
    import importlib

    spec = req.get("collate_fn") or ""
    if spec in TORCH_COLLATE:
        mod, _, qual = spec.partition(":")
        fn: Any = importlib.import_module(mod)
        for part in qual.split("."):
            fn = getattr(fn, part)
        return fn, None
    ident = req.get("collate")
    if ident:
        from .code import load_verified_module

        for root in [ident.get("search_root"), *(req.get("sys_path") or [])][::-1]:
            if root and root not in sys.path:
                sys.path.insert(0, root)
        return load_verified_module(ident, bool(req.get("allow_code")), req.get("code_roots")), None
    return None, req.get("collate_why_not") or \
        f"the loader's collate_fn {spec or '(unknown)'} is not torch's and has no verified code: it is not run"


def recollate_here(req: dict, chan: Channel) -> dict:
    chan.send("progress", message="Starting torch")
    from ..tensortree import load_tree

    d = Path(req["failure_dir"])
    samples = load_tree(d / "batch.safetensors", d / "batch.json")
    if not isinstance(samples, list):
        return {"ran": False, "why": "the capture holds no list of samples"}
    re_report = None
    if req.get("dataset"):
        re_report, fetched = refetch(req, samples, chan)
        if fetched is not None:
            samples = fetched
        if re_report["errors"] or not re_report["ran"]:
            return {"ran": False, "n": len(samples), "refetch": re_report,
                    "why": re_report["why"] or "a re-fetched sample raised"}
    fn, why = _collate_fn(req)
    if fn is None:
        return {"ran": False, "n": len(samples), "why": why, "refetch": re_report}
    which = "re-fetched" if re_report else "captured"
    chan.send("progress", message=f"Collating the {len(samples)} {which} samples again")
    out: dict[str, Any] = {"ran": True, "n": len(samples), "error": None, "odd": [], "usual": None,
                           "refetch": re_report}
    t0 = time.perf_counter()
    try:
        fn(samples)
        out["seconds"] = time.perf_counter() - t0
        return out
    except Exception as exc:  # the replayed collation's own error is the result
        out["seconds"] = time.perf_counter() - t0
        out["error"] = _error(exc)
    usual = req.get("usual_position")
    usual = usual if isinstance(usual, int) and 0 <= usual < len(samples) else 0
    out["usual"] = usual
    for k, s in enumerate(samples):
        if k == usual:
            continue
        try:
            fn([samples[usual], s])
        except Exception as exc:
            out["odd"].append({"position": k, **_error(exc), "leaves": _describe(s)})
    out["usual_leaves"] = _describe(samples[usual])
    return out


def _describe(sample) -> list[dict]:
    """A sample's leaves as the capture describes them (for re-fetched samples)."""
    from ..recorder.dataload import _leaves

    return [{"path": p, "type": t, "shape": s, "dtype": d} for p, t, s, d in _leaves(sample)]


def main(argv: list[str] | None = None) -> int:
    from ..errors import DebugkitError

    return serve(recollate_here, argv, refuse=(DebugkitError,))


if __name__ == "__main__":
    sys.exit(main())
