"""The replay report's checks, one per rule (captured state, labels, embedding indices,
finite inputs, shapes, dtype/device, forward, backward), and the culprit they point to.
"""

from __future__ import annotations

from pathlib import Path

from ...analysis.findings import Check
from .outcome import is_request
from .text import _module, _num, dataset_index, fmt_path, is_dtype_device_error, is_shape_error, sample_phrase

CHECKS = ("captured_state", "labels", "embedding_indices", "finite_inputs", "shapes",
          "dtype_device", "finite_forward", "finite_backward")
# The first failing check in this order names the culprit.
CULPRIT_ORDER = ("labels", "embedding_indices", "shapes", "dtype_device", "finite_inputs",
                 "captured_state", "finite_forward", "finite_backward")


def _check(name: str, ok: bool | None, detail: str, culprit: dict | None = None) -> Check:
    return Check(name, ok, detail, culprit)


def _reached(raw: dict | None) -> bool:
    return bool(raw) and raw.get("diagnosis") is not None


def _culprit(module=None, op=None, input=None, sample_index=None, dataset_index=None,
             detail=None) -> dict:
    return {"module": module, "op": op, "input": input, "sample_index": sample_index,
            "dataset_index": dataset_index, "detail": detail}


def check_captured_state(raw, record) -> Check:
    state = (raw or {}).get("state")
    if state is None:
        return _check("captured_state", None, "not reached: the replay stopped before loading the model")
    problems = []
    w = state.get("weights_sha256")
    if w is not None and not state.get("loaded"):
        # a served model's weights are not captured: the factory must rebuild the same ones
        if not w.get("match"):
            problems.append(f"the model the factory builds here has weights SHA-256 "
                            f"{str(w.get('rebuilt'))[:16]}…, not the served model's "
                            f"{str(w.get('recorded'))[:16]}…: the replay runs other weights")
    elif not state.get("loaded") and is_request(record):
        return _check("captured_state", None,
                      "not judged: the request capture holds no weights and the run records no "
                      "weights_sha256 (debugkit.serve(..., hash_weights=True) records it), so the "
                      "replay runs the weights the factory builds, unchecked"
                      + ("; " + "; ".join(problems) if problems else ""))
    elif not state.get("loaded"):
        why = (record.get("capture_errors") or {}).get("model") or "no model.safetensors in the capture"
        problems.append(f"the model state was not captured ({why}); the replay used the "
                        "factory's freshly initialised weights")
    if state.get("mismatched"):
        problems.append(f"{len(state['mismatched'])} captured tensors do not fit the rebuilt model "
                        f"({'; '.join(state['mismatched'][:3])})")
    if state.get("missing"):
        problems.append(f"{len(state['missing'])} model tensors were not in the capture "
                        f"({', '.join(state['missing'][:5])})")
    if state.get("unexpected"):
        problems.append(f"{len(state['unexpected'])} captured tensors are unknown to the rebuilt "
                        f"model ({', '.join(state['unexpected'][:5])})")
    bad = state.get("nonfinite_params") or []
    culprit = None
    if bad:
        mod = bad[0].rpartition(".")[0]
        problems.append(f"{len(bad)} parameters are already non-finite in the captured state "
                        f"({', '.join(bad[:5])}): an earlier step broke the weights")
        culprit = _culprit(module=mod, detail=f"parameter {bad[0]} is non-finite in the captured "
                                              "state (an earlier update broke it)")
    if problems:
        return _check("captured_state", False, "; ".join(problems), culprit)
    n = state.get("tensors")
    if w is not None and not state.get("loaded"):
        return _check("captured_state", True, "the factory rebuilt the served model's weights "
                                              f"(SHA-256 {str(w['recorded'])[:16]}…, as recorded); "
                                              "every parameter is finite")
    return _check("captured_state", True,
                  f"loaded {n} captured tensors; every parameter is finite" if n is not None
                  else "loaded the captured state; every parameter is finite")


