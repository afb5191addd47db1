"""Hooks that watch one replayed step: which module ran, what it saw, where a value broke.

:class:`Probe` registers, on every module of the model, a forward pre-hook and a
forward hook. They keep the stack of modules being run (so when an exception escapes,
the innermost unfinished module is the one that raised), check ``nn.Embedding`` inputs
against ``num_embeddings``, compare input dtypes and devices with the module's
parameters, find the first module whose output is non-finite although its inputs were
finite, and tag the autograd nodes each module created with its name. After the
forward pass, :meth:`Probe.watch_backward` hooks every node of the graph and records
the first one whose outgoing gradient is non-finite although its incoming gradient was
finite (anomaly mode only checks NaN, and only names the node where NaN appears, which
is often one after an Inf was born).

Needs torch; used by the replay's child process.
"""

from __future__ import annotations

import re
from typing import Any

from .datachecks import check_index_range, group_by_sample

TAG = "debugkit_module"
# Module types whose floating-point inputs must match their weights' dtype exactly.
_FLOAT_INPUT_TYPES = ("Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d",
                      "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "RNN", "LSTM",
                      "GRU", "LayerNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
                      "GroupNorm", "MultiheadAttention")


def _tensors(obj: Any, out: list | None = None, depth: int = 0) -> list:
    import torch

    out = [] if out is None else out
    if depth > 8:
        return out
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            _tensors(x, out, depth + 1)
    elif isinstance(obj, dict):
        for x in obj.values():
            _tensors(x, out, depth + 1)
    return out


def _finite(t) -> bool:
    import torch

    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    # One reduction, no boolean copy: a finite sum means every element is finite. A
    # non-finite sum can also be an overflow of large finite values, so confirm it.
    if bool(torch.isfinite(t.sum())):
        return True
    return bool(torch.isfinite(t).all())


def _kind(t) -> str:
    import torch

    return "nan" if bool(torch.isnan(t).any()) else "inf"


def _seq_now() -> int:
    """The autograd sequence number the next node created on this thread would follow."""
    import torch

    probe = torch.empty(0, requires_grad=True).view(0)
    return probe.grad_fn._sequence_nr()


def expected_shape(module, shape: list[int]) -> str | None:
    """What ``module`` expects of its first input, when its type says (else None)."""
    name = type(module).__name__
    if name in ("Linear", "Bilinear") and hasattr(module, "in_features"):
        return f"last dimension {module.in_features} (in_features)"
    if name.startswith("Conv") and hasattr(module, "in_channels"):
        nd = len(getattr(module, "kernel_size", ()))
        return f"{nd + 1}-D or {nd + 2}-D input with {module.in_channels} channels " \
               f"at dimension -{nd + 1} (in_channels)"
    if name.startswith("BatchNorm") and hasattr(module, "num_features"):
        return f"{module.num_features} features at dimension 1 (num_features)"
    if name == "LayerNorm":
        return f"trailing dimensions {list(module.normalized_shape)} (normalized_shape)"
    if name == "GroupNorm":
        return f"{module.num_channels} channels at dimension 1 (num_channels)"
    if name in ("RNN", "LSTM", "GRU"):
        return f"last dimension {module.input_size} (input_size)"
    if name == "MultiheadAttention":
        return f"last dimension {module.embed_dim} (embed_dim)"
    return None


def shape_ok(module, shape: list[int]) -> bool | None:
    """Whether ``shape`` fits ``module``'s declared sizes (None when the type says nothing)."""
    name = type(module).__name__
    if not shape:
        return None
    if name == "Linear" and hasattr(module, "in_features"):
        return shape[-1] == module.in_features
    if name.startswith("Conv") and hasattr(module, "in_channels"):
        nd = len(getattr(module, "kernel_size", ()))
        return len(shape) in (nd + 1, nd + 2) and shape[-(nd + 1)] == module.in_channels
    if name.startswith("BatchNorm") and hasattr(module, "num_features"):
        return len(shape) >= 2 and shape[1] == module.num_features
    if name == "LayerNorm":
        ns = list(module.normalized_shape)
        return shape[-len(ns):] == ns
    if name == "GroupNorm":
        return len(shape) >= 2 and shape[1] == module.num_channels
    if name in ("RNN", "LSTM", "GRU"):
        return shape[-1] == module.input_size
    if name == "MultiheadAttention":
        return shape[-1] == module.embed_dim
    return None


