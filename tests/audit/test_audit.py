"""audit_model end to end: the stored document, its numbers, immutability, provenance,
verdicts, and refusals of bad input."""

from __future__ import annotations

import inspect
import json
import os
import stat

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import MetricFrame, demographic_parity_difference, selection_rate, true_positive_rate

from debugkit.audit import Auditor, audit_model, list_audits, load_audit
from debugkit.audit.stored_audits import canonical_bytes, content_id
from debugkit.errors import AuditError, InvalidInputError, RunDirError

SENSITIVE = ["age_in_years", "sex", "foreign_worker"]
GROUP_KEYS = {"count", "base_rate", "selection_rate", "tpr", "fpr", "fnr", "precision", "accuracy"}


def test_signature_is_the_documented_one():
    sig = inspect.signature(audit_model)
    assert [(p.name, p.kind.name, p.default) for p in sig.parameters.values()] == [
        ("model", "POSITIONAL_OR_KEYWORD", inspect._empty), ("X", "POSITIONAL_OR_KEYWORD", inspect._empty),
        ("y", "POSITIONAL_OR_KEYWORD", inspect._empty), ("sensitive", "KEYWORD_ONLY", inspect._empty),
        ("run_dir", "KEYWORD_ONLY", inspect._empty), ("name", "KEYWORD_ONLY", inspect._empty),
        ("positive_label", "KEYWORD_ONLY", 1), ("predict", "KEYWORD_ONLY", None),
        ("explainer", "KEYWORD_ONLY", "auto"), ("background", "KEYWORD_ONLY", 100),
        ("group_bins", "KEYWORD_ONLY", None)]


@pytest.fixture(scope="module")
def gbm_audit(credit, tmp_path_factory):
    from .conftest import record_run

    run = record_run(tmp_path_factory.mktemp("gbm") / "run")
    audit = audit_model(credit["gbm"], credit["X_test"], credit["y_test"], sensitive=SENSITIVE,
                        run_dir=run, name="GBM", positive_label="good")
    return run, audit


def test_document_has_the_issue_fields(gbm_audit):
    _, audit = gbm_audit
    doc = audit.doc
    assert {"id", "model", "dataset", "sensitive", "shap", "flags", "verdict"} <= set(doc)
    assert set(doc["sensitive"]) == set(SENSITIVE)
    for attr in doc["sensitive"].values():
        assert {"groups", "reference_group", "demographic_parity_difference", "demographic_parity_ratio",
                "equalized_odds_difference", "equal_opportunity_difference", "disparities",
                "verdict"} <= set(attr)
        for g in attr["groups"].values():
            assert set(g) == GROUP_KEYS
    assert {"explainer", "output", "additivity_max_error", "mean_abs"} <= set(doc["shap"])
    assert doc["shap"]["explainer"] == "TreeExplainer" and doc["shap"]["output"] == "log-odds"
    assert doc["shap"]["additivity_max_error"] < 1e-6
    assert list(doc["shap"]["mean_abs"]) == sorted(doc["shap"]["mean_abs"], key=doc["shap"]["mean_abs"].get,
                                                   reverse=True)
    assert doc["verdict"] in ("pass", "needs_review", "fail")


def test_numbers_equal_fairlearn_and_the_stored_rows(gbm_audit, credit):
    _, audit = gbm_audit
    rows = audit.rows
    yt = (credit["y_test"] == "good").to_numpy(dtype=int)
    yp = (credit["gbm"].predict(credit["X_test"]) == "good").astype(int)
    assert rows["y_true"].tolist() == yt.tolist() and rows["y_pred"].tolist() == yp.tolist()
    age = audit.doc["sensitive"]["age_in_years"]
    g = rows["group:age_in_years"].to_numpy(dtype=object)
    mf = MetricFrame(metrics={"selection_rate": selection_rate, "tpr": true_positive_rate},
                     y_true=yt, y_pred=yp, sensitive_features=g).by_group
    for grp in age["order"]:
        assert age["groups"][grp]["selection_rate"] == pytest.approx(mf.loc[grp, "selection_rate"], abs=1e-12)
        assert age["groups"][grp]["tpr"] == pytest.approx(mf.loc[grp, "tpr"], abs=1e-12)
    assert age["demographic_parity_difference"] == pytest.approx(
        demographic_parity_difference(yt, yp, sensitive_features=g), abs=1e-12)
    assert age["reference_group"] == "25-34"  # the largest group
    assert {grp: age["groups"][grp]["count"] for grp in age["order"]} == \
        {"<25": 62, "25-34": 148, "35-44": 103, "45-59": 64, "60+": 23}
    d = age["disparities"]["<25"]["selection_rate"]
    assert d["ratio"] == pytest.approx(age["groups"]["<25"]["selection_rate"] /
                                       age["groups"]["25-34"]["selection_rate"])
    assert d["ratio_ci"][0] < d["ratio"] < d["ratio_ci"][1]
    # SHAP rows add up to the stored output
    sv = audit.shap_values().to_numpy()
    np.testing.assert_allclose(sv.sum(axis=1) + audit.doc["shap"]["base_value"], rows["output"], atol=1e-9)


