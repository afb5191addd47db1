"""The replay's child process: ``python -m debugkit.replay.child REQUEST.json``.

It rebuilds the model from the verified factory, loads the captured state and batch,
restores the RNG states, runs the step with the probes and anomaly detection on, and
sends what it saw to the parent as JSON lines on the file descriptor the request names
(``progress``, ``partial`` and finally ``result``, or ``refused``/``internal_error``;
the harness is :func:`debugkit.child_harness.serve`).
The parent turns that into the report (:mod:`debugkit.replay.report`); a crash or a
hang of this process is the parent's to report.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from ..child_harness import Channel, serve
from ..runschema import read_run_json
from .loading import capture_file, iter_leaves, load_batch

ANOMALY_NAN = "returned nan values"


def resolve_device(requested: str, original: str | None):
    """The torch device to replay on: ``auto`` is CUDA where available, else the CPU."""
    import torch

    from ..errors import ReplayError

    if requested == "cpu":
        return torch.device("cpu")
    if requested in ("cuda", "auto"):
        if not torch.cuda.is_available():
            if requested == "cuda":
                raise ReplayError("--device cuda: CUDA is not available on this machine "
                                  f"(torch {torch.__version__}, built for CUDA "
                                  f"{torch.version.cuda or 'none'}); use --device cpu")
            return torch.device("cpu")
        index = 0
        if original and original.startswith("cuda:"):
            try:
                index = int(original.split(":", 1)[1])
            except ValueError:
                index = 0
        if index >= torch.cuda.device_count():
            index = 0
        return torch.device("cuda", index)
    raise ReplayError(f"device {requested!r}: expected auto, cpu or cuda")


def to_device(obj: Any, device):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_device(x, device) for x in obj))
    if isinstance(obj, tuple):
        return tuple(to_device(x, device) for x in obj)
    if isinstance(obj, list):
        return [to_device(x, device) for x in obj]
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def restore_rng(failure_dir: Path, device) -> list[str]:
    """Restore the generator states taken at the start of the failing step."""
    import random

    import torch
    from safetensors.torch import load_file

    restored = []
    tens_path, meta_path = capture_file(failure_dir, "rng.safetensors"), capture_file(failure_dir, "rng.json")
    if not tens_path.is_file():
        return restored
    tensors = load_file(str(tens_path))
    meta = read_run_json(meta_path, "rng.json") if meta_path.is_file() else {}
    if "torch_cpu" in tensors:
        torch.set_rng_state(tensors["torch_cpu"])
        restored.append("torch_cpu")
    if device.type == "cuda":
        key = f"torch_cuda_{device.index or 0}"
        if key in tensors:
            torch.cuda.set_rng_state(tensors[key], device)
            restored.append(key)
    if "numpy_keys" in tensors and "numpy" in meta:
        try:
            import numpy as np

            m = meta["numpy"]
            np.random.set_state((m["name"], tensors["numpy_keys"].numpy().astype(np.uint32),
                                 int(m["pos"]), int(m["has_gauss"]), float(m["cached_gaussian"])))
            restored.append("numpy")
        except (ImportError, KeyError, ValueError, TypeError):
            pass
    py = meta.get("python")
    if py:
        try:
            random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
            restored.append("python")
        except (KeyError, TypeError, ValueError):
            pass
    return restored


def load_state(model, failure_dir: Path, present: bool, state_file: str | None = None) -> dict:
    """Load ``model.safetensors`` (or ``state_file``: a checkpoint's) into ``model``; say
    what matched and what is non-finite."""
    import torch

    info = {"loaded": False, "missing": [], "unexpected": [], "mismatched": [],
            "nonfinite_params": [], "error": None}
    if present:
        from safetensors.torch import load_file

        state = load_file(str(state_file or capture_file(failure_dir, "model.safetensors")))
        own = model.state_dict()
        fit = {}
        for k, v in state.items():
            if k in own and isinstance(own[k], torch.Tensor) and tuple(own[k].shape) != tuple(v.shape):
                info["mismatched"].append(f"{k}: captured {list(v.shape)}, model {list(own[k].shape)}")
            else:
                fit[k] = v
        info["tensors"] = len(state)
        res = model.load_state_dict(fit, strict=False)
        info["missing"] = list(res.missing_keys)
        info["unexpected"] = list(res.unexpected_keys)
        info["loaded"] = True
    for name, p in model.named_parameters():
        if (p.is_floating_point() or p.is_complex()) and not bool(torch.isfinite(p.detach()).all()):
            info["nonfinite_params"].append(name)
    return info


def pick_loss(result):
    """The loss a step function returned: a tensor, ``{"loss": ...}``, or a tuple's first."""
    import torch

    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, dict):
        for key in ("loss", "total_loss"):
            if isinstance(result.get(key), torch.Tensor):
                return result[key]
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    if hasattr(result, "loss") and isinstance(result.loss, torch.Tensor):
        return result.loss
    return None