def check_labels(raw, record) -> Check:
    if is_request(record):
        return _check("labels", None, "not applicable: a request carries no labels (inference)")
    raw = raw or {}
    lab = raw.get("labels")
    if lab is None:
        if raw.get("state") is None and raw.get("target_path") is None and "n_batch" not in raw:
            return _check("labels", None, "not reached: the replay stopped before reading the batch")
        if raw.get("target_path") is None:
            return _check("labels", None, "not applicable: the batch has no integer target "
                                          "(an (inputs, target) pair or a 'label'/'target' key)")
        return _check("labels", None, "not judged: " + (raw.get("labels_unchecked") or
                                                        "the number of classes is unknown"))
    path = fmt_path(lab["path"])
    n_batch = raw.get("n_batch")
    k = lab["num_classes"]
    src = "num_classes" if lab.get("source") == "num_classes" else "the model's output width"
    if not lab["count"]:
        return _check("labels", True, f"all {lab['total']} labels of {path} are in [0, {k}) ({src})")
    samples = lab["samples"]
    first = samples[0]
    val = first["values"][0]
    parts = [f"{sample_phrase(record, s['sample'], n_batch)} has label {_num(s['values'][0])}"
             for s in samples[:3]]
    more = lab["n_samples"] - len(parts)
    detail = (f"{lab['count']} of {lab['total']} labels of {path} are outside [0, {k}) ({src}): "
              + "; ".join(parts) + (f"; {more} more" if more > 0 else ""))
    di = dataset_index(record, first["sample"], n_batch)
    return _check("labels", False, detail, _culprit(
        input=path, sample_index=first["sample"], dataset_index=di,
        detail=f"{sample_phrase(record, first['sample'], n_batch)} has label {_num(val)}, outside "
               f"[0, {k}); cross-entropy indexes the output with it (on CUDA a device-side "
               f"assert, on the CPU 'Target {_num(val)} is out of bounds')"))


def check_embeddings(raw, record) -> Check:
    if not _reached(raw):
        return _check("embedding_indices", None, "not reached: the replay stopped before the forward pass")
    diag = raw["diagnosis"]
    n_emb = raw.get("n_embeddings")
    found = diag.get("embeddings") or []
    if not found:
        if n_emb == 0:
            return _check("embedding_indices", None, "not applicable: the model has no nn.Embedding")
        return _check("embedding_indices", True,
                      f"every index reaching the model's {n_emb} embedding(s) is in range"
                      if n_emb is not None else "every index reaching an embedding is in range")
    e = found[0]
    n_batch = raw.get("n_batch")
    s = e["samples"][0] if e["samples"] else {"sample": None, "positions": [], "values": []}
    where = sample_phrase(record, s["sample"], n_batch)
    position = s["positions"][0] if s.get("positions") else e.get("input_position")
    pos = f" at position {position}" if position is not None else ""
    of = f" of {e['path']}" if e.get("path") and position is not None else ""
    val = s["values"][0] if s["values"] else e["max"]
    detail = (f"{_module(e['module'])} ({e['type']}, num_embeddings={e['num_embeddings']}) got "
              f"index {val} in {where}{pos}{of}; {e['count']} of {e['total']} indices are outside "
              f"[0, {e['num_embeddings']}) in {e['n_samples']} sample(s)")
    if len(found) > 1:
        detail += "; also " + ", ".join(_module(x["module"]) for x in found[1:4])
    di = dataset_index(record, s["sample"], n_batch)
    c = _culprit(module=e["module"], input=e.get("path"), sample_index=s["sample"], dataset_index=di,
                 detail=f"{where}{pos}{of} holds index {val}, outside [0, {e['num_embeddings']}) "
                        f"of {_module(e['module'])}")
    c["_positions"] = [position] if position is not None else []
    return _check("embedding_indices", False, detail, c)


