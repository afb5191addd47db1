"""Query parameters, validated: they are strings from strangers (deep links, shared URLs).

Every page reads ``?name=`` through these helpers. :func:`query_int` and
:func:`query_choice` raise :class:`~debugkit.errors.InvalidInputError` with a message that
names the parameter and what was expected; the page decides whether that is an error or
a warning. :func:`query_choices` keeps the known values of a repeated parameter;
:func:`from_query` / :func:`to_query` bind a widget to a parameter. The run itself
(``?run=``) is resolved by :mod:`pages._runs`, a share link by :mod:`pages._share`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import streamlit as st

from debugkit.errors import InvalidInputError

MSG_NOT_INT = "?{name}={raw!r}: expected {expected}"
MSG_OUT_OF_RANGE = "?{name}={value}: expected a number from {low} to {high}"
MAX_DIGITS = 14


class NotAChoiceError(InvalidInputError):
    """``?name=`` is well-formed but names nothing this page has (raised by
    :func:`query_choice`, so a page can tell it from a malformed value)."""


def query_text(name: str) -> str | None:
    """``?name=`` stripped, or None when absent or empty."""
    raw = st.query_params.get(name)
    if raw in (None, ""):
        return None
    return str(raw).strip()


def query_int(name: str, *, low: int | None = None, high: int | None = None,
              signed: bool = True, expected: str = "a whole number") -> int | None:
    """``?name=`` as an int; None when absent or empty.

    Parameters
    ----------
    low, high : int, optional
        The allowed range (both or neither).
    signed : bool
        Whether a leading ``-`` is accepted.
    expected : str
        What the message says was expected of a value that is not a whole number.

    Raises
    ------
    InvalidInputError
        Not a whole number (at most 14 digits), or outside ``[low, high]``.
    """
    raw = st.query_params.get(name)
    if raw in (None, ""):
        return None
    text = str(raw).strip()
    digits = text.lstrip("-") if signed else text
    if not digits.isdigit() or len(text) > MAX_DIGITS:
        raise InvalidInputError(MSG_NOT_INT.format(name=name, raw=str(raw)[:40], expected=expected))
    value = int(text)
    if low is not None and high is not None and not low <= value <= high:
        raise InvalidInputError(MSG_OUT_OF_RANGE.format(name=name, value=value, low=low, high=high))
    return value


def query_choice(name: str, choices: Collection[str], message: Callable[[str], str], *,
                 validate: Callable[[str], object] | None = None) -> str | None:
    """``?name=`` when it is one of ``choices``; None when absent or empty.

    Parameters
    ----------
    message : callable
        ``message(value)``: the text of the error for a value not in ``choices``.
    validate : callable, optional
        Checks the value's form first (e.g. ``validate_run_id``); its errors propagate.

    Raises
    ------
    NotAChoiceError
        The value is not one of ``choices``.
    """
    raw = st.query_params.get(name)
    if not raw:
        return None
    if validate is not None:
        validate(raw)
    if raw not in choices:
        raise NotAChoiceError(message(raw))
    return raw


def query_choices(name: str, choices: Collection[str]) -> list[str]:
    """Every ``?name=`` value (a repeated parameter) that is one of ``choices``, in URL
    order; the others are dropped."""
    if name not in st.query_params:
        return []
    return [v for v in st.query_params.get_all(name) if v in choices]


def from_query(key: str, validate: Callable[[str], object]) -> None:
    """Seed widget ``key`` from ``?key=`` once per distinct URL value (``validate``
    returns the value to use, or None to ignore it)."""
    raw = st.query_params.get(key)
    seen = f"_url_{key}"
    if raw is None or st.session_state.get(seen) == raw:
        return
    st.session_state[seen] = raw
    value = validate(str(raw))
    if value is not None:
        st.session_state[key] = value


def to_query(key: str, value: str, default: str) -> None:
    """Mirror a widget's value in the URL (removed when it is the default)."""
    if value == default:
        if key in st.query_params:
            del st.query_params[key]
    elif st.query_params.get(key) != value:
        st.query_params[key] = value
    st.session_state[f"_url_{key}"] = st.query_params.get(key)
