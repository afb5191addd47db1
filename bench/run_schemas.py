"""What type-checking a run's JSON files costs: msgspec (debugkit.runschema) against pydantic.

Every JSON file of every sample run is checked against its schema (debugkit.runschema's
msgspec Structs), repeatedly; the manifest and failure records are also checked with
equivalent pydantic v2 models (strict mode), to compare. Also the import cost of each
library in a fresh interpreter (the dashboard and the CLI pay it once per process).

    python bench/run_schemas.py [--repeats 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional, Union

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _docs():
    import re

    from debugkit.runschema import SCHEMAS  # noqa: F401

    out = []
    for p in sorted((ROOT / "sample_runs").rglob("*.json")):
        n, s = p.name, p.as_posix()
        kind = ("manifest.json" if n == "manifest.json" else
                "meta.json" if re.match(r"meta-\d+\.json$", n) else
                "batch_spec.json" if re.match(r"batch_spec(-\d+)?\.json$", n) else
                "hang dump" if "/ranks/" in s and "/hangs/" in s else
                "checkpoints/index.json" if s.endswith("checkpoints/index.json") else
                "audit.json" if "/audits/" in s and n == "audit.json" else
                n if n in ("env.json", "data.json", "heartbeat.json", "failure.json", "rng.json",
                           "batch.json", "audit_targets.json") else None)
        if kind:
            out.append((kind, p.read_bytes()))
    return out


def _pydantic_models():
    from pydantic import BaseModel, ConfigDict

    class M(BaseModel):
        model_config = ConfigDict(strict=True, extra="allow")

    class CodeSpec(M):
        spec: Optional[str] = None
        module: Optional[str] = None
        qualname: Optional[str] = None
        file: Optional[str] = None
        sha256: Optional[str] = None

    class Env(M):
        python: Optional[str] = None
        platform: Optional[str] = None
        host: Optional[str] = None
        torch: Optional[str] = None
        cuda_available: Optional[bool] = None
        cuda_version: Optional[str] = None
        gpus: Optional[list[dict[str, Any]]] = None
        packages: Optional[dict[str, Optional[str]]] = None
        argv: Optional[list[str]] = None
        cwd: Optional[str] = None
        distributions: Optional[dict[str, Optional[str]]] = None
        hardware: Optional[dict[str, Any]] = None
        os: Optional[dict[str, Any]] = None

    class Distributed(M):
        backend: Optional[str] = None
        world_size: Optional[int] = None
        local_world_size: Optional[int] = None
        local_rank: Optional[int] = None
        node_rank: Optional[int] = None
        host: Optional[str] = None
        master_addr: Optional[str] = None
        master_port: Union[int, str, None] = None

    class Manifest(M):
        schema_version: Union[str, int, float, None] = None
        run_id: Optional[str] = None
        name: Optional[str] = None
        created_at: Union[int, float, None] = None
        resumed_at: Optional[list[Union[int, float]]] = None
        config: Optional[dict[str, Any]] = None
        model_factory: Optional[str] = None
        step_fn: Optional[str] = None
        factory_kwargs: Optional[dict[str, Any]] = None
        num_classes: Optional[int] = None
        log_every: Union[int, float, None] = None
        flush_every_s: Union[int, float, None] = None
        world_size: Optional[int] = None
        distributed: Optional[Distributed] = None
        model_class: Optional[str] = None
        optimizer_class: Optional[str] = None
        code: Optional[dict[str, CodeSpec]] = None
        guard: Optional[dict[str, Any]] = None
        env: Optional[Env] = None
        profiles: Optional[list[Any]] = None

    class Failure(M):
        id: Optional[str] = None
        kind: Optional[str] = None
        step: Optional[int] = None
        rank: Optional[int] = None
        world_size: Optional[int] = None
        device: Optional[str] = None
        time: Union[int, float, None] = None
        error_type: Optional[str] = None
        error_module: Optional[str] = None
        message: Optional[str] = None
        traceback: Optional[str] = None
        dataset_indices: Optional[list[int]] = None
        code: Optional[dict[str, CodeSpec]] = None
        num_classes: Optional[int] = None
        optimizer_stepped: Optional[bool] = None
        files: Optional[dict[str, list[str]]] = None
        sha256: Optional[dict[str, str]] = None
        capture_errors: Optional[dict[str, Optional[str]]] = None
        nonfinite: Optional[dict[str, Any]] = None
        model_training: Optional[bool] = None

    return {"manifest.json": Manifest, "failure.json": Failure}


def _per_doc_us(fn, docs, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for d in docs:
            fn(d)
        times.append((time.perf_counter() - t0) / len(docs) * 1e6)
    return statistics.median(times)


def _import_ms(module: str) -> float:
    runs = []
    for _ in range(5):
        code = f"import time; t=time.perf_counter(); import {module}; print(time.perf_counter()-t)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        runs.append(float(out.stdout) * 1e3)
    return statistics.median(runs)


def main(argv=None) -> int:
    import msgspec

    from debugkit.runschema import SCHEMAS

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=200)
    a = ap.parse_args(argv)
    docs = [(k, json.loads(b)) for k, b in _docs()]
    print(f"{len(docs)} JSON files of the sample runs; medians of {a.repeats} passes")
    print(f"{'file':<24} {'n':>4} {'json.loads':>11} {'msgspec':>9} {'pydantic':>9}  (us per file)")
    models = _pydantic_models()
    for kind in sorted({k for k, _ in docs}):
        ds = [d for k, d in docs if k == kind]
        raw = [json.dumps(d) for d in ds]
        parse = _per_doc_us(json.loads, raw, a.repeats)
        ms = _per_doc_us(lambda d: msgspec.convert(d, SCHEMAS[kind], strict=True), ds, a.repeats)
        pd = (f"{_per_doc_us(models[kind].model_validate, ds, a.repeats):>9.1f}"
              if kind in models else f"{'-':>9}")
        print(f"{kind:<24} {len(ds):>4} {parse:>11.1f} {ms:>9.1f} {pd}")
    print(f"import msgspec: {_import_ms('msgspec'):.1f} ms; import pydantic (+ BaseModel): "
          f"{_import_ms('pydantic; pydantic.BaseModel'):.1f} ms (fresh interpreter, median of 5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