def test_stored_immutably_under_a_content_id(gbm_audit):
    run, audit = gbm_audit
    assert audit.path == run / "audits" / audit.id
    assert audit.id == content_id(audit.doc) and len(audit.id) == 16
    for p in audit.path.iterdir():
        assert not (p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)), p
    assert json.loads((audit.path / "audit.json").read_bytes()) == audit.doc
    again = load_audit(run, audit.id)
    assert again.doc == audit.doc and again.json_sha256 == audit.json_sha256
    assert [e["id"] for e in list_audits(run)] == [audit.id]


def test_same_audit_again_returns_the_stored_one(gbm_audit, credit):
    run, audit = gbm_audit
    again = audit_model(credit["gbm"], credit["X_test"], credit["y_test"], sensitive=SENSITIVE,
                        run_dir=run, name="GBM", positive_label="good")
    assert again.id == audit.id
    assert len(list_audits(run)) == 1


def test_provenance(gbm_audit, credit):
    from debugkit.audit.model_adapters import model_fingerprint

    run, audit = gbm_audit
    p = audit.doc["provenance"]
    assert p["run"]["name"] == "audit-test"
    assert p["model_sha256"] == model_fingerprint(credit["gbm"])["sha256"] == audit.doc["model"]["sha256"]
    assert {"debugkit", "shap", "fairlearn", "sklearn", "numpy", "pandas", "python"} <= set(p["versions"])
    assert p["thresholds"]["band"] == [0.8, 1.25] and p["thresholds"]["n_boot"] == 1000
    assert "@" in p["created_by"] and p["created_at"].endswith("+00:00")
    assert audit.doc["dataset"]["rows"] == 400 and len(audit.doc["dataset"]["columns"]) == 20
    assert audit.doc["sensitive"]["age_in_years"]["binning"]["edges"] == [25.0, 35.0, 45.0, 60.0]
    assert p["checkpoint"] is None  # a sklearn model has no checkpoint file in the run


@pytest.mark.parametrize("what", ["audit.json", "rows.parquet"])
def test_tampering_is_detected(gbm_audit, tmp_path, what):
    import shutil

    run, audit = gbm_audit
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    target = copy / "audits" / audit.id / what
    os.chmod(target, 0o644)
    if what == "audit.json":
        doc = json.loads(target.read_text())
        doc["sensitive"]["sex"]["demographic_parity_difference"] = 0.0
        target.write_text(json.dumps(doc, indent=2))
    else:
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    with pytest.raises(AuditError, match=rf"audit {audit.id}: {what} was modified after the audit was stored"):
        load_audit(copy, audit.id)


def test_unknown_and_malformed_ids(gbm_audit):
    run, audit = gbm_audit
    with pytest.raises(AuditError, match=rf"no audit with id '0000000000000000' \(stored: {audit.id}\)"):
        load_audit(run, "0000000000000000")
    with pytest.raises(InvalidInputError, match=r"audit id '../etc': expected 16 lowercase hex digits"):
        load_audit(run, "../etc")