def check_inputs(raw, record) -> Check:
    raw = raw or {}
    if "inputs_nonfinite" not in raw:
        return _check("finite_inputs", None, "not reached: the replay stopped before reading the batch")
    found = raw["inputs_nonfinite"]
    if not found:
        return _check("finite_inputs", True, "no NaN or Inf in the batch's floating-point inputs")
    f = found[0]
    n_batch = raw.get("n_batch")
    kinds = [k for k, key in (("NaN", "nan"), ("+Inf", "posinf"), ("-Inf", "neginf")) if f.get(key)]
    s = f["samples"][0]
    where = sample_phrase(record, s["sample"], n_batch)
    feats = s["positions"]
    feat_txt = (f" in feature{'s' if len(feats) > 1 else ''} {', '.join(map(str, feats[:10]))}"
                if feats else "")
    path = fmt_path(f["path"])
    detail = (f"{path} holds {' and '.join(kinds)}: {where}{feat_txt}; "
              f"{f['n_samples']} sample(s) in all")
    if len(found) > 1:
        detail += "; also " + ", ".join(fmt_path(x["path"]) for x in found[1:4])
    entry = ((raw.get("diagnosis") or {}).get("forward_entry") or {})
    if entry.get("module") is not None:
        detail += f"; it enters the model at {_module(entry['module'])} ({entry.get('type')})"
    di = dataset_index(record, s["sample"], n_batch)
    c = _culprit(module=entry.get("module"), input=path, sample_index=s["sample"], dataset_index=di,
                 detail=f"{where} of {path} holds {' and '.join(kinds)}{feat_txt}")
    c["_positions"] = list(feats)
    return _check("finite_inputs", False, detail, c)


def _error(raw) -> dict | None:
    return ((raw or {}).get("outcome") or {}).get("error")


def check_shapes(raw, record) -> Check:
    if not _reached(raw):
        return _check("shapes", None, "not reached: the replay stopped before the forward pass")
    err = _error(raw)
    findings = raw["diagnosis"].get("shape_findings") or []
    frame = err.get("raising_frame") if err else None
    if is_shape_error(err):
        if frame is not None:
            f0 = next((f for f in findings if f["module"] == frame["module"]), None)
            ins = frame.get("inputs") or []
            actual = f0["actual"] if f0 else (ins[0]["shape"] if ins else None)
            path = (f0 or {}).get("path") or (ins[0].get("path") if ins else None)
            expected = (f0 or {}).get("expected")
            exp_txt = f" expects {expected};" if expected else ""
            detail = (f"{_module(frame['module'])} ({frame['type']}) raised the shape error:"
                      f"{exp_txt} got input of shape {actual}"
                      + (f" from {path}" if path else "") + f" ({err['message'].splitlines()[0]})")
            return _check("shapes", False, detail, _culprit(
                module=frame["module"], input=path,
                detail=(f"{_module(frame['module'])} ({frame['type']}) expects {expected}; got "
                        f"input of shape {actual}" if expected else
                        f"{_module(frame['module'])} ({frame['type']}) got input of shape {actual}: "
                        f"{err['message'].splitlines()[0]}")))
        return _check("shapes", False, "the shape error was raised outside the model's modules "
                                       f"(in the loss or the step function): {err['message'].splitlines()[0]}",
                      _culprit(detail=err["message"].splitlines()[0]))
    if findings:
        f0 = findings[0]
        return _check("shapes", False, f"{_module(f0['module'])} ({f0['type']}) expects "
                                       f"{f0['expected']}; got input of shape {f0['actual']}",
                      _culprit(module=f0["module"], input=f0.get("path"),
                               detail=f"expects {f0['expected']}, got {f0['actual']}"))
    return _check("shapes", True, "no shape error; every module reached accepted its inputs' shapes")


