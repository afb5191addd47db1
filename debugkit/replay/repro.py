"""A minimal repro for a bug report: one standalone ``repro.py`` plus the capture.

The zip holds ``<id>-repro/repro.py`` (needs torch and safetensors, not debugkit), the
capture's batch, weights, RNG state and record, and under ``code/`` the source files of
the model factory (and step function) with their packages' ``__init__.py``. Running
``python repro.py`` rebuilds the model, loads the state, restores the RNG, runs the
step with anomaly detection on and lets the error propagate.

All values taken from the capture enter the script as one JSON string literal
(produced by ``repr``) or as comment lines stripped of control characters, so a
crafted capture cannot inject code into the script.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

from ..errors import ReplayError
from ..location import as_path
from .code import MISSING, NEVER, CodeIdentity
from .loading import capture_file, factory_kwargs
from .report import is_request

CAPTURE_FILES = ("batch.safetensors", "batch.json", "model.safetensors", "rng.safetensors",
                 "rng.json", "failure.json")
_CTRL = re.compile(r"[\x00-\x1f\x7f]+")

TEMPLATE = r'''#!/usr/bin/env python3
# Minimal repro of a failing training step, exported by debugkit.
#
#   python repro.py               # on the failure's device where available, else the CPU
#   python repro.py --device cpu  # the CPU's kernels raise readable errors
#
# Needs torch and safetensors (pip install torch safetensors); not debugkit.
#
{comments}
#
# Files: batch.safetensors + batch.json (the batch), model.safetensors (the weights the
# step saw), rng.safetensors + rng.json (RNG states at the start of the step),
# failure.json (the capture's record and traceback), code/ (the model's source).
# If the model's module imports other modules of your project, add the project to
# PYTHONPATH.

import json
import os
import random
import sys
import warnings

warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = json.loads({config})

if "--device" in sys.argv:
    DEVICE = sys.argv[sys.argv.index("--device") + 1]
else:
    DEVICE = None
if DEVICE != "cpu":
    os.environ.setdefault("CUDA_LAUNCH_BLOCKING", "1")  # report CUDA errors at the failing op

sys.path.insert(0, os.path.join(HERE, "code"))

import importlib  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file  # noqa: E402


def unflatten(node, tensors):
    """Rebuild the batch from batch.json's structure and the tensors."""
    kind = node["type"]
    if kind == "tensor":
        return tensors[node["ref"]]
    if kind == "ndarray":
        return tensors[node["ref"]].numpy()
    if kind == "npscalar":
        return tensors[node["ref"]].numpy()[()]
    if kind == "value":
        return node["value"]
    if kind == "float":
        return float(node["value"])
    if kind == "list":
        return [unflatten(x, tensors) for x in node["items"]]
    if kind == "tuple":
        return tuple(unflatten(x, tensors) for x in node["items"])
    if kind == "dict":
        return dict(zip(node["keys"], [unflatten(v, tensors) for v in node["values"]]))
    return None  # an object recorded by its repr only


def to_device(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {{k: to_device(v, device) for k, v in obj.items()}}
    return obj


def resolve(spec):
    module, _, qualname = spec.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def restore_rng(device):
    path = os.path.join(HERE, "rng.safetensors")
    if not os.path.exists(path):
        return
    tensors = load_file(path)
    with open(os.path.join(HERE, "rng.json")) as f:
        meta = json.load(f)
    torch.set_rng_state(tensors["torch_cpu"])
    key = "torch_cuda_%d" % (device.index or 0)
    if device.type == "cuda" and key in tensors:
        torch.cuda.set_rng_state(tensors[key], device)
    if "numpy_keys" in tensors and "numpy" in meta:
        import numpy as np

        m = meta["numpy"]
        np.random.set_state((m["name"], tensors["numpy_keys"].numpy().astype(np.uint32),
                             m["pos"], m["has_gauss"], m["cached_gaussian"]))
    if meta.get("python"):
        p = meta["python"]
        random.setstate((p["version"], tuple(p["state"]), p["gauss"]))


def pick_loss(result):
    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, dict):
        return result.get("loss")
    if isinstance(result, (tuple, list)) and result:
        return result[0]
    return getattr(result, "loss", None)


def call_model(model, inputs, call):
    if call == "kwargs":
        return model(**inputs)
    if call == "args":
        return model(*inputs)
    if call == "args_kwargs":
        return model(*inputs["args"], **inputs["kwargs"])
    return model(inputs)


