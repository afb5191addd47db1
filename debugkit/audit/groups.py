"""Sensitive attributes: where their values come from and how rows fall into groups.

A continuous attribute (numeric, more than :data:`MAX_CATEGORIES` distinct values) is
binned: an attribute named like an age (``age``, ``age_in_years``, ``applicant_age``)
into :data:`AGE_BINS` (``<25, 25-34, 35-44, 45-59, 60+``), any other into quartiles of
its values, unless ``group_bins`` (or :class:`Attribute` ``bins``) says otherwise. A
categorical attribute is used as it is, or derived (``sex`` from a
``personal_status_and_sex`` column whose values read ``"<sex> : <status>"``). Missing
values form the group ``"missing"``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidInputError

# Cut points (lower edges of every bin but the first) of the default age groups. 25 is
# the split the German credit literature uses (Kamiran & Calders 2009); the others
# follow the usual decades of working life, with 60+ for applicants near retirement.
AGE_BINS: tuple[float, ...] = (25, 35, 45, 60)
MAX_CATEGORIES = 10
MISSING = "missing"

MSG_NO_SOURCE = ("sensitive attribute {name!r}: not a column of X ({columns}) and nothing "
                 "to derive it from; pass its values: sensitive={{{name!r}: values}}")
MSG_BAD_LENGTH = "sensitive attribute {name!r}: {got} values for {n} rows of X"
MSG_BAD_BINS = "group_bins[{name!r}]={value!r}: {expected}"
MSG_BINS_UNKNOWN = "group_bins: {names} not among the sensitive attributes ({known})"
MSG_NOT_CONTINUOUS = "group_bins[{name!r}]: the attribute is not numeric, so it cannot be binned"
MSG_DERIVE = ("sensitive attribute {name!r}: cannot derive sex from {value!r} in column "
              "{column!r}; expected '<sex> : <status>' such as 'female : divorced/separated/married'")
MSG_BAD_SPEC = ("sensitive attribute {name!r}: expected a column name, an array of values or "
                "debugkit.audit.Attribute(...), got {kind}")
MSG_NO_ATTRS = "sensitive: no sensitive attribute given; name at least one (e.g. ['age_in_years'])"
MSG_BAD_NAME = "sensitive attribute name {name!r}: expected a non-empty string of at most 100 characters"

_AGE = re.compile(r"(^|[^a-z])age([^a-z]|$)", re.IGNORECASE)


@dataclass
class Attribute:
    """How to get one sensitive attribute, when a column name is not enough.

    Parameters
    ----------
    values : array-like, optional
        The attribute's raw value per row (default: the column ``column`` of X).
    column : str, optional
        A column of X holding it.
    derive : {"sex"}, optional
        Derive the attribute from the values: ``"sex"`` takes the part before ``:``
        of values such as ``"male : single"``.
    bins : list of float or int, optional
        Cut points for a continuous attribute, or a number of quantile bins.
    reference : str, optional
        The reference group (default: the largest).
    feature : str, optional
        The model feature this attribute is (or is derived from), when its name
        differs; used to flag the model's use of it.
    """

    values: Any = None
    column: str | None = None
    derive: str | None = None
    bins: Sequence[float] | int | None = None
    reference: str | None = None
    feature: str | None = None


@dataclass
class SensitiveAttribute:
    """A resolved sensitive attribute.

    Attributes
    ----------
    name : str
    raw : ndarray
        Raw values per row (float for numeric attributes, else object).
    groups : ndarray of str
        The group label of every row.
    order : list of str
        Group labels in display order (bins in increasing order; categories sorted).
    binning : dict or None
        ``{"rule", "edges", "labels"}`` for a binned attribute.
    source_features : list of str
        Model features that are this attribute (or that it is derived from).
    derived_from : str or None
        The column a derived attribute comes from.
    reference : str or None
        A requested reference group.
    """

    name: str
    raw: np.ndarray
    groups: np.ndarray
    order: list[str]
    binning: dict | None = None
    source_features: list[str] = field(default_factory=list)
    derived_from: str | None = None
    reference: str | None = None

    @property
    def numeric(self) -> bool:
        return self.raw.dtype.kind in "fiu"

    def describe(self) -> dict:
        """JSON-able description stored with the audit."""
        return {"binning": self.binning, "source_features": list(self.source_features),
                "derived_from": self.derived_from, "order": list(self.order)}


def is_age_name(name: str) -> bool:
    """Whether an attribute's name reads as an age (``age``, ``age_in_years``...)."""
    return bool(_AGE.search(name.replace("-", "_")))


