"""What to do about a replay's findings: one sentence per failing check.

Pure functions over the report (:mod:`debugkit.replay.report`).
"""

from __future__ import annotations

#: The culprit ``module`` of a failure made by the loss computation, outside the model.
LOSS_COMPUTATION = "(loss computation)"

# The backward of these ops is infinite or undefined at particular inputs.
OP_ADVICE = {
    "SqrtBackward0": ("the gradient of sqrt at 0 is infinite: add an epsilon inside "
                      "(torch.sqrt(x + 1e-12)), or use torch.linalg.vector_norm / "
                      "torch.cdist, whose gradient at zero distance is defined"),
    "PowBackward0": ("a fractional power (x ** 0.5, x ** -1) has an infinite gradient at 0: "
                     "clamp its base away from zero (x.clamp_min(1e-12) ** p)"),
    "PowBackward1": "x ** y with x <= 0 has no finite gradient in y: clamp x away from zero",
    "LogBackward0": "the gradient of log at 0 is infinite: use torch.log(x.clamp_min(1e-12)) or log1p",
    "DivBackward0": ("a division by a (near) zero denominator: add an epsilon to the "
                     "denominator or mask the zero entries"),
    "ReciprocalBackward0": "1/x at x = 0: add an epsilon or mask the zeros",
    "RsqrtBackward0": "rsqrt at 0 is infinite: add an epsilon inside",
    "AcosBackward0": "acos at ±1 has an infinite gradient: clamp its input to (-1 + 1e-7, 1 - 1e-7)",
    "AsinBackward0": "asin at ±1 has an infinite gradient: clamp its input to (-1 + 1e-7, 1 - 1e-7)",
    "AtanhBackward0": "atanh at ±1 is infinite: clamp its input to (-1 + 1e-7, 1 - 1e-7)",
    "NormBackward1": "the gradient of a norm at 0 is undefined: add an epsilon or use torch.linalg.vector_norm",
    "LinalgVectorNormBackward0": "a vector norm of exactly zero: add an epsilon for fractional orders",
    "ExpBackward0": "exp overflowed: subtract the max first (logsumexp), or clamp its input",
    "StdBackward0": "std of identical values is 0 and its gradient divides by it: add an epsilon",
    "VarBackward0": "a variance over a single element is NaN: check the reduction's size",
}


#: The stable forms of the usual hand-written loss formulas.
STABLE_LOSS = ("compute log-probabilities with F.log_softmax (or give the logits to "
               "F.cross_entropy, which fuses both), log(sigmoid(x)) with F.logsigmoid and binary "
               "cross-entropy with F.binary_cross_entropy_with_logits, and log(sum(exp(x))) with "
               "torch.logsumexp")

# What went wrong at a loss op that turned finite values into NaN/Inf (op name suffix).
LOSS_OP_ADVICE = {
    "log": "a probability that underflowed to exactly 0 (or 1 - p that rounded to 0) reached log",
    "log2": "a value that underflowed to exactly 0 reached log2",
    "log10": "a value that underflowed to exactly 0 reached log10",
    "exp": "exp overflowed on a large logit",
    "pow": "a power overflowed, or a fractional power met a negative base",
    "div": "a normaliser or count became 0 and was divided by",
    "__truediv__": "a normaliser or count became 0 and was divided by",
    "__rtruediv__": "a value became 0 and was divided by",
    "sqrt": "sqrt met a negative value",
    "reciprocal": "1/x met a 0",
}


def _name(value, fallback: str) -> str:
    """``value`` as text for a sentence, or ``fallback`` when it is missing or empty."""
    text = "" if value is None else str(value).strip()
    return text if text and text != "None" else fallback


def _loss_advice(cul: dict, where: str) -> str:
    op = cul.get("op")
    short = str(op or "").rsplit(".", 1)[-1]
    what = LOSS_OP_ADVICE.get(short)
    head = (f"The loss computation made the loss non-finite at {op}" if op
            else "The loss computation made the loss non-finite")
    head += f" ({where})" if where != "the batch" else ""
    why = f": {what}" if what else ""
    return (f"{head} while every output of the model was finite{why}; {STABLE_LOSS}, instead of "
            "composing log, softmax, sigmoid and exp by hand.")


