"""SHAP by model kind: explainer choice, output space, additivity, grouping of one-hot columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.audit.explain import explain, feature_space, map_transformed_name
from debugkit.audit.model_adapters import make_adapter
from debugkit.errors import InvalidInputError


@pytest.fixture(scope="module")
def numeric(credit):
    """Standardised numeric + one-hot (column=value) German credit, for linear and torch models."""
    from examples.credit import encode, fit_encoder

    X, y = credit["X"], credit["y"]
    enc = fit_encoder(X.iloc[credit["train"]])
    Xe = encode(X, enc)
    return Xe, (y == "good").astype(int).to_numpy()


def test_tree_explainer_on_the_pipeline_adds_up_in_log_odds(credit):
    X = credit["X_test"].iloc[:120]
    ad = make_adapter(credit["gbm"], X, positive_label="good")
    res, space, values = explain(ad, X)
    assert res.explainer == "TreeExplainer" and res.output_space == "log-odds"
    assert res.additivity_max_error < 1e-6
    # the output explained is the pipeline's own decision function
    np.testing.assert_allclose(res.output, credit["gbm"].decision_function(X), atol=1e-12)
    assert space.features == list(X.columns)  # 61 one-hot columns summed back into 20 features
    assert len(space.columns) == 61
    assert values["purpose"][0] == X["purpose"].iloc[0]
    assert res.values.shape == (120, 20)


def test_tree_explainer_for_the_other_class_is_negated(credit):
    X = credit["X_test"].iloc[:50]
    good = explain(make_adapter(credit["gbm"], X, positive_label="good"), X)[0]
    bad = explain(make_adapter(credit["gbm"], X, positive_label="bad"), X)[0]
    np.testing.assert_allclose(bad.values, -good.values, atol=1e-12)
    assert bad.base_value == pytest.approx(-good.base_value)
    assert bad.additivity_max_error < 1e-6


def test_random_forest_probability_output(credit):
    from sklearn.ensemble import RandomForestClassifier

    from examples.credit import build_gbm

    pipe = build_gbm(credit["X"])
    pipe.steps[-1] = ("rf", RandomForestClassifier(n_estimators=20, max_depth=4, random_state=0))
    pipe.fit(credit["X"].iloc[credit["train"]], credit["y"].iloc[credit["train"]])
    X = credit["X_test"].iloc[:60]
    res = explain(make_adapter(pipe, X, positive_label="bad"), X)[0]
    assert res.output_space == "probability"
    assert res.additivity_max_error < 1e-6
    np.testing.assert_allclose(res.output, pipe.predict_proba(X)[:, 0], atol=1e-12)


def test_linear_explainer_adds_up(numeric):
    from sklearn.linear_model import LogisticRegression

    Xe, y = numeric
    lr = LogisticRegression(max_iter=2000).fit(Xe, y)
    res, space, _ = explain(make_adapter(lr, Xe, positive_label=1), Xe, background=100)
    assert res.explainer == "LinearExplainer" and res.output_space == "log-odds"
    assert res.additivity_max_error < 1e-6
    assert "purpose" in space.features and "purpose=business" not in space.features
    assert len(space.features) == 20 and res.details["background_rows"] == 100


def test_deep_explainer_on_a_torch_mlp(numeric):
    import torch

    from examples.credit import build_mlp

    Xe, _ = numeric
    torch.manual_seed(0)
    net = build_mlp(Xe.shape[1])
    X = Xe.iloc[:40]
    res, space, _ = explain(make_adapter(net, X, positive_label=1), X, background=20)
    assert res.explainer == "DeepExplainer" and res.output_space == "log-odds"
    assert res.additivity_max_error < 1e-4  # DeepLIFT's rescale rule on ReLU nets, float32
    with torch.no_grad():
        out = net(torch.tensor(X.to_numpy(), dtype=torch.float32)).squeeze(1).double().numpy()
    np.testing.assert_allclose(res.output, out, atol=1e-6)


def test_two_logit_torch_head_explains_the_log_odds(numeric):
    import torch

    Xe, _ = numeric
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(Xe.shape[1], 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    X = Xe.iloc[:30]
    ad = make_adapter(net, X, positive_label=1)
    assert ad.torch_head == "two_logits" and ad.output == "log-odds"
    res = explain(ad, X, background=10)[0]
    with torch.no_grad():
        z = net(torch.tensor(X.to_numpy(), dtype=torch.float32)).double().numpy()
    np.testing.assert_allclose(res.output, z[:, 1] - z[:, 0], atol=1e-6)
    assert res.additivity_max_error < 1e-4


@pytest.mark.slow  # SHAP's permutation explainer: 7.9 CPU s (tests._cputime)
def test_permutation_explainer_on_a_function_with_categorical_columns(credit):
    gbm = credit["gbm"]
    X = credit["X_test"].iloc[:12]

    def prob_good(frame):
        return gbm.predict_proba(frame)[:, list(gbm.classes_).index("good")]

    ad = make_adapter(prob_good, X, positive_label="good")
    assert ad.kind == "function"
    res, space, _ = explain(ad, X, background=20)
    assert res.explainer == "PermutationExplainer" and res.output_space == "probability"
    assert res.additivity_max_error < 1e-9  # efficiency holds by construction
    np.testing.assert_allclose(res.output, prob_good(X), atol=1e-12)
    assert space.features == list(X.columns)


def test_kernel_explainer_is_available(credit):
    X = credit["X_test"].iloc[:3]
    res = explain(make_adapter(credit["gbm"], X, positive_label="good"), X, explainer="kernel",
                  background=10)[0]
    assert res.explainer == "KernelExplainer"
    assert res.additivity_max_error < 1e-6


@pytest.mark.parametrize("name, expected", [
    ("cat__purpose_car (new)", "purpose"), ("remainder__age_in_years", "age_in_years"),
    ("credit_history_all credits at this bank paid back duly", "credit_history"),
    ("credit_amount", "credit_amount"), ("num__scaler__duration_in_month", "duration_in_month"),
    ("unrelated", None),
])
def test_map_transformed_names(name, expected):
    cols = ["purpose", "age_in_years", "credit_history", "credit_amount", "duration_in_month", "credit"]
    assert map_transformed_name(name, cols) == expected


def test_feature_space_groups_equals_columns():
    X = pd.DataFrame({"a": [1.0, 2.0], "b=x": [1.0, 0.0], "b=y": [0.0, 1.0]})
    ad = make_adapter(lambda f: np.full(len(f), 0.5), X, positive_label=1)
    sp = feature_space(ad, X, 3)
    assert sp.features == ["a", "b"] and sp.members == {"a": [0], "b": [1, 2]}
    assert sp.describe() == {"b": ["b=x", "b=y"]}


@pytest.mark.parametrize("explainer, match", [
    ("deep", r"explainer='deep' does not apply to a tree model; use one of kernel, permutation, tree"),
    ("magic", r"explainer='magic': expected one of auto, tree, linear"),
])
def test_bad_explainer(credit, explainer, match):
    X = credit["X_test"].iloc[:5]
    with pytest.raises(InvalidInputError, match=match):
        explain(make_adapter(credit["gbm"], X, positive_label="good"), X, explainer=explainer)


@pytest.mark.parametrize("background, match", [
    (0, r"background=0: expected a number of rows \(1 to 10000\)"),
    (True, r"background=True"),
    (np.zeros((5, 3)), r"background: shape \(5, 3\); expected \(rows, 4\)"),
])
def test_bad_background(background, match):
    from sklearn.linear_model import LogisticRegression

    X = np.random.default_rng(0).normal(size=(40, 4))
    y = (X[:, 0] > 0).astype(int)
    lr = LogisticRegression().fit(X, y)
    with pytest.raises(InvalidInputError, match=match):
        explain(make_adapter(lr, X, positive_label=1), X, background=background)
