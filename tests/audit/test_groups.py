"""Sensitive attributes: age binning (documented edges), derived sex, categorical groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from debugkit.audit.groups import (
    AGE_BINS,
    MISSING,
    Attribute,
    bin_labels,
    bin_values,
    derive_sex,
    is_age_name,
    quantile_edges,
    resolve_sensitive,
)
from debugkit.errors import InvalidInputError


def test_default_age_bins_are_the_documented_ones():
    assert AGE_BINS == (25, 35, 45, 60)
    assert bin_labels(AGE_BINS, integer=True) == ["<25", "25-34", "35-44", "45-59", "60+"]


@pytest.mark.parametrize("age, group", [(19, "<25"), (24, "<25"), (25, "25-34"), (34, "25-34"),
                                        (35, "35-44"), (44, "35-44"), (45, "45-59"), (59, "45-59"),
                                        (60, "60+"), (75, "60+")])
def test_age_edges_belong_to_the_bin_they_start(age, group):
    labels, order = bin_values(np.array([age]), AGE_BINS)
    assert labels[0] == group
    assert order == [group]


def test_binning_order_counts_and_missing():
    labels, order = bin_values(np.array([67, 22, 49, np.nan, 25, 24, 60]), AGE_BINS)
    assert labels.tolist() == ["60+", "<25", "45-59", MISSING, "25-34", "<25", "60+"]
    assert order == ["<25", "25-34", "45-59", "60+", MISSING]


def test_non_integer_labels():
    assert bin_labels([2.5, 3.5], integer=False) == ["<2.5", "[2.5, 3.5)", ">=3.5"]


def test_german_credit_age_groups(credit):
    X = credit["X"]
    [a] = resolve_sensitive(["age_in_years"], X, len(X), list(X.columns))
    counts = pd.Series(a.groups).value_counts().to_dict()
    assert counts == {"<25": 149, "25-34": 399, "35-44": 251, "45-59": 150, "60+": 51}
    assert a.order == ["<25", "25-34", "35-44", "45-59", "60+"]
    assert a.binning == {"rule": "age groups (debugkit default)", "edges": [25.0, 35.0, 45.0, 60.0],
                         "labels": ["<25", "25-34", "35-44", "45-59", "60+"], "right_open": True}
    assert a.source_features == ["age_in_years"]


def test_sex_derived_from_personal_status(credit):
    X = credit["X"]
    [s] = resolve_sensitive(["sex"], X, len(X), list(X.columns))
    assert s.derived_from == "personal_status_and_sex"
    assert s.order == ["female", "male"]
    assert pd.Series(s.groups).value_counts().to_dict() == {"male": 690, "female": 310}
    assert s.source_features == ["personal_status_and_sex"]
    assert derive_sex(["female : divorced/separated/married", "male : single"]).tolist() == ["female", "male"]


def test_sex_from_one_hot_columns():
    X = pd.DataFrame({"personal_status_and_sex=male : single": [1.0, 0.0, 0.0],
                      "personal_status_and_sex=female : divorced/separated/married": [0.0, 1.0, 0.0],
                      "personal_status_and_sex=male : married/widowed": [0.0, 0.0, 1.0]})
    [s] = resolve_sensitive(["sex"], X, 3, ["personal_status_and_sex"])
    assert s.groups.tolist() == ["male", "female", "male"]
    assert s.source_features == ["personal_status_and_sex"]


def test_categorical_as_is_and_quartiles_for_other_continuous():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"fw": ["yes", "no", "yes", "yes"] * 25, "income": rng.integers(1000, 9000, 100)})
    fw, inc = resolve_sensitive(["fw", "income"], X, 100, ["fw", "income"])
    assert fw.binning is None and fw.order == ["no", "yes"]
    assert inc.binning["rule"] == "quartiles (debugkit default)"
    assert inc.binning["edges"] == quantile_edges(X["income"].to_numpy(), 4)
    assert len(inc.order) == 4


def test_group_bins_and_attribute_override():
    X = pd.DataFrame({"age": [20, 30, 40, 50] * 5})
    [a] = resolve_sensitive(["age"], X, 20, ["age"], group_bins={"age": [30]})
    assert a.order == ["<30", "30+"] and a.binning["rule"] == "given cut points"
    [b] = resolve_sensitive({"age": Attribute(column="age", bins=[40], reference="40+")}, X, 20, ["age"])
    assert b.order == ["<40", "40+"] and b.reference == "40+"
    [c] = resolve_sensitive(["age"], X, 20, ["age"], group_bins={"age": 2})
    assert c.binning["rule"] == "2 quantile bins"


def test_values_given_directly():
    X = pd.DataFrame({"a": [0.1, 0.2, 0.3]})
    [g] = resolve_sensitive({"group": ["x", "y", "x"]}, X, 3, ["a"])
    assert g.groups.tolist() == ["x", "y", "x"] and g.source_features == []


@pytest.mark.parametrize("name", ["age", "age_in_years", "applicant_age", "Age"])
def test_age_names(name):
    assert is_age_name(name)


@pytest.mark.parametrize("name", ["stage", "page_views", "agency"])
def test_not_age_names(name):
    assert not is_age_name(name)


X_BAD = pd.DataFrame({"age": [20, 30, 40, 50], "fw": ["a", "b", "a", "b"],
                      "status": ["x", "y", "x", "y"]})


@pytest.mark.parametrize("sensitive, bins, match", [
    (["nope"], None, r"sensitive attribute 'nope': not a column of X \(columns: age, fw, status\)"),
    (["sex"], None, r"sensitive attribute 'sex': not a column of X"),
    ({"g": [1, 2]}, None, r"sensitive attribute 'g': 2 values for 4 rows of X"),
    (["age"], {"age": [30, 20]}, r"group_bins\['age'\]=\[30, 20\]: expected finite, strictly increasing"),
    (["age"], {"age": 1}, r"group_bins\['age'\]=1: expected between 2 and 20 quantile bins"),
    (["age"], {"age": "young"}, r"group_bins\['age'\]='young': expected a list of cut points"),
    (["fw"], {"fw": [1]}, r"group_bins\['fw'\]: the attribute is not numeric"),
    (["age"], {"other": [1]}, r"group_bins: 'other' not among the sensitive attributes"),
    ([], None, r"sensitive: no sensitive attribute given"),
    ({"g": 5}, None, r"sensitive attribute 'g': expected a column name, an array"),
    ({"": "age"}, None, r"sensitive attribute name '': expected a non-empty string"),
])
def test_bad_sensitive_specs(sensitive, bins, match):
    with pytest.raises(InvalidInputError, match=match):
        resolve_sensitive(sensitive, X_BAD, 4, list(X_BAD.columns), bins)


def test_derive_sex_refuses_values_without_colon():
    with pytest.raises(InvalidInputError, match=r"cannot derive sex from 'single male' in column 'ps'"):
        derive_sex(["male : single", "single male"], "ps")