class Probe:
    """Forward and backward observation of one model during a replayed step.

    Parameters
    ----------
    model : torch.nn.Module
    batch_refs : dict
        ``{storage data_ptr: batch path}`` of the batch's tensors on the replay device,
        to say which batch input reached a module. Set :attr:`batch_bases` (``{data_ptr:
        tensor}``) too to say which position of a sample a sliced input came from.
    n_batch : int or None
        The batch size (dim 0 of the batch's tensors).
    """

    def __init__(self, model, batch_refs: dict, n_batch: int | None):
        self.model = model
        self.batch_refs = batch_refs
        self.batch_bases: dict = {}
        self.n_batch = n_batch
        self.handles: list = []
        self.reset()

    def reset(self) -> None:
        self.frames: list[dict] = []
        self.embeddings: list[dict] = []
        self.mismatches: list[dict] = []
        self.shape_findings: list[dict] = []
        self.forward_born: dict | None = None
        self.forward_entry: dict | None = None
        self.backward: dict | None = None
        self.output_width: int | None = None
        self.output_absmax: float | None = None
        self.loss_op: dict | None = None
        self._node_handles: list = []

    # ------------------------------------------------------------------ install
    def install(self) -> Probe:
        for name, module in self.model.named_modules():
            self.handles.append(module.register_forward_pre_hook(
                self._pre(name), with_kwargs=True))
            self.handles.append(module.register_forward_hook(
                self._post(name), with_kwargs=True))
        return self

    def remove(self) -> None:
        for h in self.handles + self._node_handles:
            h.remove()
        self.handles, self._node_handles = [], []

    def _input_path(self, t) -> str | None:
        from .loading import format_path

        try:
            ptr = t.untyped_storage().data_ptr()
        except (RuntimeError, AttributeError):
            return None
        path = self.batch_refs.get(ptr)
        return format_path(path) if path is not None else None

    def _column_of(self, t) -> list | int | None:
        """For a view that selects one position of every sample of a batch tensor
        (``codes[:, j]``), that position (``j``); else None."""
        try:
            ptr = t.untyped_storage().data_ptr()
        except (RuntimeError, AttributeError):
            return None
        base = self.batch_bases.get(ptr)
        if base is None or base.dim() != t.dim() + 1 or t.dim() < 1 or not base.is_contiguous():
            return None
        if t.shape[0] != base.shape[0] or t.stride(0) != base.stride(0):
            return None
        rem = t.storage_offset() - base.storage_offset()
        inner = list(base.shape[1:])
        if rem < 0 or rem >= max(1, int(base[0].numel())):
            return None
        pos = []
        for size in reversed(inner):
            pos.append(rem % size)
            rem //= size
        pos.reverse()
        return pos[0] if len(pos) == 1 else pos

    # ------------------------------------------------------------------ forward hooks
    def _pre(self, name: str):
        import torch

        def hook(module, args, kwargs):
            ins = _tensors(args) + _tensors(kwargs)
            frame = {"module": name, "type": type(module).__name__,
                     "inputs": [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                                 "device": str(t.device), "path": self._input_path(t)} for t in ins[:8]],
                     "inputs_finite": all(_finite(t) for t in ins),
                     "seq": _seq_now() if torch.is_grad_enabled() else None}
            self.frames.append(frame)
            if not frame["inputs_finite"]:
                # Where non-finite values enter: the first leaf module that receives them
                # (a container's pre-hook fires before its children's).
                leaf = next(iter(module.children()), None) is None
                if self.forward_entry is None or (leaf and not self.forward_entry["leaf"]):
                    bad = next(t for t in ins if not _finite(t))
                    self.forward_entry = {"module": name, "type": frame["type"], "kind": _kind(bad),
                                          "path": self._input_path(bad), "leaf": leaf}
            if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and args:
                self._check_embedding(name, module, args[0])
            self._check_dtype_device(name, module, ins)
            if ins:
                ok = shape_ok(module, list(ins[0].shape))
                if ok is False:
                    self.shape_findings.append({
                        "module": name, "type": frame["type"], "actual": list(ins[0].shape),
                        "expected": expected_shape(module, list(ins[0].shape)),
                        "path": self._input_path(ins[0])})
        return hook

    def _post(self, name: str):
        def hook(module, args, kwargs, output):
            frame = self.frames.pop() if self.frames else {"inputs_finite": True, "seq": None}
            outs = _tensors(output)
            if self.forward_born is None and frame["inputs_finite"]:
                bad = next((t for t in outs if not _finite(t)), None)
                if bad is not None:
                    self.forward_born = self._born(name, module, bad)
            if frame.get("seq") is not None:
                self._tag(name, outs, frame["seq"])
            if name == "" and outs and outs[0].dim() >= 2:
                self.output_width = int(outs[0].shape[-1])
            if name == "":
                fl = [t.detach() for t in outs if t.is_floating_point() and t.numel()]
                if fl and all(_finite(t) for t in fl):
                    self.output_absmax = max(float(t.abs().max()) for t in fl)
        return hook

    def _born(self, name, module, bad) -> dict:
        import torch

        params_bad = [n for n, p in module.named_parameters(recurse=True) if not _finite(p.detach())]
        samples, n = group_by_sample(~torch.isfinite(bad), bad, self.n_batch, limit=5, per_sample=5)
        return {"module": name, "type": type(module).__name__, "kind": _kind(bad),
                "shape": list(bad.shape), "samples": samples, "n_samples": n,
                "nonfinite_params": params_bad}

    def _check_embedding(self, name, module, idx) -> None:
        import torch

        if not isinstance(idx, torch.Tensor) or idx.is_floating_point():
            return
        found = check_index_range(idx, int(module.num_embeddings), self.n_batch)
        if found is not None:
            found.update(module=name, type=type(module).__name__,
                         num_embeddings=int(module.num_embeddings), shape=list(idx.shape),
                         path=self._input_path(idx), input_position=self._column_of(idx))
            self.embeddings.append(found)

    def _check_dtype_device(self, name, module, ins) -> None:
        params = [p for p in module.parameters(recurse=False)
                  if p.is_floating_point() or p.is_complex()]
        if not params:
            return
        pdtype, pdev = params[0].dtype, params[0].device
        strict = type(module).__name__ in _FLOAT_INPUT_TYPES
        import torch

        embedding = isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag))
        for i, t in enumerate(ins):
            problem = None
            if t.device != pdev:
                problem = f"input on {t.device}, parameters on {pdev}"
            elif not embedding and t.dtype != pdtype and (t.is_floating_point() or (strict and i == 0)):
                problem = (f"input of dtype {str(t.dtype).replace('torch.', '')}, parameters of "
                           f"dtype {str(pdtype).replace('torch.', '')}")
            if problem:
                self.mismatches.append({"module": name, "type": type(module).__name__,
                                        "problem": problem, "path": self._input_path(t)})
                return

    def _tag(self, name: str, outs: list, start: int) -> None:
        """Tag the autograd nodes created since ``start`` and reachable from ``outs``."""
        stack = [t.grad_fn for t in outs if t.grad_fn is not None]
        seen = set()
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            try:
                seq = node._sequence_nr()
            except (AttributeError, RuntimeError):
                continue
            if seq >= 2 ** 63 or seq < start:  # AccumulateGrad, or made before this module ran
                continue
            meta = node.metadata
            if TAG not in meta:
                meta[TAG] = name
            stack.extend(nx for nx, _ in node.next_functions if nx is not None)

    # ------------------------------------------------------------------ backward
    def watch_backward(self, root_tensor) -> int:
        """Hook every autograd node reachable from ``root_tensor``; returns their number."""
        if root_tensor is None or root_tensor.grad_fn is None:
            return 0
        stack, seen = [root_tensor.grad_fn], set()
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if "AccumulateGrad" not in node.name():
                self._node_handles.append(node.register_hook(self._node_hook(node)))
            stack.extend(nx for nx, _ in node.next_functions if nx is not None)
        return len(seen)

    def _node_hook(self, node):
        def hook(grad_inputs, grad_outputs):
            if self.backward is not None:
                return None
            if not all(g is None or _finite(g) for g in grad_outputs):
                return None
            bad = next((g for g in grad_inputs if g is not None and not _finite(g)), None)
            if bad is None:
                return None
            self.backward = self._backward_finding(node, bad)
            return None
        return hook

    def _backward_finding(self, node, bad) -> dict:
        import torch

        meta = node.metadata
        samples, n = group_by_sample(~torch.isfinite(bad), bad, self.n_batch, limit=5, per_sample=5)
        return {"op": node.name(), "module": meta.get(TAG), "kind": _kind(bad),
                "shape": list(bad.shape), "samples": samples, "n_samples": n,
                "created_at": user_frame(meta.get("traceback_"))}


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>.*)')