def derive_sex(values, column: str = "personal_status_and_sex") -> np.ndarray:
    """``"male : single" -> "male"``: the part before ``:`` of each value, lower-cased.

    Raises
    ------
    InvalidInputError
        A value has no ``:`` (it is not of the ``"<sex> : <status>"`` form).
    """
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(_as_object(values)):
        if _is_missing(v):
            out[i] = None
            continue
        text = str(v)
        head, sep, _ = text.partition(":")
        if not sep or not head.strip():
            raise InvalidInputError(MSG_DERIVE.format(name="sex", value=text[:80], column=column))
        out[i] = head.strip().lower()
    return out


def bin_labels(edges: Sequence[float], integer: bool) -> list[str]:
    """Labels of the bins that ``edges`` (increasing cut points) make.

    Integer-valued data: ``(25, 35)`` gives ``["<25", "25-34", "35+"]``. Other data:
    ``["<2.5", "[2.5, 3.5)", ">=3.5"]``.
    """
    e = [float(x) for x in edges]
    label_of = (lambda v: f"{int(v)}") if integer else (lambda v: f"{v:g}")
    labels = [f"<{label_of(e[0])}"]
    for lo, hi in zip(e[:-1], e[1:]):
        labels.append(f"{label_of(lo)}-{label_of(hi - 1)}" if integer else f"[{label_of(lo)}, {label_of(hi)})")
    labels.append(f"{label_of(e[-1])}+" if integer else f">={label_of(e[-1])}")
    return labels


def bin_values(values: np.ndarray, edges: Sequence[float]) -> tuple[np.ndarray, list[str]]:
    """Group labels of numeric ``values`` cut at ``edges`` (a value equal to an edge goes
    to the bin that starts there); missing values get :data:`MISSING`.

    Returns
    -------
    (labels per row, label order of the non-empty bins, then ``missing`` if any)
    """
    v = np.asarray(values, dtype=float)
    finite = np.isfinite(v)
    integer = bool(np.all(np.mod(v[finite], 1) == 0)) and all(float(x).is_integer() for x in edges)
    labels = bin_labels(edges, integer)
    idx = np.searchsorted(np.asarray(edges, dtype=float), v, side="right")
    out = np.empty(len(v), dtype=object)
    out[finite] = np.asarray(labels, dtype=object)[idx[finite]]
    out[~finite] = MISSING
    present = set(out.tolist())
    order = [lab for lab in labels if lab in present] + ([MISSING] if MISSING in present else [])
    return out, order


