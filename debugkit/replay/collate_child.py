"""The child process of a data-loading replay: collate the captured samples again.

A ``data_loading`` capture holds the failed batch's samples as the Recorder re-read
them from the dataset (one by one, before collation). This child collates them again
with the loader's collate function (torch's own only: a custom ``collate_fn`` is user
code the capture does not identify by hash, so it is not run), then collates each
sample with the first usual one to name the samples that cannot go in one batch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from ..child_harness import Channel, serve

#: The collate functions this child imports and runs (``module:qualname``, from torch).
TORCH_COLLATE = ("torch.utils.data._utils.collate:default_collate",
                 "torch.utils.data._utils.collate:default_convert",
                 "torch.utils.data.dataloader:default_collate")


def _error(exc) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)[:2000]}


def recollate_here(req: dict, chan: Channel) -> dict:
    chan.send("progress", message="Starting torch")
    import importlib

    from ..tensortree import load_tree

    d = Path(req["failure_dir"])
    samples = load_tree(d / "batch.safetensors", d / "batch.json")
    if not isinstance(samples, list):
        return {"ran": False, "why": "the capture holds no list of samples"}
    spec = req.get("collate_fn") or ""
    if spec not in TORCH_COLLATE:
        return {"ran": False, "n": len(samples),
                "why": f"the loader's collate_fn {spec or '(unknown)'} is not torch's: it is not run"}
    mod, _, qual = spec.partition(":")
    fn: Any = importlib.import_module(mod)
    for part in qual.split("."):
        fn = getattr(fn, part)
    chan.send("progress", message=f"Collating the {len(samples)} captured samples again")
    out: dict[str, Any] = {"ran": True, "n": len(samples), "error": None, "odd": [], "usual": None}
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
            out["odd"].append({"position": k, **_error(exc)})
    return out


def main(argv: list[str] | None = None) -> int:
    from ..errors import DebugkitError

    return serve(recollate_here, argv, refuse=(DebugkitError,))


if __name__ == "__main__":
    sys.exit(main())