def user_frame(trace) -> dict | None:
    """The innermost frame outside torch and debugkit of an anomaly-mode forward trace."""
    if not trace:
        return None
    text = "".join(trace) if isinstance(trace, (list, tuple)) else str(trace)
    frames = [m.groupdict() for m in _FRAME.finditer(text)]
    for f in reversed(frames):
        path = f["file"].replace("\\", "/")
        if "/torch/" in path or "/debugkit/replay/" in path:
            continue
        return {"file": f["file"], "line": int(f["line"]), "function": f["func"],
                "code": f["code"].strip()}
    return None


def _op_name(func) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    qual = getattr(func, "__qualname__", "") or ""
    if qual.startswith("TensorBase.") or qual.startswith("Tensor."):
        return f"Tensor.{name}"
    mod = getattr(func, "__module__", "") or ""
    if mod.startswith("torch.nn.functional"):
        return f"F.{name}"
    if mod.startswith("torch") or not mod:
        return f"torch.{name}"
    return f"{mod}.{name}"


def _caller() -> dict | None:
    """The innermost frame outside torch and debugkit's replay (the user's loss code)."""
    import sys

    f = sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename.replace("\\", "/")
        if "/torch/" not in path and "/debugkit/replay/" not in path and not path.startswith("<"):
            import linecache

            return {"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name,
                    "code": linecache.getline(f.f_code.co_filename, f.f_lineno).strip()}
        f = f.f_back
    return None


