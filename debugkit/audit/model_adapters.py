"""What kind of model is audited, how to get its output and decisions, and its hash.

The audited *output* is what SHAP explains (log-odds, probability or margin of the
positive label); the *decisions* (positive or not per row) are what the fairness
metrics judge.

Kinds:

- ``tree``: sklearn tree ensembles (gradient boosting, histogram gradient boosting,
  random forests, extra trees, decision trees), XGBoost, LightGBM;
- ``linear``: sklearn linear classifiers (logistic regression, SGD, ridge, linear SVM);
- ``torch``: a ``torch.nn.Module`` mapping a float tensor ``(n, features)`` to one logit
  per row (``(n,)`` or ``(n, 1)``; a final ``Sigmoid`` makes it a probability) or two
  class logits ``(n, 2)`` (explained as their difference, the log-odds; a final
  ``Softmax`` makes it probabilities);
- ``estimator``: any other sklearn-style classifier (``predict_proba`` or ``decision_function``);
- ``function``: a plain callable ``f(X)`` returning the probability of the positive label
  (``(n,)``, or ``(n, 2)`` class probabilities).

A sklearn ``Pipeline`` is audited as its preprocessing followed by its final estimator:
SHAP explains the final estimator on the transformed features, and the attributions of
the columns one original feature became (one-hot columns) are summed back into that
feature.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidInputError

MSG_NOT_BINARY = ("y: the audit needs a binary outcome; found {k} distinct values "
                  "({values})")
MSG_NO_POSITIVE = "positive_label={label!r} does not occur in y (values: {values})"
MSG_CLASSES = ("positive_label={label!r} is not among the model's classes {classes}; "
               "pass the label of the favourable outcome")
MSG_NOT_CLASSIFIER = ("model {kind}: not a binary classifier debugkit can audit; pass a "
                      "fitted sklearn classifier or pipeline, a torch module, or a function "
                      "returning the probability of the positive label")
MSG_MULTICLASS = "model {kind}: {k} classes; the bias audit handles binary classifiers only"
MSG_TORCH_OUTPUT = ("torch module {kind}: output of shape {shape}; expected one logit per row "
                    "((n,) or (n, 1)) or two class logits ((n, 2))")
MSG_FUNCTION_OUTPUT = ("model function {name}: returned {detail}; expected the probability of "
                       "the positive label per row (shape (n,) or (n, 2), numbers in [0, 1])")
MSG_PREDICT = "predict function {name}: returned {detail}; expected one label (or bool) per row"
MSG_NOT_FITTED = "model {kind}: is not fitted ({detail})"

TREE_CLASSES = {"GradientBoostingClassifier": "log-odds", "HistGradientBoostingClassifier": "log-odds",
                "RandomForestClassifier": "probability", "ExtraTreesClassifier": "probability",
                "DecisionTreeClassifier": "probability", "ExtraTreeClassifier": "probability",
                "XGBClassifier": "log-odds", "LGBMClassifier": "log-odds"}
LOG_ODDS_LINEAR = {"LogisticRegression", "LogisticRegressionCV"}


def type_name(obj) -> str:
    t = obj if isinstance(obj, type) else type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def is_torch_module(obj) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def is_pipeline(obj) -> bool:
    mod = sys.modules.get("sklearn.pipeline")
    return mod is not None and isinstance(obj, mod.Pipeline)


def labels_text(values) -> str:
    vals = list(values)[:8]
    return ", ".join(repr(v.item() if hasattr(v, "item") else v) for v in vals) + \
        (", ..." if len(values) > 8 else "")


def positive_mask(y, positive_label) -> np.ndarray:
    """``y == positive_label`` as 0/1, after checking y is binary and holds the label."""
    arr = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else
                     (y.detach().cpu().numpy() if hasattr(y, "detach") else y)).reshape(-1)
    uniq = np.unique(arr.astype(object) if arr.dtype.kind == "O" else arr)
    if len(uniq) > 2:
        raise InvalidInputError(MSG_NOT_BINARY.format(k=len(uniq), values=labels_text(uniq)))
    mask = _eq(arr, positive_label)
    if not mask.any():
        raise InvalidInputError(MSG_NO_POSITIVE.format(label=positive_label, values=labels_text(uniq)))
    return mask.astype(int)


def _eq(arr: np.ndarray, label) -> np.ndarray:
    if arr.dtype == bool and isinstance(label, (bool, int, np.integer)):
        return arr == bool(label)
    try:
        return np.asarray(arr == label, dtype=bool).reshape(arr.shape)
    except (TypeError, ValueError):
        return np.asarray([a == label for a in arr], dtype=bool)


@dataclass
class ModelAdapter:
    """Uniform access to an audited model.

    Attributes
    ----------
    kind : str
        ``tree``, ``linear``, ``torch``, ``estimator`` or ``function``.
    model : object
        What the user passed.
    estimator : object
        The object SHAP explains (a pipeline's final step).
    preprocess : object or None
        A pipeline's steps before the final one.
    output : str
        The explained output: ``log-odds``, ``probability``, ``margin`` or ``model output``.
    positive_index : int
        Column of the positive label in ``classes`` (1 for torch and functions).
    """

    kind: str
    model: Any
    estimator: Any
    preprocess: Any = None
    output: str = "probability"
    positive_index: int = 1
    classes: list = field(default_factory=list)
    positive_label: Any = 1
    threshold: float = 0.5
    predict_fn: Callable | None = None
    torch_head: str | None = None  # "logit", "sigmoid", "two_logits", "softmax"

    # ------------------------------------------------------------------ description
    def describe(self) -> dict:
        est = self.estimator
        d = {"type": _func_name(self.model) if self.kind == "function" else type_name(self.model),
             "kind": self.kind, "estimator": type_name(est) if self.kind != "function" else _func_name(est),
             "output": self.output, "positive_label": _jsonable(self.positive_label),
             "classes": [_jsonable(c) for c in self.classes],
             "decision": self._decision_text()}
        if self.preprocess is not None:
            d["pipeline_steps"] = [f"{name}: {type_name(step)}" for name, step in self.model.steps]
        params = _params(est)
        if params:
            d["params"] = params
        if self.kind == "torch":
            d["parameters"] = int(sum(p.numel() for p in est.parameters()))
            d["head"] = self.torch_head
        return d

    def _decision_text(self) -> str:
        if self.predict_fn is not None:
            return f"predict function {_func_name(self.predict_fn)}"
        if self.kind in ("tree", "linear", "estimator"):
            return "the estimator's predict()"
        if self.output == "log-odds":
            return f"logit >= {logit(self.threshold):.6g} (probability >= {self.threshold:g})"
        return f"probability >= {self.threshold:g}"

    # ------------------------------------------------------------------ features
    def transform(self, X):
        """The matrix the explained estimator takes, as float64 ``(n, d)``."""
        if self.preprocess is not None:
            Xt = self.preprocess.transform(X)
            if hasattr(Xt, "toarray"):
                Xt = Xt.toarray()
            return _float_matrix(Xt, "the pipeline's transformed features")
        if self.kind == "function" or self.kind == "estimator":
            return None  # explained on X itself (possibly with categorical columns)
        return _float_matrix(X, "X")

    # ------------------------------------------------------------------ outputs
    def output_t(self, Xt: np.ndarray) -> np.ndarray:
        """The explained output from the explained estimator's own input."""
        est = self.estimator
        names = getattr(est, "feature_names_in_", None)
        if names is not None and isinstance(Xt, np.ndarray) and Xt.ndim == 2 and Xt.shape[1] == len(names):
            import pandas as pd

            Xt = pd.DataFrame(Xt, columns=list(names))  # as the estimator was fitted
        sign = 1.0 if self.positive_index == 1 else -1.0
        if self.kind in ("tree", "linear"):
            if self.output == "probability":
                return np.asarray(est.predict_proba(Xt), dtype=float)[:, self.positive_index]
            name = type(est).__name__
            if name == "XGBClassifier":
                return sign * np.asarray(est.predict(Xt, output_margin=True), dtype=float)
            if name == "LGBMClassifier":
                return sign * np.asarray(est.predict(Xt, raw_score=True), dtype=float)
            return sign * np.asarray(est.decision_function(Xt), dtype=float).reshape(-1)
        if self.kind == "torch":
            return self.torch_output(Xt)
        if self.kind == "estimator":
            return self._estimator_output(Xt)
        return self._function_output(Xt)

    def _estimator_output(self, Xt) -> np.ndarray:
        est = self.estimator
        if self.output == "probability":
            return np.asarray(est.predict_proba(Xt), dtype=float)[:, self.positive_index]
        sign = 1.0 if self.positive_index == 1 else -1.0
        return sign * np.asarray(est.decision_function(Xt), dtype=float).reshape(-1)

    def _function_output(self, X) -> np.ndarray:
        out = self.estimator(X)
        out = np.asarray(out.detach().cpu().numpy() if hasattr(out, "detach") else out)
        name = _func_name(self.estimator)
        if out.dtype.kind not in "fiub":
            raise InvalidInputError(MSG_FUNCTION_OUTPUT.format(name=name, detail=f"values of dtype {out.dtype}"))
        out = out.astype(float)
        if out.ndim == 2 and out.shape[1] == 2:
            out = out[:, 1]
        elif out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.ndim != 1 or out.shape[0] != _nrows(X):
            raise InvalidInputError(MSG_FUNCTION_OUTPUT.format(name=name, detail=f"shape {out.shape}"))
        return out

    def torch_output(self, Xt: np.ndarray, batch: int = 4096) -> np.ndarray:
        import torch

        mod = self.explained_module()
        dev = _module_device(self.estimator)
        outs = []
        with torch.no_grad():
            for i in range(0, len(Xt), batch):
                x = torch.as_tensor(Xt[i:i + batch], dtype=torch.float32, device=dev)
                outs.append(mod(x).reshape(-1).double().cpu().numpy())
        return np.concatenate(outs) if outs else np.zeros(0)

    def explained_module(self):
        """The torch module whose single output SHAP explains (log-odds or probability)."""
        return _TorchHead(self.estimator, self.torch_head)

    def scores(self, X) -> np.ndarray:
        """The explained output per row, from the raw X."""
        Xt = self.transform(X)
        return self.output_t(Xt if Xt is not None else X)

    def decisions(self, X, scores: np.ndarray | None = None) -> np.ndarray:
        """1 where the model decides for the positive label."""
        if self.predict_fn is not None:
            out = self.predict_fn(X)
            out = np.asarray(out.detach().cpu().numpy() if hasattr(out, "detach") else
                             (out.to_numpy() if hasattr(out, "to_numpy") else out)).reshape(-1)
            if out.shape[0] != _nrows(X):
                raise InvalidInputError(MSG_PREDICT.format(name=_func_name(self.predict_fn),
                                                           detail=f"{out.shape[0]} values for {_nrows(X)} rows"))
            if out.dtype == bool:
                return out.astype(int)
            return _eq(out, self.positive_label).astype(int)
        if self.kind in ("tree", "linear", "estimator"):
            return _eq(np.asarray(self.model.predict(X)).reshape(-1), self.positive_label).astype(int)
        s = self.scores(X) if scores is None else scores
        if self.output == "log-odds":
            return (s >= logit(self.threshold)).astype(int)
        return (s >= self.threshold).astype(int)

    # ------------------------------------------------------------------ hashing
    def fingerprint(self) -> dict:
        """``{"sha256", "of"}``: a hash of the model's parameters or serialised form."""
        return model_fingerprint(self.model)


class _TorchHead:
    """Callable/module view of a torch model giving the explained output per row."""

    def __new__(cls, module, head):
        import torch

        class Head(torch.nn.Module):
            def __init__(self, inner, kind):
                super().__init__()
                self.inner = inner
                self.kind = kind

            def forward(self, x):
                z = self.inner(x)
                if self.kind in ("two_logits",):
                    return (z[:, 1] - z[:, 0]).reshape(-1, 1)
                if self.kind == "softmax":
                    return z[:, 1].reshape(-1, 1)
                return z.reshape(-1, 1)

        return Head(module, head)


def logit(p: float) -> float:
    if p <= 0:
        return -math.inf
    if p >= 1:
        return math.inf
    return math.log(p / (1 - p))


def _module_device(module):
    import torch

    p = next(iter(module.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def _nrows(X) -> int:
    return int(X.shape[0]) if hasattr(X, "shape") else len(X)


def _float_matrix(X, what: str) -> np.ndarray:
    if hasattr(X, "detach"):
        X = X.detach().cpu().numpy()
    if hasattr(X, "to_numpy"):
        bad = [str(c) for c in X.columns if X[c].dtype.kind not in "fiub"] if hasattr(X, "columns") else []
        if bad:
            raise InvalidInputError(f"{what}: non-numeric column(s) {', '.join(bad[:5])}; encode them "
                                    "(e.g. one-hot columns named 'feature=value') or audit a sklearn "
                                    "Pipeline that encodes them")
        X = X.to_numpy()
    arr = np.asarray(X)
    if arr.ndim != 2:
        raise InvalidInputError(f"{what}: expected a 2-d table of rows x features, got shape {arr.shape}")
    try:
        arr = arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{what}: not numeric ({exc})") from None
    if not np.isfinite(arr).all():
        r, c = np.argwhere(~np.isfinite(arr))[0]
        raise InvalidInputError(f"{what}: row {r}, column {c} is {arr[r, c]}; the audit needs finite "
                                "features (impute missing values first)")
    return arr


def _func_name(f) -> str:
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__


def _jsonable(v):
    if hasattr(v, "item"):
        try:
            return v.item()
        except (TypeError, ValueError):
            pass
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def _params(est) -> dict:
    if not hasattr(est, "get_params"):
        return {}
    try:
        params = est.get_params(deep=False)
    except Exception:  # noqa: BLE001 - a third-party estimator's get_params may fail
        return {}
    out = {}
    for k, v in sorted(params.items()):
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[k] = v if not (isinstance(v, float) and not math.isfinite(v)) else str(v)
        else:
            out[k] = type_name(v) if not isinstance(v, (list, tuple, dict)) else str(v)[:200]
    return out


def _classes(est, kind_text: str) -> list:
    classes = getattr(est, "classes_", None)
    if classes is None:
        raise InvalidInputError(MSG_NOT_FITTED.format(kind=kind_text, detail="it has no classes_"))
    classes = list(classes)
    if len(classes) != 2:
        raise InvalidInputError(MSG_MULTICLASS.format(kind=kind_text, k=len(classes)))
    return classes


def _positive_index(classes, label, kind_text) -> int:
    for i, c in enumerate(classes):
        if c == label or (_jsonable(c) == _jsonable(label)):
            return i
    raise InvalidInputError(MSG_CLASSES.format(label=label, classes=[_jsonable(c) for c in classes]))


def tree_kind(est) -> str | None:
    """The output space of a supported tree ensemble, or None when ``est`` is not one."""
    name = type(est).__name__
    mod = type(est).__module__
    if name in TREE_CLASSES and (mod.startswith("sklearn.") or mod.startswith("xgboost")
                                 or mod.startswith("lightgbm")):
        return TREE_CLASSES[name]
    return None


def linear_kind(est) -> str | None:
    mod = sys.modules.get("sklearn.linear_model._base")
    if mod is None or not isinstance(est, getattr(mod, "LinearClassifierMixin", ())):
        svm = sys.modules.get("sklearn.svm")
        if not (svm is not None and isinstance(est, svm.LinearSVC)):
            return None
    name = type(est).__name__
    if name in LOG_ODDS_LINEAR:
        return "log-odds"
    if name == "SGDClassifier" and getattr(est, "loss", "") == "log_loss":
        return "log-odds"
    return "margin"


def torch_head(module, n_features: int) -> tuple[str, str]:
    """(head kind, output space) of a torch classifier, from a probe forward pass."""
    import torch

    last = None
    for m in module.modules():
        if not list(m.children()):
            last = m
    dev = _module_device(module)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            out = module(torch.zeros(2, n_features, dtype=torch.float32, device=dev))
    except Exception as exc:  # noqa: BLE001 - report what the user's module raised
        raise InvalidInputError(f"torch module {type_name(module)}: a forward pass on "
                                f"{n_features} features failed ({type(exc).__name__}: {exc})") from exc
    finally:
        module.train(was_training)
    shape = tuple(out.shape)
    if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
        if isinstance(last, torch.nn.Sigmoid):
            return "sigmoid", "probability"
        return "logit", "log-odds"
    if len(shape) == 2 and shape[1] == 2:
        if isinstance(last, torch.nn.Softmax):
            return "softmax", "probability"
        return "two_logits", "log-odds"
    raise InvalidInputError(MSG_TORCH_OUTPUT.format(kind=type_name(module), shape=shape))


def make_adapter(model, X, *, positive_label, predict=None, threshold=0.5,
                 y_labels=None) -> ModelAdapter:
    """Classify ``model`` and build its adapter (see the module docstring)."""
    if predict is not None and not callable(predict):
        raise InvalidInputError(f"predict={predict!r}: expected a function X -> labels")
    est, pre = model, None
    if is_pipeline(model):
        est = model.steps[-1][1]
        pre = model[:-1] if len(model.steps) > 1 else None
    kind_text = type_name(model)
    common = dict(model=model, estimator=est, preprocess=pre, positive_label=positive_label,
                  threshold=threshold, predict_fn=predict)
    if is_torch_module(est):
        if pre is not None:
            raise InvalidInputError(f"model {kind_text}: a torch module inside a sklearn Pipeline "
                                    "is not supported; pass the module and encoded X")
        n_features = int(X.shape[1]) if hasattr(X, "shape") and len(X.shape) == 2 else 0
        head, output = torch_head(est, n_features)
        return ModelAdapter(kind="torch", output=output, torch_head=head, positive_index=1,
                            classes=[c for c in (y_labels or [])], **common)
    tk = tree_kind(est)
    if tk is not None:
        classes = _classes(est, kind_text)
        return ModelAdapter(kind="tree", output=tk, classes=classes,
                            positive_index=_positive_index(classes, positive_label, kind_text), **common)
    lk = linear_kind(est)
    if lk is not None:
        classes = _classes(est, kind_text)
        return ModelAdapter(kind="linear", output=lk, classes=classes,
                            positive_index=_positive_index(classes, positive_label, kind_text), **common)
    if hasattr(est, "predict") and (hasattr(est, "predict_proba") or hasattr(est, "decision_function")):
        classes = _classes(est, kind_text)
        output = "probability" if hasattr(est, "predict_proba") else "margin"
        return ModelAdapter(kind="estimator", output=output, classes=classes,
                            positive_index=_positive_index(classes, positive_label, kind_text), **common)
    if callable(model) and not hasattr(model, "fit"):
        return ModelAdapter(kind="function", output="probability", positive_index=1,
                            classes=[c for c in (y_labels or [])], **common)
    raise InvalidInputError(MSG_NOT_CLASSIFIER.format(kind=kind_text))


# ----------------------------------------------------------------------------- hashing
def model_fingerprint(model) -> dict:
    """SHA-256 of a model: a torch module's ``state_dict`` tensors (name, dtype, shape,
    bytes, by name); any other object's pickled form (protocol 4, serialised here and
    never loaded); a plain function's code object."""
    h = hashlib.sha256()
    if is_torch_module(model):
        return {"sha256": torch_state_fingerprint(model.state_dict()),
                "of": "state_dict tensors (name, dtype, shape, bytes; sorted by name)"}
    if callable(model) and not hasattr(model, "fit") and hasattr(model, "__code__"):
        import marshal

        h.update(getattr(model, "__qualname__", "").encode() + b"\0")
        h.update(marshal.dumps(model.__code__))
        return {"sha256": h.hexdigest(), "of": "the function's name and code object (not its closure)"}
    import pickle

    try:
        h.update(pickle.dumps(model, protocol=4))
    except Exception as exc:  # noqa: BLE001 - any unpicklable object
        h.update(repr(model).encode())
        return {"sha256": h.hexdigest(), "of": f"repr() only: the model cannot be serialised ({exc})"}
    return {"sha256": h.hexdigest(), "of": "pickle.dumps(model, protocol=4)"}


def torch_state_fingerprint(state: dict) -> str:
    """The :func:`model_fingerprint` hash of a state_dict (e.g. loaded from safetensors)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(name.encode() + b"\0" + str(t.dtype).encode() + b"\0" + str(tuple(t.shape)).encode() + b"\0")
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