def check_dtype_device(raw, record) -> Check:
    if not _reached(raw):
        return _check("dtype_device", None, "not reached: the replay stopped before the forward pass")
    mism = raw["diagnosis"].get("mismatches") or []
    err = _error(raw)
    if mism:
        m = mism[0]
        detail = (f"{_module(m['module'])} ({m['type']}): {m['problem']}"
                  + (f" (from {m['path']})" if m.get("path") else ""))
        if len(mism) > 1:
            detail += f"; {len(mism) - 1} more module(s)"
        return _check("dtype_device", False, detail, _culprit(module=m["module"], input=m.get("path"),
                                                              detail=m["problem"]))
    if is_dtype_device_error(err):
        frame = err.get("raising_frame")
        mod = frame["module"] if frame else None
        first = err["message"].splitlines()[0]
        return _check("dtype_device", False, f"{_module(mod)} raised: {first}",
                      _culprit(module=mod, detail=first))
    return _check("dtype_device", True, "inputs match each module's parameter dtype and device")


def _forward_nonfinite(raw) -> bool:
    diag = (raw or {}).get("diagnosis") or {}
    outcome = (raw or {}).get("outcome") or {}
    return bool(diag.get("forward_born") or diag.get("forward_entry")
                or outcome.get("loss_finite") is False or (raw or {}).get("inputs_nonfinite"))


def check_forward(raw, record) -> Check:
    if not _reached(raw):
        return _check("finite_forward", None, "not reached: the replay stopped before the forward pass")
    diag = raw["diagnosis"]
    born = diag.get("forward_born")
    n_batch = raw.get("n_batch")
    if born:
        s = born["samples"][0] if born.get("samples") else {"sample": None}
        where = sample_phrase(record, s.get("sample"), n_batch)
        extra = (f"; its parameters {', '.join(born['nonfinite_params'][:3])} are non-finite"
                 if born.get("nonfinite_params") else "")
        detail = (f"{_module(born['module'])} ({born['type']}) produced {born['kind']} from finite "
                  f"inputs, first in {where}{extra}")
        di = dataset_index(record, s.get("sample"), n_batch)
        return _check("finite_forward", False, detail, _culprit(
            module=born["module"], sample_index=s.get("sample"), dataset_index=di,
            detail=f"its forward output is {born['kind']} although its inputs were finite"))
    entry = diag.get("forward_entry")
    if entry:
        return _check("finite_forward", True, "no module turned finite inputs into NaN/Inf; the "
                                              f"non-finite values came in with the batch (they reach "
                                              f"{_module(entry['module'])} first)")
    outcome = raw.get("outcome") or {}
    if outcome.get("loss_finite") is False:
        return _loss_computation(diag, outcome, record, raw.get("n_batch"))
    return _check("finite_forward", True, "every module's forward output is finite")


def _loss_computation(diag: dict, outcome: dict, record: dict, n_batch) -> Check:
    """Every module's output was finite but the loss is not: the loss computation (the
    step function's code after the model's forward) made it, at the op the replay saw."""
    loss = _num(outcome.get("loss"))
    amax = diag.get("output_absmax")
    outs = (f"every output of the model was finite (max |output| {amax:.3g})" if amax is not None
            else "every module's output was finite")
    op = diag.get("loss_op")
    if not op:
        return _check("finite_forward", False,
                      f"{outs} but the loss is {loss}: the loss computation made it non-finite, "
                      "outside the model's modules",
                      _culprit(module="(loss computation)",
                               detail=f"the loss computation made the loss {loss} although {outs}"))
    at = op.get("at") or {}
    where = f" at {Path(at['file']).name}:{at['line']} (`{at['code']}`)" if at.get("file") else ""
    s = op["samples"][0] if op.get("samples") else {"sample": None}
    sample = s.get("sample")
    first = f", first in {sample_phrase(record, sample, n_batch)}" if sample is not None else ""
    rng = ""
    if op.get("input_min") is not None and op.get("input_max") is not None:
        rng = f" (its input ranged over [{op['input_min']:.3g}, {op['input_max']:.3g}])"
    detail = (f"the loss computation: {op['op']}{where} turned finite values into {op['kind']}"
              f"{rng}{first}, although {outs}; the loss is {loss}")
    return _check("finite_forward", False, detail, _culprit(
        module="(loss computation)", op=op["op"], sample_index=sample,
        dataset_index=dataset_index(record, sample, n_batch), detail=detail))