def loss_op_watch(probe: Probe):
    """A ``TorchFunctionMode`` that records, in ``probe.loss_op``, the first torch op run
    outside the model's modules (the loss computation of a step function) whose output
    is NaN/Inf although every tensor it was given is finite (``torch.log`` of a softmax
    that underflowed to 0, ``exp`` of a large logit ...): ``{"op", "kind", "at",
    "samples", "n_samples", "input_min", "input_max"}``."""
    import torch
    from torch.overrides import TorchFunctionMode

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if probe.loss_op is not None or probe.frames:
                return out
            try:
                outs = [t for t in _tensors(out) if t.is_floating_point()]
                bad = next((t for t in outs if not _finite(t.detach())), None)
                if bad is None:
                    return out
                ins = [t for t in _tensors(list(args)) + _tensors(kwargs or {}) if isinstance(t, torch.Tensor)]
                if not all(_finite(t.detach()) for t in ins):
                    return out
                b = bad.detach()
                samples, n = group_by_sample(~torch.isfinite(b), b, probe.n_batch, limit=5, per_sample=5)
                fl = [t.detach() for t in ins if t.is_floating_point() and t.numel()]
                probe.loss_op = {
                    "op": _op_name(func), "kind": _kind(b), "at": _caller(),
                    "samples": samples, "n_samples": n,
                    "input_min": min((float(t.min()) for t in fl), default=None),
                    "input_max": max((float(t.max()) for t in fl), default=None)}
            except Exception:  # observing must never change the replayed step
                pass
            return out

    return _Watch()


def nonfinite_op_watch(probe: Probe):
    """A ``TorchFunctionMode`` for a replayed request's forward: records, in
    ``probe.nonfinite_op``, the first torch op (inside the model's modules or not) whose
    output holds NaN/Inf although every tensor it was given is finite, with the request
    inputs among its operands (found by storage, as :meth:`Probe._input_path`):
    ``{"op", "kind", "at", "module", "operands": [{"path", "shape", "value"}]}`` (``value``
    for a one-element operand). It names the field that made the output non-finite
    (``logits / temperature`` with ``temperature`` 0), which module-level probes cannot:
    every module saw finite inputs."""
    import torch
    from torch.overrides import TorchFunctionMode

    probe.nonfinite_op = None

    class _Watch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if probe.nonfinite_op is not None:
                return out
            try:
                outs = [t for t in _tensors(out) if t.is_floating_point()]
                bad = next((t for t in outs if not _finite(t.detach())), None)
                if bad is None:
                    return out
                ins = [t for t in _tensors(list(args)) + _tensors(kwargs or {})
                       if isinstance(t, torch.Tensor)]
                if not all(_finite(t.detach()) for t in ins):
                    return out
                operands = []
                for t in ins:
                    path = probe._input_path(t)
                    if path is not None:
                        operands.append({"path": path, "shape": list(t.shape),
                                         "value": float(t.detach().reshape(-1)[0]) if t.numel() == 1 else None})
                probe.nonfinite_op = {"op": _op_name(func), "kind": _kind(bad.detach()), "at": _caller(),
                                      "module": probe.frames[-1]["module"] if probe.frames else None,
                                      "operands": operands}
            except Exception:  # observing must never change the replayed request
                pass
            return out

    return _Watch()
