"""The detectors' thresholds (:data:`DEFAULTS`, checked by :func:`resolve_config`) and
the check that an input frame has the columns it needs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import InvalidInputError

#: Thresholds of the detectors (override any of them through ``config``).
DEFAULTS: dict[str, Any] = {
    # exploding_grad: a norm above explode_factor x its median over the previous
    # explode_window logged steps (judged once explode_min_history of them exist) ...
    "explode_factor": 10.0,
    "explode_window": 20,
    "explode_min_history": 5,
    # ... or growing by at least growth_ratio x per logged step for growth_steps
    # consecutive steps.
    "growth_ratio": 1.5,
    "growth_steps": 5,
    # vanishing_grad: a layer's norm below vanish_abs, or below vanish_rel x the largest
    # layer norm of the same step, for vanish_window consecutive logged steps (the whole
    # run when it is shorter, if it has at least vanish_min_steps).
    "vanish_abs": 1e-7,
    "vanish_rel": 1e-4,
    "vanish_window": 50,
    "vanish_min_steps": 10,
    # ... and only when it is still below them for vanish_min_steps logged steps after the
    # first vanish_settle_steps logged steps and after the learning-rate warmup (attention
    # query/key gradients start tiny at initialisation), and does not later grow to
    # vanish_recover x its median over its first vanishing window.
    "vanish_settle_steps": 20,
    "vanish_recover": 10.0,
    # dead_layer: a gradient norm of exactly 0.0 for dead_window consecutive logged steps
    # (the whole run when it is shorter, if it has at least dead_min_steps).
    "dead_window": 20,
    "dead_min_steps": 5,
    # loss_spike: a loss more than spike_mads robust standard deviations (1.4826 x the
    # median absolute step-to-step change / sqrt 2) above its median over the previous spike_window logged steps, and at least
    # spike_min_rise (a fraction) above that median.
    "spike_mads": 6.0,
    "spike_window": 50,
    "spike_min_history": 10,
    "spike_min_rise": 0.5,
    # Which scalars are losses: None means every key whose last '/'-part contains "loss".
    "loss_keys": None,
    # At most this many findings of one kind per rank (the largest are kept).
    "max_findings": 20,
}

MSG_UNKNOWN_KEY = "gradients config: unknown key {key!r}; known keys: {known}"
MSG_BAD_VALUE = "gradients config: {key}={value!r}: expected {expected}"
MSG_BAD_FRAME = "{what}: missing column(s) {missing}; expected the columns of Run.{method}()"

_POSITIVE = ("explode_factor", "growth_ratio", "vanish_abs", "vanish_rel", "spike_mads",
             "vanish_recover")
_INTS = {"explode_window": 2, "explode_min_history": 1, "growth_steps": 2, "vanish_window": 2,
         "vanish_min_steps": 2, "vanish_settle_steps": 0, "dead_window": 2, "dead_min_steps": 1, "spike_window": 3,
         "spike_min_history": 3, "max_findings": 1}


def resolve_config(config: dict | None) -> dict:
    """Merge ``config`` over :data:`DEFAULTS`, checking every key and value.

    Raises
    ------
    InvalidInputError
        An unknown key, or a value of the wrong type or range.
    """
    cfg = dict(DEFAULTS)
    for key, value in (config or {}).items():
        if key not in DEFAULTS:
            raise InvalidInputError(MSG_UNKNOWN_KEY.format(key=key, known=", ".join(DEFAULTS)))
        if key in _INTS:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) \
                    or float(value) != int(value) or int(value) < _INTS[key]:
                raise InvalidInputError(MSG_BAD_VALUE.format(
                    key=key, value=value, expected=f"an integer >= {_INTS[key]}"))
            value = int(value)
        elif key in _POSITIVE or key == "spike_min_rise":
            ok = isinstance(value, (int, float, np.number)) and not isinstance(value, bool) \
                and math.isfinite(float(value))
            low_ok = ok and (float(value) >= 0 if key == "spike_min_rise" else float(value) > 0)
            if not low_ok:
                raise InvalidInputError(MSG_BAD_VALUE.format(
                    key=key, value=value,
                    expected="a finite number >= 0" if key == "spike_min_rise" else "a finite number > 0"))
            value = float(value)
        elif key == "loss_keys":
            if value is not None and (isinstance(value, str) or not all(isinstance(k, str) for k in value)):
                raise InvalidInputError(MSG_BAD_VALUE.format(
                    key=key, value=value, expected="null or a list of scalar keys"))
            value = None if value is None else list(value)
        cfg[key] = value
    if cfg["growth_ratio"] <= 1:
        raise InvalidInputError(MSG_BAD_VALUE.format(key="growth_ratio", value=cfg["growth_ratio"],
                                                     expected="a number > 1"))
    if cfg["explode_factor"] <= 1:
        raise InvalidInputError(MSG_BAD_VALUE.format(key="explode_factor", value=cfg["explode_factor"],
                                                     expected="a number > 1"))
    return cfg


def _check_columns(df, columns, what, method):
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InvalidInputError(MSG_BAD_FRAME.format(what=what, missing=missing, method=method))
