"""What a replayed request's culprit is, in a service's words: the input field, the
token id, the shape.

A request capture (``debugkit.serve``, ``kind: "request"``) holds the inputs the model
was called with (its ``call``): a dict of tensors (``kwargs``: ``model(**inputs)``), a
list of them (``args``: ``model(*inputs)``), one tensor (``single``: ``model(inputs)``)
or both (``args_kwargs``: ``{"args": [...], "kwargs": {...}}``). The replay's checks name the
culprit as a path into those inputs (``batch['input_ids']``) with a sample and a module;
:func:`request_section` turns that into the ``request`` part of the report:

``{"request", "signature", "call", "outcome", "field", "token_id", "position",
"vocab_size", "shape", "dtype", "value", "detail"}``

``field`` is the keyword (``input_ids``), ``args[i]`` or ``inputs``; ``token_id`` and
``position`` are set when an out-of-range index (an embedding's) is the culprit; ``shape``
and ``dtype`` are the culprit input's, or the shape a module refused; ``value`` is a
one-element input that reached the op which turned finite values into NaN/Inf (a
temperature of 0). Pure functions over
the report's dicts (no torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from .loading import parse_path


def field_of(input_path: str | None, call: str | None) -> str | None:
    """The request's input a batch path names: ``batch['input_ids']`` -> ``input_ids``,
    ``batch[1]`` (positional call) -> ``args[1]``, ``batch`` -> ``inputs`` (one tensor),
    ``batch['kwargs']['mask']`` (``args_kwargs``) -> ``mask``; deeper parts stay as an
    index (``past['keys']``)."""
    if not input_path:
        return None
    try:
        tokens = parse_path(input_path)
    except InvalidInputError:
        return None
    if not tokens:
        return "inputs"
    if call == "args_kwargs" and len(tokens) >= 2 and tokens[0] in ("args", "kwargs"):
        tokens = tokens[1:]  # model(*inputs["args"], **inputs["kwargs"])
    head, rest = tokens[0], tokens[1:]
    name = f"args[{head}]" if isinstance(head, int) or call == "args" else str(head)
    return name + "".join(f"[{t!r}]" if isinstance(t, str) else f"[{int(t)}]" for t in rest)


def _phrase(field: str | None) -> str:
    if field is None:
        return "the request"
    if field == "inputs":
        return "the input"
    if field.startswith("args["):
        return f"argument {field[5:].split(']')[0]}"
    return f"input field `{field}`"


def _check(report: dict, name: str) -> dict:
    return next((c for c in report.get("checks") or [] if c["name"] == name), {})


def _embedding(raw: dict | None, input_path: str | None) -> dict | None:
    """The out-of-range embedding finding about ``input_path`` (else the first one)."""
    found = (((raw or {}).get("diagnosis") or {}).get("embeddings")) or []
    return next((e for e in found if e.get("path") == input_path), found[0] if found else None)


def _nonfinite_op(raw: dict | None) -> dict | None:
    return ((raw or {}).get("diagnosis") or {}).get("nonfinite_op")


def _shape_finding(raw: dict | None) -> dict | None:
    found = (((raw or {}).get("diagnosis") or {}).get("shape_findings")) or []
    return found[0] if found else None


def request_section(record: dict, raw: dict | None, report: dict,
                    cross_check: dict | None = None) -> dict[str, Any]:
    """The ``request`` part of a replay report of a request capture (module docstring)."""
    call = (raw or {}).get("call") or record.get("call")
    req = record.get("request")
    out: dict[str, Any] = {
        "request": req if isinstance(req, int) else record.get("step"),
        "signature": record.get("signature"), "call": call, "outcome": record.get("outcome"),
        "field": None, "token_id": None, "position": None, "vocab_size": None,
        "shape": None, "dtype": None, "value": None, "detail": None}
    culprit = report.get("culprit") or {}
    if cross_check is not None and str(culprit.get("detail") or "").endswith("(found by the CPU cross-check)"):
        theirs = cross_check.get("request") or {}
        out.update({k: theirs.get(k) for k in ("field", "token_id", "position", "vocab_size",
                                                "shape", "dtype")})
        out["detail"] = (theirs.get("detail") or "") + " (found by the CPU cross-check)" \
            if theirs.get("detail") else None
        return out
    path = culprit.get("input")
    out["field"] = field_of(path, call)
    inputs = {i["path"]: i for i in (raw or {}).get("request_inputs") or []}
    if path in inputs:
        out["shape"], out["dtype"] = inputs[path]["shape"], inputs[path]["dtype"]
    what = _phrase(out["field"])
    module = culprit.get("module")
    at = f" of `{module}`" if module else ""
    if _check(report, "embedding_indices").get("ok") is False and (e := _embedding(raw, path)):
        s = (e.get("samples") or [{}])[0]
        vals, pos = s.get("values") or [], s.get("positions") or []
        out["token_id"] = vals[0] if vals else e.get("max")
        out["position"] = pos[0] if pos else e.get("input_position")
        out["vocab_size"] = e.get("num_embeddings")
        where = f" at position {out['position']}" if out["position"] is not None else ""
        row = f" of row {s['sample']}" if s.get("sample") not in (None, 0) else ""
        out["detail"] = (f"{what} holds token id {out['token_id']}{where}{row}, outside the "
                         f"vocabulary [0, {out['vocab_size']}){at}")
    elif _check(report, "shapes").get("ok") is False:
        f = _shape_finding(raw)
        if f is not None and out["shape"] is None:
            out["shape"] = f.get("actual")
        expected = (f or {}).get("expected")
        out["detail"] = (f"{what} has shape {out['shape']}" + (f"; `{f['module']}` expects {expected}"
                                                                if f and expected else "")
                         if out["shape"] is not None else culprit.get("detail"))
    elif _check(report, "finite_forward").get("ok") is False and (op := _nonfinite_op(raw)):
        # every module saw finite inputs: the op that made NaN/Inf and the request's operand
        o = next((x for x in op.get("operands") or []), None)
        site = op.get("at") or {}
        where = (f" at {Path(site['file']).name}:{site['line']} (`{site['code']}`)"
                 if site.get("file") else "")
        in_module = f" in `{op['module']}`" if op.get("module") else ""
        if o is not None:
            out["field"] = field_of(o["path"], call)
            out["shape"] = o.get("shape")
            if o["path"] in inputs:
                out["dtype"] = inputs[o["path"]]["dtype"]
            out["value"] = o.get("value")
            val = f" = {o['value']:g}" if o.get("value") is not None else ""
            out["detail"] = (f"{_phrase(out['field'])}{val} reaches {op['op']}{in_module}{where}, "
                             f"which turns finite values into {op['kind']}")
        else:
            out["detail"] = (f"{op['op']}{in_module}{where} turns finite values into {op['kind']} "
                             "(no request input among its operands)")
    elif _check(report, "finite_inputs").get("ok") is False:
        out["detail"] = f"{what} holds NaN/Inf" + (f" (shape {out['shape']})" if out["shape"] else "")
    elif _check(report, "dtype_device").get("ok") is False:
        out["detail"] = f"{what}: {culprit.get('detail')}" if out["field"] else culprit.get("detail")
    else:
        out["detail"] = culprit.get("detail")
    return out
