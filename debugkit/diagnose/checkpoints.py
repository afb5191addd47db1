"""``nonfinite_weights`` and ``frozen_layer`` findings from a run's checkpoints.

Config keys (``config["checkpoints"]``): ``max_checkpoints`` (default 50: the newest N
verified checkpoints are read).
"""

from __future__ import annotations

from pathlib import Path

from ..analysis.findings import Finding
from ..location import as_path, load_safetensors

DEFAULTS = {"max_checkpoints": 50}


def _weights(path: Path) -> dict:
    """A checkpoint's tensors as numpy arrays: reading them needs no torch (whose import
    costs seconds, the most of a cold Home page's diagnosis). bfloat16, which numpy lacks,
    is read through torch and widened to float32 (finiteness and equality are kept)."""
    try:
        return load_safetensors(path / "model.safetensors", numpy=True)
    except (TypeError, ValueError, KeyError):
        import torch

        return {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy()
                for k, v in load_safetensors(path / "model.safetensors").items()}


def collect(run, config: dict) -> list[Finding]:
    from ..checkpoints import list_checkpoints

    cfg = {**DEFAULTS, **config}
    try:
        df = list_checkpoints(run.path)
    except (OSError, TypeError):
        return []  # not a local run folder
    df = df[(df["source"] == "debugkit") & df["ok"]].tail(int(cfg["max_checkpoints"]))
    if not len(df):
        return []
    import numpy as np

    grads = run.grad_norms()
    order = {k: i for i, k in enumerate(dict.fromkeys(grads["layer"]))} if len(grads) else {}

    def in_model_order(keys):  # safetensors returns names sorted; findings name the model's first
        return sorted(keys, key=lambda k: (order.get(k, len(order)), k))

    out: list[Finding] = []
    first: dict | None = None
    changed: set[str] = set()
    prev = None
    nonfinite_done = False
    for step, path in zip(df["step"].astype(int), df["path"]):
        w = _weights(as_path(path))
        if first is None:
            first = {k: True for k in w}
        if not nonfinite_done:
            bad = in_model_order(k for k, v in w.items()
                                 if np.issubdtype(v.dtype, np.floating) and not bool(np.isfinite(v).all()))
            if bad:
                nonfinite_done = True
                out.append(Finding(
                    kind="nonfinite_weights", step=int(step), rank=None, layer=bad[0], severity="error",
                    message=(f"The checkpoint at step {step} holds NaN/Inf weights in {len(bad)} "
                             f"parameter(s), first {bad[0]!r}: do not resume from it; resume from an "
                             "earlier checkpoint and find the step that went non-finite on the Gradients page."),
                    evidence={"checkpoint": str(path), "layers": bad[:50]}))
        if prev is not None:
            changed |= {k for k in w if k in prev and not np.array_equal(w[k], prev[k])}
        prev = w
    if len(df) >= 2 and prev is not None:
        got_grad = set(grads.loc[grads["grad_norm"] > 0, "layer"].unique()) if len(grads) else set()
        frozen = in_model_order(k for k in prev if k not in changed and k in got_grad)
        if frozen:
            out.append(Finding(
                kind="frozen_layer", step=int(df["step"].iloc[-1]), rank=None, layer=frozen[0],
                severity="warning",
                message=(f"{len(frozen)} parameter(s), first {frozen[0]!r}, receive gradients but never "
                         f"changed across {len(df)} checkpoints: they are probably missing from the "
                         "optimizer's parameter groups (or their learning rate is 0)."),
                evidence={"layers": frozen[:50], "checkpoints": len(df)}))
    return out
