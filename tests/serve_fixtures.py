"""Inference runs for the serving tests, recorded by ``debugkit.serve``.

``record_service(run_dir, ...)`` serves real requests to a small real model (a token
tagger called with keyword tensors, a regressor called with one tensor) in this process
through ``debugkit.serve`` (run format 1.2, ``kind: "inference"``): the requests table,
and a capture of each failing request.

The project whose code the captures name is written by :func:`write_project` into a
folder the test allows (``DEBUGKIT_CODE_ROOTS``).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

PROJECT_SOURCE = '''
import torch
import torch.nn as nn


class Tagger(nn.Module):
    """Token ids -> class scores: called as model(input_ids=..., attention_mask=...)."""

    def __init__(self, vocab=100, dim=8, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1).to(h.dtype)
        return {"logits": self.head(h.mean(dim=1))}


def build_tagger(vocab=100, dim=8, classes=3):
    return Tagger(vocab, dim, classes)


def build_fixed_tagger(vocab=100, dim=8, classes=3):
    """The same weights each time (as a factory loading a checkpoint would give)."""
    torch.manual_seed(1234)
    return Tagger(vocab, dim, classes)


def build_regressor(features=4):
    return nn.Sequential(nn.Linear(features, 8), nn.ReLU(), nn.Linear(8, 1))


class Sampler(nn.Module):
    """Draws from the CPU generator on every call (as sampling or noise injection does);
    a request with a negative input fails with the first draw in its message."""

    def __init__(self, features=4):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x):
        noise = torch.randn(x.shape)
        if bool((x < 0).any()):
            raise ValueError(f"negative input; first draw {noise.flatten()[0].item():.8f}")
        return self.lin(x) + noise


def build_sampler(features=4):
    return Sampler(features)
'''

def write_project(root: Path, package: str = "sproj") -> Path:
    """``<root>/<package>/model.py`` with the models above; returns ``root``."""
    pkg = Path(root) / package
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(textwrap.dedent(PROJECT_SOURCE))
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]
    return Path(root)


def _call(model, inputs):
    import torch

    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, torch.Tensor):
        return model(inputs)
    return model(*inputs)


def record_service(run_dir: Path, *, factory: str, traffic: list, factory_kwargs=None,
                   leak_bytes_per_request: int = 0, hash_weights: bool = False,
                   name: str | None = None) -> Path:
    """Serve ``traffic`` (input dicts, tensors or tuples) to the model the factory builds,
    through ``debugkit.serve``'s ``rec.request`` around a plain handler; return ``run_dir``.

    ``leak_bytes_per_request`` plants a leak in the handler: it keeps a buffer of that
    size per request alive in a module-level cache (as a response cache keyed by request
    would). A failing request is recorded and captured by debugkit.serve, and the
    handler answers it with an error, as a service would.
    """
    import importlib

    import torch

    import debugkit

    mod, _, fn = factory.partition(":")
    torch.manual_seed(0)
    model = getattr(importlib.import_module(mod), fn)(**(factory_kwargs or {})).eval()
    kept: list = []
    with debugkit.serve(model, str(run_dir), model_factory=factory,
                        factory_kwargs=factory_kwargs or {}, name=name or Path(run_dir).name,
                        hash_weights=hash_weights, flush_every_s=0.2,
                        memory_every_s=0) as rec:  # every request's memory: the pages draw each
        for inputs in traffic:
            try:
                with torch.no_grad(), rec.request(inputs) as r:
                    out = _call(model, inputs)
                    r.output(out)
                    if leak_bytes_per_request:
                        kept.append(torch.ones(leak_bytes_per_request // 4))
            except (RuntimeError, IndexError, ValueError):
                pass  # the service answers 500; debugkit.serve recorded and captured it
    kept.clear()
    return Path(run_dir)


def tagger_traffic(n: int = 12, bad_at: int = 5, bad_token: int = 150, length: int = 8) -> list:
    """Token requests to ``build_tagger`` (vocabulary 100): request ``bad_at`` holds
    ``bad_token`` at position 3."""
    import torch

    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        ids = torch.randint(0, 100, (1, length), generator=g)
        if i == bad_at:
            ids[0, 3] = bad_token
        out.append({"input_ids": ids, "attention_mask": torch.ones(1, length, dtype=torch.int64)})
    return out
