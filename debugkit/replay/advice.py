"""What to do about a replay's findings: one sentence per failing check.

Pure functions over the report (:mod:`debugkit.replay.report`).
"""

from __future__ import annotations

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


def advice_for(report: dict) -> list[str]:
    """Sentences for the user, the culprit's first."""
    out: list[str] = []
    checks = {c["name"]: c for c in report.get("checks") or []}
    cul = report.get("culprit") or {}
    where = _where(cul)

    def failed(name):
        c = checks.get(name)
        return c is not None and c["ok"] is False

    if failed("labels"):
        what = (cul.get("detail") or "").split(";")[0] if cul.get("input") else checks["labels"]["detail"]
        out.append(f"Validate labels in the dataset: {what}. Fix the annotation, or reject "
                   "labels outside [0, num_classes) when the dataset is built.")
    if failed("embedding_indices"):
        out.append(f"An index reaching `{cul.get('module')}` is outside its vocabulary ({where}): "
                   "size the embedding for every id the data can produce (an unknown/OOV id needs "
                   "a row too: num_embeddings = len(vocab) + 1), or map unseen values to a "
                   "reserved id.")
    if failed("finite_inputs"):
        out.append(f"Fix the data that produced {where}'s non-finite values (a 0/0 ratio, a log of "
                   "zero, a missing value read as NaN), or impute/drop them; "
                   "assert torch.isfinite(x).all() when the dataset is built.")
    if failed("shapes"):
        out.append(f"A batch reached the model with the wrong shape ({cul.get('detail')}): check "
                   "the data pipeline for dropped or added columns (a per-batch dropna, a ragged "
                   "last batch) or the model's configured sizes.")
    if failed("dtype_device"):
        out.append(f"Match dtypes and devices at `{cul.get('module')}` ({cul.get('detail')}): cast "
                   "inputs with .to(dtype) / move them with .to(device) before the model, and create "
                   "tensors inside forward with device=x.device, dtype=x.dtype.")
    if failed("captured_state") and "non-finite" in checks["captured_state"]["detail"]:
        out.append("The weights were already non-finite when this step began: the failure started "
                   "earlier; look at the gradient norms before this step, lower the learning rate "
                   "or clip gradients.")
    if failed("finite_forward") and not failed("finite_inputs"):
        out.append(f"`{cul.get('module')}` turns finite inputs into NaN/Inf: look for log, sqrt, "
                   "division or exp inside it, or exploding weights.")
    if failed("finite_backward"):
        op = cul.get("op")
        tip = OP_ADVICE.get(op or "", f"guard the input of {op} so its backward stays finite"
                            if op else "find the op whose backward is non-finite")
        out.append(f"{op or 'A backward op'}" + (f" in `{cul['module']}`" if cul.get("module") else "")
                   + f" produces non-finite gradients from finite ones ({where}): {tip}.")
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


def _where(cul: dict) -> str:
    s = cul.get("sample_index")
    if s is None:
        return "the batch"
    di = cul.get("dataset_index")
    return f"sample {s}" + (f" (dataset index {di})" if di is not None else "")