def _synthetic(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    group = np.where(rng.random(n) < 0.5, "A", "B")
    x1 = rng.normal(size=n)
    noise = rng.normal(size=n)
    return group, x1, noise


def test_fair_model_passes_and_biased_model_fails(run_dir):
    from sklearn.linear_model import LogisticRegression

    group, x1, noise = _synthetic(n=4000)
    y = (x1 + noise > 0).astype(int)
    X = pd.DataFrame({"x1": x1, "x2": np.random.default_rng(5).normal(size=len(x1))})
    fair = LogisticRegression().fit(X, y)
    a = Auditor({"n_boot": 300}).audit_model(fair, X, y, sensitive={"group": group}, run_dir=run_dir,
                                             name="fair")
    assert a.doc["sensitive"]["group"]["verdict"] == "pass", a.reasons
    assert a.verdict == "pass" and a.doc["flags"] == [] and a.reasons == []
    # A model that sees the group and was trained on labels that favour group A.
    y_biased = ((x1 + noise + np.where(group == "A", 1.0, -1.0)) > 0).astype(int)
    Xb = X.assign(group_b=(group == "B").astype(float))
    biased = LogisticRegression().fit(Xb, y_biased)
    b = Auditor({"n_boot": 300}).audit_model(biased, Xb, y, sensitive={"group_b": Xb["group_b"]},
                                             run_dir=run_dir, name="biased")
    attr = b.doc["sensitive"]["group_b"]
    assert attr["verdict"] == "fail" and b.verdict == "fail"
    assert attr["disparities"]["1"]["selection_rate"]["judgement"] == "outside"
    assert attr["summary_judgement"]["demographic_parity_ratio"] == "outside"
    assert any(f["kind"] == "sensitive_feature" and f["feature"] == "group_b" and f["rank"] == 1
               for f in b.doc["flags"])
    assert b.doc["shap"]["by_group"]["group_b"]["1"]["group_b"] < 0 < \
        b.doc["shap"]["by_group"]["group_b"]["0"]["group_b"]
    flag = next(f for f in b.doc["flags"] if f["feature"] == "group_b")
    assert "it pushes group_b=1 toward the negative outcome" in flag["message"]
    assert len(list_audits(run_dir)) == 2


def test_proxy_is_flagged(run_dir):
    from sklearn.linear_model import LogisticRegression

    group, x1, noise = _synthetic(seed=1)
    zip_area = np.where(group == "A", 1.0, 0.0)
    flip = np.random.default_rng(2).random(len(group)) < 0.1
    zip_area[flip] = 1 - zip_area[flip]  # 90 % aligned with the group: a proxy
    y = ((x1 + zip_area) > 0.5).astype(int)
    X = pd.DataFrame({"x1": x1, "zip_area": zip_area})
    lr = LogisticRegression().fit(X, y)
    a = Auditor({"n_boot": 100}).audit_model(lr, X, y, sensitive={"group": group}, run_dir=run_dir,
                                             name="proxy")
    flags = [f for f in a.doc["flags"] if f["kind"] == "proxy"]
    assert [f["feature"] for f in flags] == ["zip_area"]
    assert flags[0]["association"] == pytest.approx(0.8, abs=0.05) and flags[0]["measure"] == "Cramér's V"
    assert "likely proxy of group" in flags[0]["message"]


def test_torch_audit_finds_its_checkpoint(run_dir, credit):
    import torch
    from safetensors.torch import save_file

    from examples.credit import build_mlp, encode, fit_encoder, mlp_sensitive

    enc = fit_encoder(credit["X"].iloc[credit["train"]])
    X = credit["X_test"].iloc[:80].reset_index(drop=True)
    y = credit["y_test"].iloc[:80].reset_index(drop=True)
    torch.manual_seed(0)
    net = build_mlp(len(encode(X.iloc[:1], enc).columns))
    (run_dir / "models").mkdir()
    save_file(net.state_dict(), str(run_dir / "models" / "net.safetensors"))
    a = Auditor({"n_boot": 50}).audit_model(net, encode(X, enc), y, sensitive=mlp_sensitive(X),
                                            run_dir=run_dir, name="mlp", positive_label="good",
                                            background=20)
    assert a.doc["provenance"]["checkpoint"]["path"] == "models/net.safetensors"
    assert a.doc["shap"]["explainer"] == "DeepExplainer"
    assert a.doc["model"]["decision"] == "logit >= 0 (probability >= 0.5)"
    assert a.doc["sensitive"]["sex"]["source_features"] == ["personal_status_and_sex"]
    assert "personal_status_and_sex" in a.doc["shap"]["mean_abs"]


def test_progress_reaches_one(run_dir):
    from sklearn.linear_model import LogisticRegression

    group, x1, noise = _synthetic(n=300)
    X = pd.DataFrame({"x1": x1})
    y = (x1 > 0).astype(int)
    seen = []
    Auditor({"n_boot": 20}, progress=lambda f, m: seen.append((f, m))).audit_model(
        LogisticRegression().fit(X, y), X, y, sensitive={"g": group}, run_dir=run_dir, name="p")
    fr = [f for f, _ in seen]
    assert fr == sorted(fr) and fr[0] == 0.0 and fr[-1] == 1.0
    assert seen[-1][1].startswith("Stored audit")


@pytest.fixture
def small(run_dir):
    from sklearn.linear_model import LogisticRegression

    group, x1, _ = _synthetic(n=200)
    X = pd.DataFrame({"x1": x1})
    y = (x1 > 0).astype(int)
    return LogisticRegression().fit(X, y), X, y, group, run_dir


@pytest.mark.parametrize("change, error, match", [
    (lambda m, X, y, g, r: dict(y=np.arange(len(y)) % 3), InvalidInputError,
     r"y: the audit needs a binary outcome; found 3 distinct values"),
    (lambda m, X, y, g, r: dict(positive_label=7), InvalidInputError,
     r"positive_label=7 does not occur in y \(values: 0, 1\)"),
    (lambda m, X, y, g, r: dict(y=y[:10]), InvalidInputError, r"y: 10 values for 200 rows of X"),
    (lambda m, X, y, g, r: dict(X=X.iloc[:5], y=y[:5]), InvalidInputError, r"X: 5 rows; an audit needs at least 10"),
    (lambda m, X, y, g, r: dict(name=""), InvalidInputError, r"name='': expected a non-empty string"),
    (lambda m, X, y, g, r: dict(run_dir=r / "nope"), RunDirError, r"not a debugkit run directory"),
    (lambda m, X, y, g, r: dict(sensitive={"g": ["same"] * 200}), InvalidInputError,
     r"sensitive attribute 'g': every row is in group 'same'"),
    (lambda m, X, y, g, r: dict(model=object()), InvalidInputError,
     r"model builtins.object: not a binary classifier debugkit can audit"),
    (lambda m, X, y, g, r: dict(predict="yes"), InvalidInputError, r"predict='yes': expected a function"),
])
def test_bad_inputs(small, change, error, match):
    model, X, y, group, run = small
    kw = dict(model=model, X=X, y=y, sensitive={"g": group}, run_dir=run, name="bad")
    kw.update(change(model, X, y, group, run))
    before = sorted(p.name for p in run.rglob("*"))
    with pytest.raises(error, match=match):
        audit_model(kw.pop("model"), kw.pop("X"), kw.pop("y"), **kw)
    assert sorted(p.name for p in run.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("settings, match", [
    ({"band": (1.2, 0.8)}, r"audit setting band=\(1.2, 0.8\): expected \(low, high\) with 0 < low <= 1 <= high"),
    ({"n_boot": -1}, r"audit setting n_boot=-1: expected an integer in \[0, 100000\]"),
    ({"judged_metrics": ["auc"]}, r"audit setting judged_metrics=\['auc'\]"),
    ({"bogus": 1}, r"audit settings: unknown field\(s\) bogus"),
    ({"reference": {"g": 3}}, r"audit setting reference="),
])
def test_bad_settings(settings, match):
    with pytest.raises(InvalidInputError, match=match):
        Auditor(settings)


def test_reference_group_must_exist(small):
    model, X, y, group, run = small
    with pytest.raises(InvalidInputError, match=r"reference group 'C' of 'g': not among its groups \(A, B\)"):
        Auditor({"reference": {"g": "C"}}).audit_model(model, X, y, sensitive={"g": group}, run_dir=run,
                                                       name="r")


def test_canonical_form_ignores_the_id_field():
    assert canonical_bytes({"id": "x", "b": 1, "a": [1.5, None]}) == b'{"a":[1.5,null],"b":1}'
