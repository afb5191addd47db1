"""Inference runs for the serving tests, written with debugkit's own writers.

``record_service(run_dir, ...)`` serves real requests to a small real model (a token
tagger called with keyword tensors, a regressor called with one tensor) in this process,
and writes what a ``debugkit.serve`` run holds (run format 1.2, ``kind: "inference"``):
the manifest with the model factory's code hash, ``ranks/0/requests-000.arrows`` (one row
per request, an Arrow IPC stream as the other tables) and a failure capture of each
failing request through :func:`debugkit.recorder.capture.write_capture` (``kind:
"request"``), so replay reads exactly what the recorder's capture code writes.

The project whose code the captures name is written by :func:`write_project` into a
folder the test allows (``DEBUGKIT_CODE_ROOTS``).
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
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
'''

REQUESTS_COLUMNS = ("request", "wall_time", "latency_ms", "outcome", "fallback", "error_type",
                    "signature", "input_numel", "mem_before_bytes", "mem_after_bytes", "mem_kind",
                    "device", "failure_id")


def write_project(root: Path, package: str = "sproj") -> Path:
    """``<root>/<package>/model.py`` with the models above; returns ``root``."""
    pkg = Path(root) / package
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(textwrap.dedent(PROJECT_SOURCE))
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        del sys.modules[name]
    return Path(root)


def requests_schema():
    import pyarrow as pa

    return pa.schema([("request", pa.int64()), ("wall_time", pa.float64()),
                      ("latency_ms", pa.float64()), ("outcome", pa.string()),
                      ("fallback", pa.string()), ("error_type", pa.string()),
                      ("signature", pa.string()), ("input_numel", pa.int64()),
                      ("mem_before_bytes", pa.int64()), ("mem_after_bytes", pa.int64()),
                      ("mem_kind", pa.string()), ("device", pa.string()),
                      ("failure_id", pa.string())])


def write_requests(rank_dir: Path, rows: list[dict], segment: int = 0) -> Path:
    """One requests segment (Arrow IPC stream, written in batches of 64 rows)."""
    import pyarrow as pa

    rank_dir.mkdir(parents=True, exist_ok=True)
    path = rank_dir / f"requests-{segment:03d}.arrows"
    schema = requests_schema()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        for i in range(0, len(rows), 64):
            chunk = rows[i:i + 64]
            w.write_batch(pa.record_batch([pa.array([r.get(c) for r in chunk], f.type)
                                           for c, f in zip(schema.names, schema, strict=True)],
                                          schema=schema))
    return path


def signature_of(inputs) -> str:
    """``input_ids:int64[1,8];attention_mask:int64[1,8]`` (the agreed signature text)."""
    import torch

    def one(name, t):
        return f"{name}:{str(t.dtype).replace('torch.', '')}[{','.join(map(str, t.shape))}]"
    if isinstance(inputs, torch.Tensor):
        return one("input", inputs)
    if isinstance(inputs, dict):
        return ";".join(one(k, v) for k, v in inputs.items())
    return ";".join(one(f"arg{i}", v) for i, v in enumerate(inputs))


def _call(model, inputs):
    import torch

    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, torch.Tensor):
        return model(inputs)
    return model(*inputs)


def _finite(out) -> bool:
    import torch

    tensors = out.values() if isinstance(out, dict) else [out]
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def record_service(run_dir: Path, *, factory: str, traffic: list, factory_kwargs=None,
                   leak_bytes_per_request: int = 0, device: str = "cpu",
                   name: str | None = None, start_time: float | None = None,
                   capture_weights: bool = True) -> Path:
    """Serve ``traffic`` (a list of input dicts/tensors/tuples) to the model the factory
    builds, record each request, capture the failing ones; return ``run_dir``.

    The memory columns are the process RSS plus ``leak_bytes_per_request`` per request
    so far (a planted leak: a list that keeps every request's output alive would do the
    same, but not deterministically at this size). ``device`` is what the rows and
    captures record (``cuda:0`` for a request that ran on a GPU). ``capture_weights``
    False: the captures hold no ``model.safetensors`` and the manifest names the served
    weights by ``weights_sha256`` instead (as debugkit.serve does).
    """
    import importlib

    import torch

    from debugkit import format as fmt
    from debugkit.recorder.capture import describe_callable, take_rng_state, write_capture

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    mod, _, fn = factory.partition(":")
    torch.manual_seed(0)
    model = getattr(importlib.import_module(mod), fn)(**(factory_kwargs or {})).eval()
    code = {"model_factory": describe_callable(factory)}
    from debugkit.replay.child import weights_sha256

    served_sha = weights_sha256(model)
    t0 = start_time if start_time is not None else time.time()
    manifest = {"schema_version": "1.2", "run_id": f"serve-{run_dir.name}"[:32],
                "name": name or run_dir.name, "created_at": t0, "kind": "inference",
                "config": {}, "model_factory": factory, "factory_kwargs": factory_kwargs or {},
                "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
                "code": code, "world_size": 1, "weights_sha256": served_sha,
                "serve": {"gpu_mem_threshold": 0.8, "host_mem_threshold": 0.75,
                          "capture_budget": 8},
                "env": {"host": "test", "python": sys.version.split()[0],
                        "torch": torch.__version__}}
    (run_dir / fmt.MANIFEST).write_text(json.dumps(manifest))
    base_rss = 200 * 2 ** 20
    rows = []
    for i, inputs in enumerate(traffic):
        rng = take_rng_state()
        start = time.perf_counter()
        exc, out = None, None
        try:
            with torch.no_grad():
                out = _call(model, inputs)
        except Exception as e:  # the request's own error is what gets recorded
            exc = e
        latency_ms = (time.perf_counter() - start) * 1e3
        outcome = "error" if exc else ("ok" if _finite(out) else "nonfinite")
        fid = None
        before = base_rss + leak_bytes_per_request * i
        if outcome != "ok":
            message = None if exc else "the output holds NaN/Inf"
            fid = write_capture(run_dir, kind="request", step=i, rank=0, world_size=1, device=device,
                                exc=exc, batch=inputs, model=model if capture_weights else None,
                                rng_state=rng, code=code, message=message,
                                extra={"request": i, "outcome": outcome, "model_training": False,
                                       "weights_sha256": served_sha,
                                       "signature": signature_of(inputs),
                                       "call": ("kwargs" if isinstance(inputs, dict) else
                                                "single" if isinstance(inputs, torch.Tensor) else
                                                "args")})
        numel = sum(int(t.numel()) for t in (inputs.values() if isinstance(inputs, dict) else
                                              [inputs] if isinstance(inputs, torch.Tensor) else inputs))
        rows.append({"request": i, "wall_time": t0 + 0.05 * i, "latency_ms": latency_ms,
                     "outcome": outcome, "fallback": None,
                     "error_type": type(exc).__name__ if exc else None,
                     "signature": signature_of(inputs), "input_numel": numel,
                     "mem_before_bytes": before, "mem_after_bytes": before + leak_bytes_per_request,
                     "mem_kind": "cuda_allocated" if device.startswith("cuda") else "rss",
                     "device": device, "failure_id": fid})
    write_requests(run_dir / fmt.RANKS_DIR / "0", rows)
    (run_dir / fmt.RANKS_DIR / "0" / fmt.HEARTBEAT).write_text(json.dumps(
        {"state": "finished", "time": t0 + 0.05 * len(traffic), "pid": 0}))
    return run_dir


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