#: How a captured request called the model (``call`` in a request capture's record, as
#: debugkit.serve writes it): ``model(**inputs)``, ``model(*inputs)``, ``model(inputs)``,
#: ``model(*inputs["args"], **inputs["kwargs"])``. ``tensor`` is read as ``single``.
CALLS = ("kwargs", "args", "single", "args_kwargs")


def request_call(batch, recorded: str | None) -> str:
    """How to call the model with a request's captured inputs: the recorded ``call``,
    else what the structure says (a dict: keyword arguments; a list or tuple:
    positional arguments; anything else: the one argument)."""
    if recorded == "tensor":
        return "single"
    if recorded in CALLS and (recorded != "args_kwargs" or (isinstance(batch, dict)
                                                            and set(batch) == {"args", "kwargs"})):
        return str(recorded)
    if isinstance(batch, dict):
        return "kwargs"
    if isinstance(batch, (list, tuple)):
        return "args"
    return "single"


def call_model(model, inputs, call: str):
    """The model called with a request's inputs as the service called it (``call``)."""
    if call == "kwargs":
        return model(**inputs)
    if call == "args":
        return model(*inputs)
    if call == "args_kwargs":
        return model(*inputs["args"], **inputs["kwargs"])
    return model(inputs)


CALL_TEXT = {"kwargs": "model(**inputs)", "args": "model(*inputs)", "single": "model(inputs)",
             "args_kwargs": "model(*args, **kwargs)"}


def choose_mode(batch, step_fn_spec: str | None, num_classes, call: str | None = None) -> tuple[str, str]:
    """``(mode, description)`` of the step a replay runs (``call``: a captured request's
    call structure, which makes the mode ``request``: the forward pass alone)."""
    import torch

    if call is not None:
        return "request", (f"{CALL_TEXT[call]} under torch.no_grad() in eval mode, as the service "
                           "called it (forward only)")
    if step_fn_spec:
        return "step_fn", f"the captured step_fn {step_fn_spec}(model, batch), then loss.backward()"
    pair = isinstance(batch, (list, tuple)) and len(batch) == 2 and isinstance(batch[1], torch.Tensor)
    if pair and num_classes:
        return "cross_entropy", ("model(inputs), then F.cross_entropy(output, target) and backward "
                                 f"(num_classes={num_classes})")
    if pair:
        return "forward", ("model(inputs) alone (no step_fn and no num_classes recorded), then "
                           "backward of the output's sum to exercise the backward pass")
    return "forward", ("model(batch) alone (the batch is not an (inputs, target) pair), then "
                       "backward of the output's sum to exercise the backward pass")


def _error_info(exc: BaseException, probe) -> dict:
    stack = [f["module"] for f in probe.frames] if probe is not None else []
    return {"type": type(exc).__name__, "module": type(exc).__module__,
            "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20000:],
            "module_stack": stack,
            "raising_frame": probe.frames[-1] if probe is not None and probe.frames else None}


def run_pass(model, batch, mode, step_fn, probe, device, *, anomaly: bool,
             call: str | None = None) -> dict:
    """One forward + backward (mode ``request``: the forward alone, under no_grad, called
    as ``call`` says). Returns what happened (error, loss, gradients, outputs, time)."""
    import torch
    import torch.nn.functional as F

    model.zero_grad(set_to_none=True)
    probe.reset()
    out: dict = {"error": None, "loss": None, "loss_finite": None, "grads_nonfinite": [],
                 "anomaly": None, "backward_ran": False, "nodes": 0}
    caught: list = []
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autograd.set_detect_anomaly(anomaly, check_nan=True):
                if mode == "request":
                    from .probes import nonfinite_op_watch

                    with torch.no_grad(), nonfinite_op_watch(probe):
                        output = call_model(model, batch, call or "single")
                    out["outputs_nonfinite"] = nonfinite_outputs(output)
                    loss = None
                elif mode == "step_fn":
                    from .probes import loss_op_watch

                    with loss_op_watch(probe):  # the ops of the loss, after the model's forward
                        loss = pick_loss(step_fn(model, batch))
                    if loss is None:
                        raise TypeError("step_fn returned no loss tensor (return the loss, "
                                        "a dict with 'loss', or a tuple starting with it)")
                elif mode == "cross_entropy":
                    output = model(batch[0])
                    loss = F.cross_entropy(output, batch[1])
                else:
                    output = model(batch[0] if isinstance(batch, (list, tuple)) and len(batch) == 2
                                   else batch)
                    outs = [t for _, t in iter_leaves(output) if t.is_floating_point()]
                    loss = sum(t.float().sum() for t in outs) if outs else None
                if loss is not None and loss.numel() != 1:
                    loss = loss.float().mean()
                if loss is not None:
                    out["loss"] = float(loss.detach().float().item())
                    out["loss_finite"] = math.isfinite(out["loss"])
                    if loss.requires_grad:
                        out["nodes"] = probe.watch_backward(loss)
                        out["backward_ran"] = True
                        loss.backward()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
    except Exception as exc:  # the replayed step's own error is the result
        out["error"] = _error_info(exc, probe)
        if anomaly and ANOMALY_NAN in str(exc):
            out["anomaly"] = {"message": str(exc), "op": _anomaly_op(str(exc)),
                              "forward_trace": _anomaly_trace(caught)}
    out["seconds"] = time.perf_counter() - t0
    try:
        for name, p in model.named_parameters():
            if p.grad is not None and not bool(torch.isfinite(p.grad).all()):
                out["grads_nonfinite"].append(name)
    except Exception as exc:  # a CUDA context broken by a device-side assert
        out["grads_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    out["warnings"] = [str(w.message)[:500] for w in caught
                       if "Anomaly Detection has been enabled" not in str(w.message)
                       and "Error detected in" not in str(w.message)][:5]
    return out


