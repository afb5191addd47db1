"""The original failure and what the replay did: their type, message and step, and whether
the replay reproduced the failure (and the same error).
"""

from __future__ import annotations

from .text import _num, normalize_message

NONFINITE_TYPE = "NonFiniteError"
#: The ``kind`` of a failing request's capture (``debugkit.serve``).
REQUEST_KIND = "request"
TIMEOUT_TYPE = "Timeout"
EXITED_TYPE = "ChildExited"


def is_request(record: dict) -> bool:
    """Whether a capture is a failing inference request (``debugkit.serve``), not a step."""
    return record.get("kind") == REQUEST_KIND


def original_of(record: dict) -> dict:
    etype = record.get("error_type")
    if etype is None and (record.get("kind") == "nonfinite"
                          or (is_request(record) and record.get("outcome") == "nonfinite")):
        etype = NONFINITE_TYPE
    out = {"type": etype, "message": record.get("message"), "step": record.get("step")}
    if is_request(record):
        req = record.get("request")
        out["request"] = req if isinstance(req, int) else record.get("step")
        out["outcome"] = record.get("outcome")
    return out


def nonfinite_message(loss: float | None, loss_finite: bool | None, grads: list[str]) -> str:
    """The Recorder's wording for a non-finite step (without its ``step N:`` prefix)."""
    parts = []
    if loss_finite is False:
        parts.append(f"loss is {_num(loss)}")
    if grads:
        parts.append(f"gradient norm of {grads[0]!r} is non-finite"
                     + (f" ({len(grads)} layers in all)" if len(grads) > 1 else ""))
    return "; ".join(parts)


def replay_of(raw: dict | None, crash: dict | None = None) -> dict | None:
    """The replay's own outcome: its error, a non-finite result, a crash, or None."""
    if crash is not None:
        return {"type": crash["type"], "message": crash["message"], "seconds": crash.get("seconds")}
    outcome = (raw or {}).get("outcome")
    if not outcome:
        return None
    err = outcome.get("error")
    if err:
        return {"type": err["type"], "message": err["message"], "seconds": outcome.get("seconds")}
    outs = outcome.get("outputs_nonfinite") or []
    if outs:  # a replayed request whose output holds NaN/Inf
        o = outs[0]
        return {"type": NONFINITE_TYPE,
                "message": f"{o['path']} holds {o['kind']} ({o['count']} of {o['total']} values)"
                           + (f"; {len(outs) - 1} more output(s)" if len(outs) > 1 else ""),
                "seconds": outcome.get("seconds")}
    grads = outcome.get("grads_nonfinite") or []
    if outcome.get("loss_finite") is False or grads:
        return {"type": NONFINITE_TYPE,
                "message": nonfinite_message(outcome.get("loss"), outcome.get("loss_finite"), grads),
                "seconds": outcome.get("seconds")}
    return None


def judge(record: dict, original: dict, replay: dict | None, raw: dict | None) -> tuple[bool, bool]:
    """``(reproduced, same_error)``.

    Reproduced: the replay raised the same exception type (a ``nonfinite`` capture:
    produced a non-finite loss or gradient again). Same error: the message matches too
    (a ``nonfinite`` capture: the loss is finite or not as before, and the same
    parameters have non-finite gradients).
    """
    if replay is None or original.get("type") is None:
        return False, False
    reproduced = replay["type"] == original["type"]
    if not reproduced:
        return False, False
    if original["type"] == NONFINITE_TYPE and is_request(record):
        return True, True  # the output is non-finite again: the same failure
    if original["type"] == NONFINITE_TYPE and record.get("kind") == "nonfinite":
        nf = record.get("nonfinite") or {}
        outcome = (raw or {}).get("outcome") or {}
        layers = [x for x in nf.get("layers") or [] if x != "__total__"]
        grads = outcome.get("grads_nonfinite") or []
        same_loss = nf.get("loss_finite") is None or bool(nf.get("loss_finite")) == bool(outcome.get("loss_finite"))
        same_layers = (set(layers) == set(grads)) if layers else bool(grads) == bool(nf.get("layers"))
        return True, bool(same_loss and same_layers)
    return True, normalize_message(replay["message"]) == normalize_message(original["message"])