def quantile_edges(values: np.ndarray, k: int = 4) -> list[float]:
    """Cut points of ``k`` quantile bins (rounded to integers for integer data; repeated
    or degenerate edges dropped)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return []
    q = np.quantile(v, [i / k for i in range(1, k)])
    if np.all(np.mod(v, 1) == 0):
        q = np.round(q)
    else:
        q = np.array([float(f"{x:.3g}") for x in q])
    edges = sorted({float(x) for x in q if v.min() < x <= v.max()})
    return edges


def _check_edges(name: str, value) -> list[float]:
    if isinstance(value, bool) or not isinstance(value, (list, tuple, np.ndarray, int)):
        raise InvalidInputError(MSG_BAD_BINS.format(
            name=name, value=value, expected="expected a list of cut points or a number of quantile bins"))
    if isinstance(value, int):
        if not 2 <= value <= 20:
            raise InvalidInputError(MSG_BAD_BINS.format(
                name=name, value=value, expected="expected between 2 and 20 quantile bins"))
        return [int(value)]
    try:
        edges = [float(x) for x in value]
    except (TypeError, ValueError):
        raise InvalidInputError(MSG_BAD_BINS.format(
            name=name, value=value, expected="expected numbers")) from None
    if not edges or not all(math.isfinite(x) for x in edges) or \
            any(b <= a for a, b in zip(edges, edges[1:])):
        raise InvalidInputError(MSG_BAD_BINS.format(
            name=name, value=list(value), expected="expected finite, strictly increasing cut points"))
    return edges


def _is_missing(v) -> bool:
    if v is None:
        return True
    if isinstance(v, (float, np.floating)):
        return math.isnan(v)
    return type(v).__name__ in ("NAType", "NaTType")


def _as_object(values) -> np.ndarray:
    if hasattr(values, "to_numpy"):
        values = values.to_numpy(dtype=object, na_value=None) if hasattr(values, "dtype") else values.to_numpy()
    elif hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=object).reshape(-1)


def _numeric(values: np.ndarray) -> np.ndarray | None:
    """Values as floats if every non-missing one is a real number (not a bool), else None."""
    out = np.empty(len(values), dtype=float)
    for i, v in enumerate(values):
        if _is_missing(v):
            out[i] = np.nan
        elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            return None
        else:
            out[i] = float(v)
    return out


def _category_label(v) -> str:
    if _is_missing(v):
        return MISSING
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def _columns(X) -> list[str]:
    return [str(c) for c in X.columns] if hasattr(X, "columns") else []


def _one_hot_group(X, name: str) -> list[str]:
    return [c for c in _columns(X) if c.startswith(name + "=")]


def _decode_one_hot(X, name: str) -> np.ndarray:
    """The category of each row from one-hot columns ``name=<category>`` (None if all 0)."""
    group = _one_hot_group(X, name)
    mat = np.asarray(X[group], dtype=float)
    raw = np.asarray([c.split("=", 1)[1] for c in group], dtype=object)[mat.argmax(axis=1)]
    raw[mat.max(axis=1) <= 0] = None
    return raw


def resolve_sensitive(sensitive, X, n: int, features: Sequence[str],
                      group_bins: dict | None = None) -> list[SensitiveAttribute]:
    """Resolve ``audit_model``'s ``sensitive`` and ``group_bins`` into attributes.

    Parameters
    ----------
    sensitive : list of str, or dict of name -> column name / values / Attribute
        A name alone is a column of X, a one-hot group ``name=value`` of X's columns,
        or ``sex`` derived from a column whose name contains ``sex``.
    X : DataFrame or array
        The audited rows (their raw columns, before any pipeline step).
    n : int
        Number of rows.
    features : list of str
        The model's features (after grouping one-hot columns).
    group_bins : dict, optional
        ``{attribute: cut points or number of quantile bins}``.
    """
    if isinstance(sensitive, str):
        sensitive = [sensitive]
    if isinstance(sensitive, dict):
        items = list(sensitive.items())
    elif isinstance(sensitive, (list, tuple)):
        items = [(s, s) for s in sensitive]
    else:
        raise InvalidInputError(MSG_BAD_SPEC.format(name="sensitive", kind=type(sensitive).__name__))
    if not items:
        raise InvalidInputError(MSG_NO_ATTRS)
    group_bins = dict(group_bins or {})
    names = [k for k, _ in items]
    unknown = sorted(set(group_bins) - set(names))
    if unknown:
        raise InvalidInputError(MSG_BINS_UNKNOWN.format(names=", ".join(map(repr, unknown)),
                                                        known=", ".join(map(repr, names))))
    out = []
    for name, spec in items:
        if not isinstance(name, str) or not name.strip() or len(name) > 100:
            raise InvalidInputError(MSG_BAD_NAME.format(name=name))
        attr = spec if isinstance(spec, Attribute) else None
        if attr is None:
            if isinstance(spec, str):
                attr = Attribute(column=spec)
            elif hasattr(spec, "__len__") and not isinstance(spec, (bytes, dict)):
                attr = Attribute(values=spec)
            else:
                raise InvalidInputError(MSG_BAD_SPEC.format(name=name, kind=type(spec).__name__))
        bins = attr.bins if attr.bins is not None else group_bins.get(name)
        out.append(_resolve_one(name, attr, X, n, list(features), bins))
    return out


def _resolve_one(name: str, attr: Attribute, X, n: int, features: list[str], bins) -> SensitiveAttribute:
    cols = _columns(X)
    derived_from = None
    source: list[str] = []
    derive = attr.derive
    if attr.values is not None:
        raw = _as_object(attr.values)
        if name in features:
            source = [name]
    else:
        column = attr.column or name
        if column in cols:
            raw = _as_object(X[column])
            source = [column] if column in features else []
        elif _one_hot_group(X, column):
            raw = _decode_one_hot(X, column)
            source = [column] if column in features else []
        elif column == "sex" or (derive == "sex"):
            prefixes = sorted({c.split("=", 1)[0] for c in cols if "=" in c})
            cands = [c for c in cols if "=" not in c and "sex" in c.lower() and c != column]
            cands += [p for p in prefixes if "sex" in p.lower() and p != column]
            if len(cands) != 1:
                raise InvalidInputError(MSG_NO_SOURCE.format(name=name, columns=_cols_text(cols)))
            derived_from = cands[0]
            src = X[derived_from] if derived_from in cols else _decode_one_hot(X, derived_from)
            raw = derive_sex(src, derived_from)
            derive = None
            source = [derived_from] if derived_from in features else []
        else:
            raise InvalidInputError(MSG_NO_SOURCE.format(name=name, columns=_cols_text(cols)))
    if len(raw) != n:
        raise InvalidInputError(MSG_BAD_LENGTH.format(name=name, got=len(raw), n=n))
    if derive == "sex":
        raw = derive_sex(raw, attr.column or name)
    elif derive is not None:
        raise InvalidInputError(f"sensitive attribute {name!r}: derive={derive!r}; expected 'sex' or None")
    if attr.feature is not None:
        source = [attr.feature] if attr.feature in features else []

    num = _numeric(raw)
    binning = None
    if num is not None and (bins is not None or len(np.unique(num[np.isfinite(num)])) > MAX_CATEGORIES):
        if bins is not None:
            edges = _check_edges(name, bins)
            if len(edges) == 1 and isinstance(bins, int):
                rule, edges = f"{bins} quantile bins", quantile_edges(num, bins)
            else:
                rule = "given cut points"
        elif is_age_name(name):
            rule, edges = "age groups (debugkit default)", list(AGE_BINS)
        else:
            rule, edges = "quartiles (debugkit default)", quantile_edges(num, 4)
        if not edges:
            groups = np.asarray([MISSING if not np.isfinite(v) else "all" for v in num], dtype=object)
            order = [g for g in ("all", MISSING) if g in set(groups.tolist())]
            labels = ["all"]
        else:
            groups, order = bin_values(num, edges)
            labels = bin_labels(edges, bool(np.all(np.mod(num[np.isfinite(num)], 1) == 0))
                                and all(float(e).is_integer() for e in edges))
        binning = {"rule": rule, "edges": [float(e) for e in edges], "labels": labels,
                   "right_open": True}
        raw_out = num
    else:
        if bins is not None:
            raise InvalidInputError(MSG_NOT_CONTINUOUS.format(name=name))
        groups = np.asarray([_category_label(v) for v in raw], dtype=object)
        present = sorted(set(groups.tolist()) - {MISSING})
        order = present + ([MISSING] if MISSING in set(groups.tolist()) else [])
        raw_out = num if num is not None else raw
    return SensitiveAttribute(name=name, raw=raw_out, groups=groups, order=order, binning=binning,
                              source_features=source, derived_from=derived_from,
                              reference=attr.reference)


def _cols_text(cols: list[str]) -> str:
    if not cols:
        return "X has no named columns"
    shown = ", ".join(cols[:12])
    return "columns: " + shown + (f", ... ({len(cols)} in all)" if len(cols) > 12 else "")