def nonfinite_outputs(output) -> list[dict]:
    """The model output's floating tensors that hold NaN or Inf: ``{"path", "shape",
    "kind", "count", "total"}`` (``path`` within the output, e.g. ``output['logits']``)."""
    import torch

    from .loading import format_path

    found = []
    for path, t in iter_leaves(output):
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()):
            continue
        bad = ~torch.isfinite(t.detach())
        if bool(bad.any()):
            found.append({"path": "output" + format_path(tuple(path))[len("batch"):],
                          "shape": list(t.shape), "count": int(bad.sum().item()),
                          "total": int(t.numel()),
                          "kind": "nan" if bool(torch.isnan(t).any()) else "inf"})
    return found


def _anomaly_op(message: str) -> str | None:
    import re

    m = re.search(r"Function '([^']+)' returned nan", message)
    return m.group(1) if m else None


def _anomaly_trace(caught) -> dict | None:
    from .probes import user_frame

    for w in caught or []:
        text = str(w.message)
        if "Traceback of forward call that caused the error" in text:
            return user_frame(text)
    return None


def replay_here(req: dict, chan: Channel) -> dict:
    """Do the replay in this process (the child) and return the raw observations."""
    chan.send("progress", message="Starting torch")
    import torch

    from . import datachecks
    from .code import load_verified_module
    from .policy import check_plain_kwargs
    from .probes import Probe

    failure_dir = Path(req["failure_dir"])
    device = resolve_device(req["device"], req.get("original_device"))
    chan.send("progress", message=f"Replaying on {device}")
    if device.type == "cuda":
        torch.cuda.init()
    allow = bool(req.get("allow_code"))
    idents = {i["role"]: i for i in req["code"]}
    chan.send("progress", message=f"Importing {idents['model_factory']['spec']} "
                                  f"({idents['model_factory']['local_file']})")
    # What `python -m` in the user's folder would search: the modules' recorded roots
    # and the user's working directory (absolute paths, resolved by the parent). Which
    # factories may run at all is decided by the code roots below, not by sys.path.
    roots = [idents["model_factory"].get("search_root")] + list(req.get("sys_path") or [])
    for root in reversed([r for r in dict.fromkeys(roots) if r]):
        if root not in sys.path:
            sys.path.insert(0, root)
    roots = req.get("code_roots")
    kwargs = check_plain_kwargs(req.get("factory_kwargs") or {}, str(failure_dir))
    factory = load_verified_module(idents["model_factory"], allow, roots)
    step_fn = load_verified_module(idents["step_fn"], allow, roots) if "step_fn" in idents else None

    chan.send("progress", message="Building the model and loading the captured state")
    model = factory(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"{idents['model_factory']['spec']} returned {type(model).__name__}, "
                        "not a torch.nn.Module")
    state = load_state(model, failure_dir, req.get("parts", {}).get("model", False) or
                       bool(req.get("state_file")), req.get("state_file"))
    if req.get("weights_sha256"):  # a served model identified by its weights' hash
        from ..recorder.capture import state_dict_sha256

        got = state_dict_sha256(model)
        state["weights_sha256"] = {"recorded": req["weights_sha256"], "rebuilt": got,
                                   "match": got == req["weights_sha256"]}
    model.to(device)
    model.train(bool(req.get("model_training", True)))

    batch_cpu = load_batch({"path": str(failure_dir)})
    n_batch = datachecks.batch_size(batch_cpu)
    # A captured request is called as the service called the model: it has no target.
    call = request_call(batch_cpu, req.get("call")) if req.get("request") else None
    target = datachecks.find_target(batch_cpu) if call is None else None
    num_classes = req.get("num_classes") if call is None else None
    mode, ran = choose_mode(batch_cpu, idents.get("step_fn", {}).get("spec"), num_classes, call)
    raw: dict[str, Any] = {
        "device": str(device), "torch": torch.__version__, "ran": {"mode": mode, "detail": ran},
        "n_batch": n_batch, "state": state,
        "n_embeddings": sum(isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))
                            for m in model.modules()),
        "target_path": list(target[0]) if target else None,
        "labels": None, "inputs_nonfinite": datachecks.find_nonfinite(
            batch_cpu, skip=target[0] if target else None, n_batch=n_batch),
    }
    if target is not None and num_classes:
        raw["labels"] = datachecks.find_bad_labels(target[1], int(num_classes), path=target[0],
                                                n_batch=n_batch)
    chan.send("partial", raw=raw)

    chan.send("progress", message="Restoring the RNG states and running the step "
                                  "(forward, then backward with anomaly detection)")
    restored = restore_rng(failure_dir, device)
    raw["rng_restored"] = restored
    batch = to_device(batch_cpu, device)
    refs = {}
    for path, t in iter_leaves(batch):
        if isinstance(t, torch.Tensor):
            refs.setdefault(t.untyped_storage().data_ptr(), tuple(path))
    probe = Probe(model, refs, n_batch)
    probe.batch_bases = _bases(batch)
    probe.install()
    # anomaly detection watches a backward pass, which a request does not run
    first = run_pass(model, batch, mode, step_fn, probe, device, anomaly=call is None, call=call)
    raw["diagnosis"] = _probe_findings(probe)
    raw["anomaly"] = first["anomaly"]
    reproduction = first
    if first["anomaly"] is not None:
        # Anomaly mode stopped the backward pass: replay once more without it, from the
        # same RNG state and batch, so the outcome is what training saw.
        chan.send("progress", message="Anomaly detection stopped the backward pass; replaying "
                                      "once more without it for the full gradients")
        restore_rng(failure_dir, device)
        batch = to_device(load_batch({"path": str(failure_dir)}), device)
        probe.batch_refs = {t.untyped_storage().data_ptr(): tuple(p)
                            for p, t in iter_leaves(batch) if isinstance(t, torch.Tensor)}
        probe.batch_bases = _bases(batch)
        reproduction = run_pass(model, batch, mode, step_fn, probe, device, anomaly=False)
    probe.remove()
    raw["outcome"] = {k: reproduction[k] for k in ("error", "loss", "loss_finite", "grads_nonfinite",
                                                   "seconds", "backward_ran", "warnings")}
    if call is not None:
        from .loading import format_path

        raw["outcome"]["outputs_nonfinite"] = reproduction.get("outputs_nonfinite") or []
        raw["call"] = call
        raw["request_inputs"] = [{"path": format_path(tuple(p)), "shape": list(t.shape),
                                  "dtype": str(t.dtype).replace("torch.", "")}
                                 for p, t in iter_leaves(batch_cpu)]
    raw["anomaly_pass_error"] = first["error"] if reproduction is not first else None
    if target is not None and not num_classes and mode == "step_fn":
        raw["labels_unchecked"] = ("num_classes is not recorded, and a step_fn's model output "
                                   "need not be class scores")
    elif target is not None and not num_classes and probe.output_width:
        raw["labels"] = datachecks.find_bad_labels(target[1], probe.output_width, path=target[0],
                                                source="output width", n_batch=n_batch)
    elif target is not None and not num_classes:
        raw["labels_unchecked"] = "neither num_classes nor the model's output width is known"
    return raw


def _bases(batch) -> dict:
    import torch

    return {t.untyped_storage().data_ptr(): t for _, t in iter_leaves(batch)
            if isinstance(t, torch.Tensor)}


def _probe_findings(probe) -> dict:
    return {"embeddings": probe.embeddings, "mismatches": probe.mismatches,
            "shape_findings": probe.shape_findings, "forward_born": probe.forward_born,
            "forward_entry": probe.forward_entry, "backward": probe.backward,
            "output_width": probe.output_width, "output_absmax": probe.output_absmax,
            "loss_op": probe.loss_op, "nonfinite_op": getattr(probe, "nonfinite_op", None)}


def main(argv: list[str] | None = None) -> int:
    from ..errors import CodeRefusedError, DebugkitError

    return serve(replay_here, argv, refuse=(CodeRefusedError, DebugkitError))


if __name__ == "__main__":
    sys.exit(main())