def outputs(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in outputs(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in outputs(x)]
    return []


def replay_request(model, inputs, device):
    """A captured inference request: the forward pass alone, as the service called it."""
    print("calling model(%s) for request %s on %s" % (
        {{"kwargs": "**inputs", "args": "*inputs", "args_kwargs": "*args, **kwargs"}}.get(
            CONFIG["call"], "inputs"), CONFIG["step"], device))
    with torch.no_grad():
        out = call_model(model, inputs, CONFIG["call"])
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    bad = [t for t in outputs(out) if t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        raise FloatingPointError("the output holds NaN/Inf (%d of its tensors)" % len(bad))
    print("the request ran without an error: not reproduced here")


def main():
    want = DEVICE or ("cuda" if CONFIG["device"].startswith("cuda") and torch.cuda.is_available() else "cpu")
    device = torch.device(want)
    print("expected:", CONFIG["expected"])
    print("replaying step", CONFIG["step"], "on", device)
    model = resolve(CONFIG["model_factory"])(**CONFIG["factory_kwargs"])
    weights = os.path.join(HERE, "model.safetensors")
    if os.path.exists(weights):
        model.load_state_dict(load_file(weights), strict=False)
    model.to(device).train(CONFIG["training"])
    with open(os.path.join(HERE, "batch.json")) as f:
        structure = json.load(f)
    batch = to_device(unflatten(structure["root"], load_file(os.path.join(HERE, "batch.safetensors"))), device)
    restore_rng(device)
    if CONFIG["mode"] == "request":
        return replay_request(model, batch, device)
    with torch.autograd.detect_anomaly():
        if CONFIG["step_fn"]:
            loss = pick_loss(resolve(CONFIG["step_fn"])(model, batch))
        elif CONFIG["mode"] == "cross_entropy":
            loss = F.cross_entropy(model(batch[0]), batch[1])
        else:
            out = model(batch[0] if isinstance(batch, (list, tuple)) and len(batch) == 2 else batch)
            loss = out.float().sum()
        if loss.numel() != 1:
            loss = loss.float().mean()
        print("loss:", loss.item())
        loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    if not torch.isfinite(loss).all() or bad:
        raise FloatingPointError("non-finite loss (%s) or gradients in %d parameters: %s"
                                 % (loss.item(), len(bad), ", ".join(bad[:5])))
    print("the step ran without an error: not reproduced here")


if __name__ == "__main__":
    main()
'''


def _comment(text: str, width: int = 86) -> list[str]:
    text = _CTRL.sub(" ", str(text))
    lines, cur = [], ""
    for word in text.split(" "):
        if len(cur) + len(word) + 1 > width and cur:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}".strip()
    if cur:
        lines.append(cur)
    return ["# " + ln for ln in lines] or ["#"]


def _code_files(ident: CodeIdentity) -> list[tuple[str, Path]]:
    """``(archive path under code/, local file)`` for a module and its packages' __init__."""
    local = Path(ident.local_file)
    parts = ident.module.split(".")
    pkgs = parts[:-1]
    if local.name == "__init__.py":
        out = [("/".join(parts) + "/__init__.py", local)]
        folder = local.parent.parent
    else:
        out = [("/".join(parts) + ".py", local)]
        folder = local.parent
    for i in range(len(pkgs), 0, -1):
        init = folder / "__init__.py"
        if init.is_file():
            out.append(("/".join(pkgs[:i]) + "/__init__.py", init))
        folder = folder.parent
    return out


def _call_of(record: dict, report: dict | None) -> str | None:
    """How a captured request called the model (the replay's finding, else the record's)."""
    if not is_request(record):
        return None
    call = ((report or {}).get("request") or {}).get("call") or record.get("call")
    if call in ("kwargs", "args", "single", "args_kwargs"):
        return call
    from ..runschema import read_run_json

    try:
        root = read_run_json(capture_file(record, "batch.json"), "batch.json").get("root") or {}
    except (OSError, ValueError):
        return "single"
    return {"dict": "kwargs", "list": "args", "tuple": "args"}.get(root.get("type"), "single")


def build_repro(run, record: dict, identities: list[CodeIdentity], report: dict | None = None) -> bytes:
    """The repro zip's bytes (see the module docstring)."""
    for ident in identities:
        if ident.status in NEVER:
            raise ReplayError(f"cannot export a repro: {ident.message}")
    fid = record["id"]
    d = as_path(record["path"])
    roles = {i.role: i for i in identities}
    mode = (report or {}).get("ran", {}) or {}
    num_classes = record.get("num_classes", run.manifest.get("num_classes"))
    nonfinite = "non-finite output" if is_request(record) else "non-finite loss or gradients"
    expected = f"{record.get('error_type') or nonfinite}: " \
               f"{(record.get('message') or '').strip()}"
    config = {
        "failure": fid, "step": record.get("step"), "device": str(record.get("device") or "cpu"),
        "expected": _CTRL.sub(" ", expected)[:2000],
        "model_factory": roles["model_factory"].spec,
        "step_fn": roles["step_fn"].spec if "step_fn" in roles else None,
        "factory_kwargs": factory_kwargs(record, run.manifest),
        "mode": mode.get("mode") or ("cross_entropy" if num_classes else "forward"),
        "training": bool(record.get("model_training", not is_request(record))),
        "call": _call_of(record, report),
    }
    if is_request(record):
        config["mode"] = "request"
    what = (f"request {record.get('request', record.get('step'))} (inputs "
            f"{record.get('signature') or '?'})" if is_request(record) else f"step {record.get('step')}")
    comments = [f"Failure {fid} of run {run.name!r}: {what}, rank "
                f"{record.get('rank')}, on {record.get('device')}.",
                f"Original error: {expected}"]
    if report and (report.get("request") or {}).get("detail"):
        comments.append(f"debugkit's culprit: {report['request']['detail']}")
    elif report and report.get("culprit", {}).get("detail"):
        c = report["culprit"]
        where = ", ".join(f"{k}={c[k]!r}" for k in ("module", "op", "input", "sample_index",
                                                      "dataset_index") if c.get(k) is not None)
        comments.append(f"debugkit's culprit: {c['detail']}" + (f" ({where})" if where else ""))
    for ident in identities:
        if ident.status != "verified":
            comments.append(f"Note: {ident.message}")
    text = "\n".join(ln for c in comments for ln in _comment(c))
    script = TEMPLATE.format(comments=text, config=repr(json.dumps(config)))
    compile(script, "repro.py", "exec")  # the template must stay valid Python
    top = f"{fid}-repro"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{top}/repro.py", script)
        for name in CAPTURE_FILES:
            p = capture_file(d, name)
            if p.is_file():  # a local file, or one in an object store (its bytes)
                z.writestr(f"{top}/{name}", p.read_bytes())
        seen = set()
        for ident in identities:
            if ident.status == MISSING or not ident.local_file:
                continue
            for rel, path in _code_files(ident):
                if rel not in seen:
                    seen.add(rel)
                    z.write(path, f"{top}/code/{rel}")
    return buf.getvalue()
