"""Audit targets: how the Audit page rebuilds a run's model and data to compute an audit.

A training script that wants its models auditable from the page writes
``<run>/audit_targets.json``::

    {"targets": [{"name": "gbm", "title": "Gradient boosting",
                  "loader": "examples.credit:audit_target", "kwargs": {"model": "gbm"}}]}

``loader(run_dir, **kwargs)`` returns the arguments of ``audit_model``: a dict with
``model, X, y, sensitive, name`` and optionally ``positive_label, predict, explainer,
background, group_bins`` and ``candidates`` (attributes the page offers).

A run file comes from whoever made (or uploaded) the run, so it never chooses code: a
loader is called only when its exact ``module:function`` is in the operator's list,
``$DEBUGKIT_AUDIT_LOADERS`` (comma-separated; default: the bundled sample's
``examples.credit:audit_target``; empty: none). The run only picks one of those and
passes plain keyword arguments, and numbers (its own and those a loader reads from the
run, such as a model's layer sizes) stay inside bounds the loader declares and the
operator may tighten or widen (``$DEBUGKIT_AUDIT_BOUNDS``, :func:`check_bounds`): an
upload does not size the model the server builds. A target is never loaded for a visitor with a share
link, and the page computes audits in a separate process under a time and memory limit
(:mod:`debugkit.audit.worker`).
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

from .._fsutil import atomic_write_json
from ..errors import AuditError, DebugkitError, InvalidInputError
from ..location import as_path
from ..runschema import read_run_json

TARGETS_FILE = "audit_targets.json"
_SPEC = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MSG_SPEC = "audit target {name!r}: loader {spec!r} is not of the form 'module:function'"
MSG_NOT_ALLOWED = ("audit target {name!r}: loader {spec!r} is not one this server's operator "
                   "allows (allowed: {allowed}; the operator lists loaders in DEBUGKIT_AUDIT_LOADERS)")
#: The loaders allowed when ``$DEBUGKIT_AUDIT_LOADERS`` is unset: the bundled sample's.
DEFAULT_LOADERS = ("examples.credit:audit_target",)
MSG_BAD_FILE = "{path}: {detail}"
MSG_NO_TARGET = "{run}: no audit target {name!r} (known: {known})"
REQUIRED = ("model", "X", "y", "sensitive", "name")
MSG_OUT_OF_BOUNDS = ("{what}: {name}={value!r} is outside the bounds this server allows "
                     "({lo:g}..{hi:g}; the operator sets them in DEBUGKIT_AUDIT_BOUNDS)")
MSG_BAD_BOUNDS = ("DEBUGKIT_AUDIT_BOUNDS={value!r}: expected comma-separated name=LOW..HIGH "
                  "(numbers, LOW <= HIGH), e.g. hidden=1..1024,n_features=1..10000")
_BOUND = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(-?[0-9.eE+-]+)\.\.(-?[0-9.eE+-]+)$")


def operator_bounds() -> dict[str, tuple[float, float]]:
    """The operator's bounds on loader arguments, ``$DEBUGKIT_AUDIT_BOUNDS``
    (``name=LOW..HIGH,...``); they replace a loader's own bound of the same name."""
    env = os.environ.get("DEBUGKIT_AUDIT_BOUNDS", "")
    out: dict[str, tuple[float, float]] = {}
    for part in (p.strip() for p in env.split(",")):
        if not part:
            continue
        m = _BOUND.match(part)
        try:
            lo, hi = float(m.group(2)), float(m.group(3))  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            raise AuditError(MSG_BAD_BOUNDS.format(value=env[:200])) from None
        if not lo <= hi:  # NaN too
            raise AuditError(MSG_BAD_BOUNDS.format(value=env[:200]))
        out[m.group(1)] = (lo, hi)
    return out