def check_backward(raw, record) -> Check:
    if is_request(record):
        return _check("finite_backward", None, "not applicable: a request runs the forward pass alone")
    outcome = (raw or {}).get("outcome") or {}
    if not _reached(raw) or not outcome.get("backward_ran"):
        why = "the replay stopped before the backward pass" if _reached(raw) or outcome else \
            "the replay stopped before the forward pass"
        if outcome and not outcome.get("backward_ran") and not outcome.get("error"):
            why = "there was no loss requiring a gradient"
        return _check("finite_backward", None, f"not reached: {why}")
    diag = raw["diagnosis"]
    if _forward_nonfinite(raw):
        return _check("finite_backward", None, "not judged: the forward pass was already non-finite, "
                                               "so the gradients are too")
    b = diag.get("backward")
    anomaly = raw.get("anomaly")
    n_batch = raw.get("n_batch")
    if b:
        s = b["samples"][0] if b.get("samples") else {"sample": None}
        where = sample_phrase(record, s.get("sample"), n_batch)
        at = b.get("created_at")
        made = (f" (its forward op at {at['file']}:{at['line']}: `{at['code']}`)" if at else "")
        mod = f" in {_module(b['module'])}" if b.get("module") is not None else ""
        detail = (f"{b['op']}{mod}{made} turned finite incoming gradients into {b['kind']}, "
                  f"first for {where}")
        if anomaly and anomaly.get("op") and anomaly["op"] != b["op"]:
            detail += (f"; anomaly mode stopped one node later, at {anomaly['op']} "
                       f"(\"{anomaly['message']}\")")
        elif anomaly:
            detail += f"; anomaly mode: \"{anomaly['message']}\""
        di = dataset_index(record, s.get("sample"), n_batch)
        return _check("finite_backward", False, detail, _culprit(
            module=b.get("module"), op=b["op"], sample_index=s.get("sample"), dataset_index=di,
            detail=f"{b['op']}'s gradient is {b['kind']} although the gradient flowing into it "
                   "was finite" + (f" (forward: {at['code']})" if at else "")))
    grads = outcome.get("grads_nonfinite") or []
    if anomaly or grads:
        op = anomaly.get("op") if anomaly else None
        return _check("finite_backward", False,
                      (f"anomaly mode: \"{anomaly['message']}\"" if anomaly else
                       f"{len(grads)} parameter gradients are non-finite ({', '.join(grads[:5])})"),
                      _culprit(op=op, detail=anomaly["message"] if anomaly else None))
    return _check("finite_backward", True, "every gradient is finite (anomaly detection was on)")


CHECK_FUNCS = {"captured_state": check_captured_state, "labels": check_labels,
               "embedding_indices": check_embeddings, "finite_inputs": check_inputs,
               "shapes": check_shapes, "dtype_device": check_dtype_device,
               "finite_forward": check_forward, "finite_backward": check_backward}


def build_checks(raw: dict | None, record: dict) -> list[Check]:
    """Every check, in :data:`CHECKS` order (with its ``culprit`` on failures)."""
    return [CHECK_FUNCS[name](raw, record) for name in CHECKS]


def pick_culprit(checks: list[Check], raw: dict | None, record: dict) -> dict:
    """The first failing check's culprit in :data:`CULPRIT_ORDER`; else what the error says."""
    by_name = {c.name: c for c in checks}
    for name in CULPRIT_ORDER:
        c = by_name.get(name)
        if c is not None and c.ok is False and c.culprit:
            return dict(c.culprit)  # may carry "_positions", split off by build_report
    err = _error(raw)
    if err:
        frame = err.get("raising_frame")
        mod = frame["module"] if frame else None
        return _culprit(module=mod, detail=f"no check explains the error; it was raised in "
                                           f"{_module(mod)}: {err['type']}: "
                                           f"{(err['message'].splitlines() or [''])[0]}")
    return _culprit()


def public_checks(checks: list[Check]) -> list[dict]:
    """The checks as the report's JSON holds them: ``{"name", "ok", "detail"}``."""
    return [c.to_dict() for c in checks]
