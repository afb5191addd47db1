"""SHAP attributions: the explainer chosen by model kind, grouped back to features.

==========  =============================================  ==============================
kind        explainer (``explainer="auto"``)               additivity
==========  =============================================  ==============================
tree        ``shap.TreeExplainer`` (path-dependent; with    exact
            a background array: interventional)
linear      ``shap.LinearExplainer`` (interventional, on    exact
            the background sample)
torch       ``shap.DeepExplainer`` (DeepLIFT rescale over   exact for ReLU networks
            the background); ``"gradient"``: expected
            gradients (``shap.GradientExplainer``)         approximate (sampled)
estimator,  ``shap.PermutationExplainer`` over an           exact (efficiency holds by
function    independent masker on the background;           construction)
            ``"kernel"``: ``shap.KernelExplainer``
==========  =============================================  ==============================

Additivity is always checked: the largest ``|sum of SHAP values + base value - model
output|`` over the rows, with the model output computed separately from the explainer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidInputError, MissingDependencyError
from .model_adapters import ModelAdapter

EXPLAINERS = ("auto", "tree", "linear", "deep", "gradient", "permutation", "kernel")
AUTO = {"tree": "tree", "linear": "linear", "torch": "deep", "estimator": "permutation",
        "function": "permutation"}
ALLOWED = {"tree": {"tree", "permutation", "kernel"}, "linear": {"linear", "permutation", "kernel"},
           "torch": {"deep", "gradient", "permutation", "kernel"},
           "estimator": {"permutation", "kernel"}, "function": {"permutation", "kernel"}}
MSG_EXPLAINER = "explainer={value!r}: expected one of {allowed}"
MSG_EXPLAINER_KIND = "explainer={value!r} does not apply to a {kind} model; use one of {allowed}"
MSG_BACKGROUND = "background={value!r}: expected a number of rows (1 to 10000) or an array of rows"


def _shap():
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import shap
    except ImportError as exc:
        raise MissingDependencyError("shap", "The bias audit's SHAP attributions") from exc
    return shap


# ----------------------------------------------------------------------------- features
@dataclass
class FeatureSpace:
    """The explained columns and the features they are summed into.

    Attributes
    ----------
    columns : list of str
        Names of the explained estimator's input columns.
    features : list of str
        The audited features (original columns; one-hot columns grouped).
    members : dict of feature -> list of int
        Column indices summed into each feature.
    """

    columns: list[str]
    features: list[str]
    members: dict[str, list[int]]

    def group(self, values: np.ndarray) -> np.ndarray:
        """``(n, len(columns))`` attributions summed into ``(n, len(features))``."""
        out = np.zeros((values.shape[0], len(self.features)))
        for j, f in enumerate(self.features):
            out[:, j] = values[:, self.members[f]].sum(axis=1)
        return out

    def describe(self) -> dict[str, list[str]]:
        """``{feature: [column, ...]}`` for features made of several columns."""
        return {f: [self.columns[i] for i in idx] for f, idx in self.members.items()
                if len(idx) > 1 or self.columns[idx[0]] != f}


def raw_columns(X) -> list[str]:
    if hasattr(X, "columns"):
        return [str(c) for c in X.columns]
    return [f"x{i}" for i in range(int(np.shape(X)[1]))]


def map_transformed_name(name: str, cols: list[str]) -> str | None:
    """The original column a transformed column comes from: ``cat__purpose_car (new)``
    -> ``purpose``, ``remainder__age_in_years`` -> ``age_in_years``; None if unknown."""
    s = name
    colset = set(cols)
    while True:
        if s in colset:
            return s
        best = None
        for c in cols:
            if (s.startswith(c + "_") or s.startswith(c + "=")) and (best is None or len(c) > len(best)):
                best = c
        if best is not None:
            return best
        if "__" in s:
            s = s.split("__", 1)[1]
            continue
        return None


def feature_space(adapter: ModelAdapter, X, n_columns: int) -> FeatureSpace:
    """Work out the explained columns and how they group into features."""
    cols = raw_columns(X)
    if adapter.preprocess is not None:
        try:
            names = [str(c) for c in adapter.preprocess.get_feature_names_out()]
        except Exception:  # noqa: BLE001 - a transformer without feature names
            names = [f"t{i}" for i in range(n_columns)]
        if len(names) != n_columns:
            names = [f"t{i}" for i in range(n_columns)]
        mapped = [map_transformed_name(nm, cols) or nm for nm in names]
    else:
        names = cols
        mapped = [c.split("=", 1)[0] if "=" in c else c for c in cols]
    features: list[str] = []
    members: dict[str, list[int]] = {}
    for i, f in enumerate(mapped):
        if f not in members:
            members[f] = []
            features.append(f)
        members[f].append(i)
    # Features in X's column order (a ColumnTransformer puts its blocks first).
    pos = {c: i for i, c in enumerate(cols)}
    first = {f: i for i, f in enumerate(features)}
    features = sorted(features, key=lambda f: (pos.get(f, len(cols)), first[f]))
    return FeatureSpace(columns=names, features=features, members=members)


def feature_values(X, Xt: np.ndarray | None, space: FeatureSpace) -> dict[str, np.ndarray]:
    """A display value per row for every feature: the raw column (float or str), the
    category of a one-hot group, or the explained column."""
    out = {}
    cols = raw_columns(X)
    for f in space.features:
        if hasattr(X, "columns") and f in cols:
            v = X[f]
            out[f] = (v.to_numpy(dtype=float, na_value=np.nan) if v.dtype.kind in "fiub"
                      else v.astype(str).to_numpy(dtype=object))
            continue
        idx = space.members[f]
        mat = Xt[:, idx] if Xt is not None else np.asarray(X, dtype=float)[:, idx]
        if len(idx) > 1 or "=" in space.columns[idx[0]]:
            cats = np.asarray([space.columns[i].split("=", 1)[-1] if "=" in space.columns[i]
                               else space.columns[i] for i in idx], dtype=object)
            out[f] = cats[np.argmax(mat, axis=1)]
        else:
            out[f] = mat[:, 0].astype(float)
    return out


# ----------------------------------------------------------------------------- encoding
class CategoricalCodes:
    """Numeric codes for a DataFrame's non-numeric columns, so model-agnostic explainers
    (whose maskers need numbers) can mask them; ``decode`` rebuilds the frame."""

    def __init__(self, X):
        self.columns = list(X.columns)
        self.dtypes = X.dtypes
        self.categories = {}
        for c in self.columns:
            if X[c].dtype.kind not in "fiub":
                self.categories[c] = np.asarray(sorted(set(X[c].astype(str))), dtype=object)

    def encode(self, X) -> np.ndarray:
        out = np.zeros((len(X), len(self.columns)))
        for j, c in enumerate(self.columns):
            if c in self.categories:
                cats = self.categories[c]
                out[:, j] = np.searchsorted(cats, X[c].astype(str).to_numpy(dtype=object).astype(str))
            else:
                out[:, j] = X[c].to_numpy(dtype=float)
        return out

    def decode(self, Z: np.ndarray):
        import pandas as pd

        data = {}
        for j, c in enumerate(self.columns):
            if c in self.categories:
                cats = self.categories[c]
                data[c] = cats[np.clip(np.rint(Z[:, j]).astype(int), 0, len(cats) - 1)]
            else:
                data[c] = Z[:, j].astype(self.dtypes[c]) if self.dtypes[c].kind in "iub" else Z[:, j]
        return pd.DataFrame(data, columns=self.columns)


# ----------------------------------------------------------------------------- result
@dataclass
class ShapResult:
    """Attributions of every row, grouped into features.

    Attributes
    ----------
    values : ndarray (n, features)
    base_value : float
        The expected output the attributions start from.
    output : ndarray (n,)
        The explained model output, computed separately from the explainer.
    explainer : str
        ``TreeExplainer``, ``LinearExplainer``, ``DeepExplainer``, ...
    output_space : str
        ``log-odds``, ``probability``, ``margin`` or ``model output``.
    details : dict
        Explainer settings (feature perturbation, background rows, evaluations).
    """

    values: np.ndarray
    base_value: float
    output: np.ndarray
    explainer: str
    output_space: str
    details: dict = field(default_factory=dict)

    @property
    def additivity_errors(self) -> np.ndarray:
        return np.abs(self.values.sum(axis=1) + self.base_value - self.output)

    @property
    def additivity_max_error(self) -> float:
        e = self.additivity_errors
        return float(e.max()) if len(e) else 0.0


def choose_explainer(adapter: ModelAdapter, explainer: str) -> str:
    if explainer not in EXPLAINERS:
        raise InvalidInputError(MSG_EXPLAINER.format(value=explainer, allowed=", ".join(EXPLAINERS)))
    if explainer == "auto":
        return AUTO[adapter.kind]
    allowed = ALLOWED[adapter.kind]
    if explainer not in allowed:
        raise InvalidInputError(MSG_EXPLAINER_KIND.format(value=explainer, kind=adapter.kind,
                                                          allowed=", ".join(sorted(allowed))))
    return explainer


def _background_rows(matrix: np.ndarray, background, seed: int, encode: Callable | None,
                     transform: Callable | None) -> np.ndarray:
    n = matrix.shape[0]
    if isinstance(background, bool):
        raise InvalidInputError(MSG_BACKGROUND.format(value=background))
    if isinstance(background, (int, np.integer)):
        if not 1 <= int(background) <= 10_000:
            raise InvalidInputError(MSG_BACKGROUND.format(value=background))
        k = min(n, int(background))
        idx = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
        return matrix[idx]
    if background is None:
        raise InvalidInputError(MSG_BACKGROUND.format(value=background))
    bg = background
    if transform is not None:
        bg = transform(bg)
    elif encode is not None and hasattr(bg, "columns"):
        bg = encode(bg)
    if hasattr(bg, "detach"):
        bg = bg.detach().cpu().numpy()
    bg = np.asarray(bg.to_numpy() if hasattr(bg, "to_numpy") else bg, dtype=float)
    if bg.ndim != 2 or bg.shape[1] != matrix.shape[1] or not len(bg):
        raise InvalidInputError(f"background: shape {bg.shape}; expected (rows, {matrix.shape[1]})")
    return bg


def _chunks(n: int, parts: int = 20):
    step = max(1, -(-n // parts))
    for i in range(0, n, step):
        yield i, min(n, i + step)


def explain(adapter: ModelAdapter, X, *, explainer: str = "auto", background=100, seed: int = 0,
            progress: Callable[[float], None] | None = None) -> tuple[ShapResult, FeatureSpace, dict]:
    """Compute SHAP values for every row of X.

    Returns
    -------
    (ShapResult, FeatureSpace, feature display values)
    """
    shap = _shap()
    which = choose_explainer(adapter, explainer)
    Xt = adapter.transform(X)
    codes = None
    if Xt is None:  # estimator / function on X itself
        if hasattr(X, "columns") and any(X[c].dtype.kind not in "fiub" for c in X.columns):
            codes = CategoricalCodes(X)
            matrix = codes.encode(X)
        else:
            from .model_adapters import _float_matrix

            matrix = _float_matrix(X, "X")
    else:
        matrix = Xt
    n, d = matrix.shape
    space = feature_space(adapter, X, d)
    values_display = feature_values(X, matrix if codes is None else None, space) if codes is None \
        else feature_values(X, None, space)

    def f_out(Z: np.ndarray) -> np.ndarray:
        Z = np.asarray(Z, dtype=float)
        if codes is not None:
            return adapter.output_t(codes.decode(Z))
        if Xt is None and hasattr(X, "columns"):
            import pandas as pd

            return adapter.output_t(pd.DataFrame(Z, columns=X.columns))
        return adapter.output_t(Z)

    output = f_out(matrix)
    tick = progress or (lambda frac: None)
    details: dict[str, Any] = {}
    est = adapter.estimator
    # A single-output tree or linear model explains classes_[1]; negate for classes_[0].
    # (A probability-output forest gives one column per class: _pick takes the right one.)
    sign = -1.0 if adapter.kind in ("tree", "linear") and adapter.positive_index == 0 \
        and adapter.output != "probability" else 1.0
    transform = (lambda b: adapter.transform(b)) if adapter.preprocess is not None and \
        hasattr(background, "columns") else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if which == "tree":
            if isinstance(background, (int, np.integer)) and not isinstance(background, bool):
                e = shap.TreeExplainer(est)
                details["feature_perturbation"] = "tree_path_dependent"
            else:
                bg = _background_rows(matrix, background, seed, None, transform)
                e = shap.TreeExplainer(est, data=bg, feature_perturbation="interventional",
                                       model_output="raw" if adapter.output != "probability" else "probability")
                details.update(feature_perturbation="interventional", background_rows=len(bg))
            parts = []
            for a, b in _chunks(n):
                v = e.shap_values(matrix[a:b], check_additivity=False)
                parts.append(_pick(v, adapter.positive_index, b - a, d))
                tick(b / n)
            vals = sign * np.concatenate(parts) if parts else np.zeros((0, d))
            base = sign * _pick_base(e.expected_value, adapter.positive_index)
            name = "TreeExplainer"
        elif which == "linear":
            bg = _background_rows(matrix, background, seed, None, transform)
            e = shap.LinearExplainer(est, bg)
            vals = sign * np.asarray(_pick(e.shap_values(matrix), adapter.positive_index, n, d))
            base = sign * _pick_base(e.expected_value, adapter.positive_index)
            details.update(feature_perturbation="interventional", background_rows=len(bg))
            tick(1.0)
            name = "LinearExplainer"
        elif which in ("deep", "gradient"):
            import torch

            head = adapter.explained_module()
            was = adapter.estimator.training
            adapter.estimator.eval()
            dev = next(iter(adapter.estimator.parameters())).device
            bg = _background_rows(matrix, background, seed, None, None)
            bg_t = torch.as_tensor(bg, dtype=torch.float32, device=dev)
            try:
                if which == "deep":
                    e = shap.DeepExplainer(head, bg_t)
                    name = "DeepExplainer"
                else:
                    e = shap.GradientExplainer(head, bg_t)
                    name = "GradientExplainer"
                    details["nsamples"] = 200
                parts = []
                for a, b in _chunks(n):
                    x = torch.as_tensor(matrix[a:b], dtype=torch.float32, device=dev)
                    if which == "deep":
                        v = e.shap_values(x, check_additivity=False)
                    else:
                        v = e.shap_values(x, nsamples=200, rseed=seed + a)
                    parts.append(np.asarray(v, dtype=float).reshape(b - a, d))
                    tick(b / n)
                vals = np.concatenate(parts) if parts else np.zeros((0, d))
                if which == "deep":
                    base = float(np.asarray(e.expected_value, dtype=float).reshape(-1)[0])
                else:
                    with torch.no_grad():
                        base = float(head(bg_t).double().mean().item())
            finally:
                adapter.estimator.train(was)
            details["background_rows"] = len(bg)
        elif which == "permutation":
            bg = _background_rows(matrix, background, seed, codes.encode if codes else None, transform)
            masker = shap.maskers.Independent(bg, max_samples=len(bg))
            e = shap.PermutationExplainer(f_out, masker, seed=seed)
            max_evals = max(500, 2 * d + 1)
            parts, bases = [], []
            for a, b in _chunks(n):
                ex = e(matrix[a:b], max_evals=max_evals, silent=True)
                parts.append(np.asarray(ex.values, dtype=float).reshape(b - a, d))
                bases.append(np.asarray(ex.base_values, dtype=float).reshape(-1))
                tick(b / n)
            vals = np.concatenate(parts) if parts else np.zeros((0, d))
            base = float(np.concatenate(bases)[0]) if bases else float(f_out(bg).mean())
            details.update(background_rows=len(bg), max_evals=max_evals, masker="independent")
            name = "PermutationExplainer"
        else:  # kernel
            bg = _background_rows(matrix, background, seed, codes.encode if codes else None, transform)
            e = shap.KernelExplainer(f_out, bg)
            parts = []
            for a, b in _chunks(n):
                parts.append(np.asarray(e.shap_values(matrix[a:b], silent=True), dtype=float).reshape(b - a, d))
                tick(b / n)
            vals = np.concatenate(parts) if parts else np.zeros((0, d))
            base = float(np.asarray(e.expected_value, dtype=float).reshape(-1)[0])
            details.update(background_rows=len(bg), nsamples="auto")
            name = "KernelExplainer"
    grouped = space.group(np.asarray(vals, dtype=float))
    res = ShapResult(values=grouped, base_value=float(base), output=np.asarray(output, dtype=float),
                     explainer=name, output_space=adapter.output, details=details)
    return res, space, values_display


def _pick(v, pos: int, n: int, d: int) -> np.ndarray:
    """Select the positive class's attributions from shap's output forms."""
    if isinstance(v, list):
        v = v[pos] if len(v) == 2 else v[0]
    v = np.asarray(v, dtype=float)
    if v.ndim == 3:
        v = v[:, :, pos] if v.shape[2] == 2 else v[:, :, 0]
    return v.reshape(n, d)


def _pick_base(ev, pos: int) -> float:
    arr = np.asarray(ev, dtype=float).reshape(-1)
    if len(arr) == 2:
        return float(arr[pos])
    return float(arr[0])