def check_bounds(values: dict, bounds: dict[str, tuple[float, float]] | None = None, *,
                 what: str) -> dict:
    """``values`` itself when every bounded name holds a number inside its bounds.

    ``bounds`` are the loader's own (``{"hidden": (1, 1024)}``); the operator's
    (:func:`operator_bounds`) replace them name by name and add to them. A loader calls
    this on whatever it reads from a run before it builds anything from it;
    :func:`load_target` calls it on a target's ``kwargs``.

    Raises
    ------
    InvalidInputError
        A bounded value that is not a finite number, or lies outside its bounds.
    """
    allowed = {**(bounds or {}), **operator_bounds()}
    if not isinstance(values, dict):
        raise InvalidInputError(f"{what}: expected an object of named values, got {type(values).__name__}")
    for name, (lo, hi) in allowed.items():
        if name not in values:
            continue
        v = values[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise InvalidInputError(MSG_OUT_OF_BOUNDS.format(what=what, name=name, value=v, lo=lo, hi=hi))
    return values


def allowed_loaders() -> list[str]:
    """The operator's loaders: exact ``module:function`` specs (``$DEBUGKIT_AUDIT_LOADERS``)."""
    env = os.environ.get("DEBUGKIT_AUDIT_LOADERS")
    if env is None:
        return list(DEFAULT_LOADERS)
    return [p.strip() for p in env.split(",") if _SPEC.match(p.strip())]


def _allowed(spec: str) -> bool:
    return spec in allowed_loaders()


def write_targets(run_dir, targets: list[dict]) -> Path:
    """Write ``audit_targets.json`` (checked as :func:`read_targets` would)."""
    path = as_path(run_dir) / TARGETS_FILE
    doc = {"targets": [dict(t) for t in targets]}
    _validate(doc, path)
    atomic_write_json(path, doc)
    return path


def read_targets(run_dir) -> list[dict]:
    """The run's audit targets (``[]`` when it declares none).

    Each is ``{"name", "title", "loader", "kwargs", "allowed"}``; ``allowed`` says
    whether this server may call its loader.
    """
    path = as_path(run_dir) / TARGETS_FILE
    if not path.is_file():
        return []
    try:
        doc = read_run_json(path, TARGETS_FILE, max_bytes=1 << 20)
    except (OSError, ValueError) as exc:
        raise AuditError(MSG_BAD_FILE.format(path=path, detail=f"unreadable ({exc})")) from exc
    targets = _validate(doc, path)
    for t in targets:
        t["allowed"] = _allowed(t["loader"])
    return targets


def _validate(doc, path) -> list[dict]:
    if not isinstance(doc, dict) or not isinstance(doc.get("targets"), list):
        raise AuditError(MSG_BAD_FILE.format(path=path, detail="expected {\"targets\": [...]}"))
    out = []
    for t in doc["targets"]:
        if not isinstance(t, dict):
            raise AuditError(MSG_BAD_FILE.format(path=path, detail="each target must be an object"))
        name = t.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise AuditError(MSG_BAD_FILE.format(path=path, detail=f"target name {name!r} is not valid"))
        spec = t.get("loader")
        if not isinstance(spec, str) or not _SPEC.match(spec):
            raise AuditError(MSG_SPEC.format(name=name, spec=spec))
        kwargs = t.get("kwargs") or {}
        if not isinstance(kwargs, dict) or not all(
                isinstance(v, (str, int, float, bool)) or v is None for v in kwargs.values()):
            raise AuditError(MSG_BAD_FILE.format(path=path, detail=f"target {name!r}: kwargs must map "
                                                 "names to plain values"))
        out.append({"name": name, "title": str(t.get("title") or name)[:200], "loader": spec,
                    "kwargs": dict(kwargs)})
    return out


def load_target(run_dir, name: str) -> dict[str, Any]:
    """Call a target's loader; returns the ``audit_model`` arguments it gives.

    Raises
    ------
    InvalidInputError
        The loader is not in the operator's list (``$DEBUGKIT_AUDIT_LOADERS``).
    AuditError
        No such target, or the loader failed or returned something unusable.
    """
    targets = {t["name"]: t for t in read_targets(run_dir)}
    if name not in targets:
        raise AuditError(MSG_NO_TARGET.format(run=run_dir, name=name, known=", ".join(targets) or "none"))
    t = targets[name]
    module, func = t["loader"].split(":", 1)
    if not _allowed(t["loader"]):
        raise InvalidInputError(MSG_NOT_ALLOWED.format(name=name, spec=t["loader"],
                                                       allowed=", ".join(allowed_loaders()) or "none"))
    kwargs = check_bounds(t["kwargs"], what=f"{TARGETS_FILE}: target {name!r} kwargs")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise AuditError(f"audit target {name!r}: cannot import {t['loader']} ({exc})") from exc
    try:
        args = fn(as_path(run_dir), **kwargs)
    except (DebugkitError, MemoryError):
        raise  # its own refusal (check_bounds, a bad run file), or the worker's memory cap
    except Exception as exc:  # noqa: BLE001 - the loader is user code; report what it raised
        raise AuditError(f"audit target {name!r}: {t['loader']} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(args, dict) or any(k not in args for k in REQUIRED):
        raise AuditError(f"audit target {name!r}: {t['loader']} must return a dict with "
                         f"{', '.join(REQUIRED)}")
    return args