def advice_for(report: dict) -> list[str]:
    """Sentences for the user, the culprit's first."""
    out: list[str] = []
    checks = {c["name"]: c for c in report.get("checks") or []}
    cul = report.get("culprit") or {}
    where = _where(cul)

    def failed(name):
        c = checks.get(name)
        return c is not None and c["ok"] is False

    module = _name(cul.get("module"), "")
    at_module = f"`{module}`" if module else "an embedding"
    detail = _name(cul.get("detail"), "")
    if failed("collate") or failed("fetch"):
        dl = report.get("data_loading") or {}
        tip = _name(dl.get("advice"), "make every sample of a batch the same structure, shape and dtype")
        out.append(f"The DataLoader could not build the batch ({where}): {tip}.")
    if failed("refetch"):
        out.append("The dataset serves other samples at these indices than the run read: the data "
                   "or the dataset code changed since the run, so this replay shows today's data. "
                   "To replay the run's own batch, rebuild the dataset from the data as it was "
                   "(version the data files, or record a snapshot's path in dataset_kwargs).")
    if failed("labels"):
        what = detail.split(";")[0] if cul.get("input") and detail else _name(
            checks["labels"].get("detail"), "some labels are outside [0, num_classes)")
        out.append(f"Validate labels in the dataset: {what}. Fix the annotation, or reject "
                   "labels outside [0, num_classes) when the dataset is built.")
    if failed("embedding_indices"):
        out.append(f"An index reaching {at_module} is outside its vocabulary ({where}): "
                   "size the embedding for every id the data can produce (an unknown/OOV id needs "
                   "a row too: num_embeddings = len(vocab) + 1), or map unseen values to a "
                   "reserved id.")
    if failed("finite_inputs"):
        out.append(f"Fix the data that produced {where}'s non-finite values (a 0/0 ratio, a log of "
                   "zero, a missing value read as NaN), or impute/drop them; "
                   "assert torch.isfinite(x).all() when the dataset is built.")
    if failed("shapes"):
        out.append("A batch reached the model with the wrong shape"
                   + (f" ({detail})" if detail else "") + ": check "
                   "the data pipeline for dropped or added columns (a per-batch dropna, a ragged "
                   "last batch) or the model's configured sizes.")
    if failed("dtype_device"):
        out.append("Match dtypes and devices" + (f" at `{module}`" if module else "")
                   + (f" ({detail})" if detail else "") + ": cast "
                   "inputs with .to(dtype) / move them with .to(device) before the model, and create "
                   "tensors inside forward with device=x.device, dtype=x.dtype.")
    if failed("captured_state") and "non-finite" in checks["captured_state"]["detail"]:
        out.append("The weights were already non-finite when this step began: the failure started "
                   "earlier; look at the gradient norms before this step, lower the learning rate "
                   "or clip gradients.")
    if failed("finite_forward") and not failed("finite_inputs"):
        if cul.get("module") is None or module == LOSS_COMPUTATION:
            out.append(_loss_advice(cul, where))
        else:
            out.append(f"{f'`{module}`' if module else 'The model'} turns finite inputs into NaN/Inf: look for log, sqrt, "
                       "division or exp inside it, or exploding weights.")
    if failed("finite_backward"):
        op = cul.get("op")
        op = _name(op, "") or None
        tip = OP_ADVICE.get(op or "", f"guard the input of {op} so its backward stays finite"
                            if op else "find the op whose backward is non-finite")
        out.append(f"{op or 'A backward op'}" + (f" in `{module}`" if module else "")
                   + f" produces non-finite gradients from finite ones ({where}): {tip}.")
    if report.get("request") and out:
        out.append(_request_advice(report["request"]))
    rep = report.get("replay") or {}
    if rep.get("type") in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE"):
        out.append("Native code crashed: run the repro under `python -X faulthandler` or gdb; "
                   "check custom C++/CUDA extensions and library versions.")
    elif rep.get("type") == "SIGKILL":
        out.append("The replay was killed, most likely for memory: raise the cap (--memory-mb) "
                   "or replay on a bigger machine.")
    elif rep.get("type") == "Timeout":
        out.append("The step did not finish in time: the stack above shows where it waited "
                   "(a collective waiting for other ranks, a lock, an endless loop); raise --timeout "
                   "if it is only slow.")
    if not report.get("reproduced") and not out:
        out.append("The replay did not reproduce the failure: the step may depend on state the "
                   "capture does not hold (an earlier optimizer update, global variables, "
                   "non-deterministic kernels) or on the device it ran on.")
    return out


def _request_advice(req: dict) -> str:
    """What a service does about a request its model cannot take: refuse it at the edge."""
    field = _name(req.get("field"), "")
    what = f"`{field}`" if field and field != "inputs" else "the input"
    if req.get("token_id") is not None and req.get("vocab_size") is not None:
        rule = f"reject token ids outside [0, {req['vocab_size']}) in {what}"
    elif req.get("value") is not None:
        rule = (f"refuse a {what} of {req['value']:g} (the value that made the output "
                "non-finite) and any other value outside the range the model is meant for")
    elif req.get("shape") is not None:
        rule = f"check the shape and dtype of {what} against what the model takes"
    else:
        rule = f"check {what} (finite values, shape, dtype)"
    return (f"Validate requests at the service's edge: {rule} before calling the model, and "
            "answer such a request with a client error (HTTP 400/422) instead of a server error.")


def _where(cul: dict) -> str:
    s = cul.get("sample_index")
    if s is None:
        return "the batch"
    di = cul.get("dataset_index")
    return f"sample {s}" + (f" (dataset index {di})" if di is not None else "")
