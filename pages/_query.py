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


#: What a page shows for a view parameter it cannot use (the widget keeps its default).
MSG_BAD_VIEW = "?{name}={raw!r} is not {expected}: showing the default instead."
#: ... and for values of a repeated parameter, which are left out.
MSG_BAD_VALUES = "?{name}={raw!r} is not {expected}: left out."


def _warn(name: str, raw: str, expected: str, template: str = MSG_BAD_VIEW) -> None:
    from pages._ui import md

    st.warning(md(template.format(name=name, raw=str(raw)[:60], expected=expected)),
               icon=":material/link_off:")


def from_query(key: str, validate: Callable[[str], object], *, name: str | None = None,
               expected: str | None = None) -> None:
    """Seed widget ``key`` from ``?name=`` (``name`` defaults to ``key``) once per distinct
    URL value. ``validate`` returns the value to use, or None to refuse it: a refused value
    is a warning that says what was ``expected`` (when given) and the widget keeps its
    default."""
    name = name or key
    raw = st.query_params.get(name)
    seen = f"_url_{name}"
    if raw is None or st.session_state.get(seen) == raw:
        return
    st.session_state[seen] = raw
    value = validate(str(raw))
    if value is not None:
        st.session_state[key] = value
    elif expected:
        _warn(name, str(raw), expected)


def to_query(key: str, value: str, default: str, *, name: str | None = None) -> None:
    """Mirror a widget's value in the URL as ``?name=`` (removed when it is the default)."""
    name = name or key
    if value == default:
        if name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get(name) != value:
        st.query_params[name] = value
    st.session_state[f"_url_{name}"] = st.query_params.get(name)


def list_from_query(key: str, choices: Collection[str], *, name: str | None = None,
                    expected: str = "one of the choices") -> None:
    """Seed multiselect ``key`` from a repeated ``?name=`` once per distinct URL value:
    the known values in URL order; unknown ones are named in a warning and dropped (none
    known: the widget keeps its default). An empty ``?name=`` is an empty selection."""
    name = name or key
    if name not in st.query_params:
        return
    raw = st.query_params.get_all(name)
    seen = f"_url_{name}"
    if st.session_state.get(seen) == raw:
        return
    st.session_state[seen] = raw
    wanted = [v for v in raw if v]
    known = list(dict.fromkeys(v for v in wanted if v in choices))
    bad = [v for v in wanted if v not in choices]
    if bad:
        _warn(name, ", ".join(bad), expected, MSG_BAD_VALUES if known else MSG_BAD_VIEW)
    if known or not wanted:
        st.session_state[key] = known


def list_to_query(key: str, values: list[str], default: list[str], *, name: str | None = None) -> None:
    """Mirror a multiselect in the URL as a repeated ``?name=`` (removed at the default;
    an empty selection that is not the default as ``?name=``)."""
    name = name or key
    values = list(values)
    if values == list(default):
        if name in st.query_params:
            del st.query_params[name]
    elif st.query_params.get_all(name) != (values or [""]):
        st.query_params[name] = values or [""]
    st.session_state[f"_url_{name}"] = st.query_params.get_all(name) if name in st.query_params else None


def flag(text: str) -> bool | None:
    """``"1"`` / ``"0"`` as a bool (a toggle's URL value); None for anything else."""
    return {"1": True, "0": False}.get(text)


def number_in(low: float, high: float, *, step: float | None = None, whole: bool = False):
    """A validator for :func:`from_query`: the value as a number in ``[low, high]`` (rounded
    to ``step``; a whole number when ``whole``), or None."""
    def parse(text: str):
        try:
            v = float(text)
        except ValueError:
            return None
        if v != v or not low <= v <= high:
            return None
        if whole:
            return int(v) if v == int(v) else None
        return round(round(v / step) * step, 6) if step else v
    return parse


def tabs(labels: dict[str, str], key: str, *, name: str = "tab", default: str | None = None,
         run_path: str | None = None):
    """``st.tabs`` whose open tab lives in the URL as ``?name=<slug>`` (the keys of
    ``labels``; the default tab: no parameter). A link with another slug is a warning and
    opens the default tab. ``default`` (a slug) may depend on the run: the tabs go back to
    it when the page shows another ``run_path`` than last time.

    Returns the tab containers in the order of ``labels``.
    """
    slugs = list(labels)
    default = default if default in labels else slugs[0]
    mark = f"_{key}_for"
    if key not in st.session_state or st.session_state.get(mark) != run_path:
        st.session_state[mark] = run_path
        st.session_state[key] = labels[default]
        st.session_state.pop(f"_url_{name}", None)  # the URL's tab applies to this run too
    from_query(key, lambda v: labels.get(v), name=name,
               expected="one of " + ", ".join(repr(s) for s in slugs))
    if st.session_state.get(key) not in labels.values():
        st.session_state[key] = labels[default]
    out = st.tabs(list(labels.values()), key=key, on_change="rerun")
    open_label = st.session_state.get(key) or labels[default]
    slug = next((s for s, lab in labels.items() if lab == open_label), default)
    to_query(key, slug, default, name=name)
    return out


def expander(label: str, key: str, *, name: str, default: bool = False, run_path: str | None = None,
             **kwargs):
    """``st.expander`` whose content the page builds only while it is open (a click on it
    reruns the page; ``.open`` says whether to build it), its state in the URL as
    ``?name=1`` / ``?name=0`` (no parameter at ``default``). Charts put in one are not sent,
    and not drawn by the browser, before the page's first chart (issue 35 item 9).
    ``default`` may depend on the run and the link (open when the link names what the
    expander shows): the expander goes back to it when the page shows another ``run_path``.

    Returns the expander; ``.open`` is a bool.
    """
    mark = f"_{key}_for"
    if key not in st.session_state or st.session_state.get(mark) != run_path:
        st.session_state[mark] = run_path
        st.session_state[key] = default
        st.session_state.pop(f"_url_{name}", None)  # the URL's state applies to this run too
    from_query(key, flag, name=name, expected="0 or 1")
    box = st.expander(label, key=key, on_change="rerun", **kwargs)
    to_query(key, "1" if box.open else "0", "1" if default else "0", name=name)
    return box
