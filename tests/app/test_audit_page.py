"""AppTest of the Audit page: the normal view, computing an audit, and share links that
show the audit alone (or one refusal) whatever page the URL names."""

from __future__ import annotations

import shutil
import time

import pytest
from streamlit.testing.v1 import AppTest

from debugkit.audit import list_audits, make_token
from debugkit.audit.share import MSG_EXPIRED, MSG_MALFORMED, MSG_SIGNATURE, server_secret
from debugkit.io.served_runs import default_store

from ..conftest import SAMPLE_RUNS
from ._apptest import figures, new_app

SAMPLE = "credit-audit"


def app() -> AppTest:
    return new_app(timeout=240)


@pytest.fixture(scope="module")
def ids():
    return [e["id"] for e in list_audits(SAMPLE_RUNS / SAMPLE)]


def _failing(ids) -> str:
    """The sample's failing audit: older than its needs-review one, shown first."""
    verdicts = {e["id"]: e["verdict"] for e in list_audits(SAMPLE_RUNS / SAMPLE)}
    assert [verdicts[i] for i in ids] == ["needs_review", "fail"]
    return ids[1]


def texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [t.value for t in at.title]
    parts += [e.value for e in at.error] + [w.value for w in at.warning] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


@pytest.mark.slow
def test_normal_view_shows_verdict_charts_and_provenance(ids):
    at = app()
    at.query_params["run"] = SAMPLE
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Bias audit"]
    assert [s.label for s in at.selectbox][:1] == ["Audit"]
    assert at.selectbox[0].value == _failing(ids)  # the failing audit first, not the newest
    assert any("Verdict:" in str(b.value) for b in list(at.error) + list(at.warning) + list(at.success))
    # the open group tab's disparity chart first and alone; the rates, the SHAP summary and
    # the per-attribute SHAP charts when opened (14 charts before, then 6: the open tabs')
    assert [c.key for c in at.get("plotly_chart")] == ["disp_age_in_years"]
    assert "Largest mean |SHAP|: **" in texts(at)  # the top features in words, charts closed
    for key in ("audit_rates_open", "audit_shap_open", "audit_shap_groups_open"):
        at.session_state[key] = True  # as a click on each expander does
    at.run()
    assert not at.exception
    assert [c.key for c in at.get("plotly_chart")] == [
        "disp_age_in_years", "bars_age_in_years", "beeswarm", "mean_abs", "dep_age_in_years",
        "bygroup_age_in_years"]
    assert {k: at.query_params[k] for k in ("rates", "shap", "shap_groups")} == \
        {"rates": "1", "shap": "1", "shap_groups": "1"}
    assert "four-fifths" in texts(at)
    assert "credit-audit · change" in [e.label for e in at.sidebar.expander]  # the normal sidebar
    assert {"pages/home.py", "pages/overview.py", "pages/audit.py"} <= at.session_state["debugkit_pages"]
    assert "Compute a new audit" in [e.label for e in at.expander]


@pytest.mark.slow
def test_audit_query_param_picks_the_audit(ids):
    at = app()
    at.query_params["run"] = SAMPLE
    at.query_params["audit"] = ids[-1]
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    assert at.selectbox[0].value == ids[-1]


def test_unknown_audit_param_warns_and_shows_the_newest(ids):
    at = app()
    at.query_params["run"] = SAMPLE
    at.query_params["audit"] = "<script>"
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    assert any("is not stored in this run; showing the first failing audit, or the newest" in w.value
               for w in at.warning)
    assert at.selectbox[0].value == _failing(ids)


def test_run_without_audits_explains_what_to_do():
    at = app()
    at.query_params["run"] = "digits-mlp"
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    assert "No audit stored in this run yet" in texts(at)
    assert "declares no audit target" in texts(at)


@pytest.mark.slow
def test_compute_an_audit_from_the_page(tmp_path, monkeypatch):
    root = tmp_path / "runs"
    root.mkdir()
    run = root / SAMPLE
    shutil.copytree(SAMPLE_RUNS / SAMPLE, run, ignore=shutil.ignore_patterns("audits"))
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(root))
    at = app()
    at.query_params["run"] = SAMPLE
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    assert "No audit stored in this run yet" in texts(at)
    next(n for n in at.number_input if n.label == "Bootstrap resamples").set_value(100)
    model = next(s for s in at.selectbox if s.label == "Model")
    assert model.options == ["Gradient boosting (sklearn pipeline, retrained with seed 0)",
                             "Torch MLP (this run's models/mlp.safetensors)"]
    next(b for b in at.button if b.label == "Compute audit").click()
    at.run()
    assert not at.exception, at.exception
    stored = list_audits(run)
    assert len(stored) == 1
    assert any(f"Stored audit {stored[0]['id']}" in s.value for s in at.success)
    assert at.query_params["audit"] == stored[0]["id"]
    from debugkit.audit import load_audit

    doc = load_audit(run, stored[0]["id"]).doc
    assert doc["provenance"]["thresholds"]["n_boot"] == 100 and doc["shap"]["explainer"] == "TreeExplainer"


# ---------------------------------------------------------------------------- share links
def shared(run_id, audit_id, token, page="pages/audit.py", extra=None) -> AppTest:
    at = app()
    at.query_params["run"] = run_id
    at.query_params["audit"] = audit_id
    at.query_params["token"] = token
    for k, v in (extra or {}).items():
        at.query_params[k] = v
    if page:
        at.switch_page(page)
    at.run()
    return at


def token(audit_id, run_id=SAMPLE, expires_in=3600):
    return make_token(run_id, audit_id, int(time.time()) + expires_in, server_secret(default_store()))


def assert_audit_alone(at, audit_id):
    assert not at.exception
    assert at.session_state["debugkit_pages"] == {"pages/audit.py"}
    titles = [t.value for t in at.title]
    assert len(titles) == 1 and titles[0].startswith("Bias audit: ")
    assert f"Shared read-only view of audit `{audit_id}`" in texts(at)
    assert len(at.sidebar) == 0  # no run picker, no upload, no navigation
    labels = [s.label for s in at.selectbox]
    assert "Open a run" not in labels and "Audit" not in labels
    assert "Compute a new audit" not in [e.label for e in at.expander]
    assert not [b for b in at.button if b.label in ("Compute audit", "Create link")]
    # the open tab's disparity chart first (the others are drawn when opened)
    assert [c.key for c in at.get("plotly_chart")][0].startswith("disp_")


def test_valid_share_link_shows_only_the_audit(ids):
    at = shared(SAMPLE, ids[0], token(ids[0]))
    assert_audit_alone(at, ids[0])


def test_a_shared_view_shows_nothing_about_the_recording_machine(ids):
    """Issue 22: the shared page and its JSON showed the command line, paths and
    ``Computed by root@vm``. A shared view leaves them out (SHARED_OMITS)."""
    import json as _json

    from debugkit.audit.stored_audits import load_audit

    full = load_audit(SAMPLE_RUNS / SAMPLE, ids[0])
    prov = full.doc["provenance"]
    secrets = [prov["created_by"], " ".join(prov["command"]), prov["run"]["path"]]
    at = shared(SAMPLE, ids[0], token(ids[0]))
    shown = texts(at) + "\n".join(t.value.to_csv() for t in at.table)
    for s in secrets:
        assert s not in shown
    assert "are not shared" in shown and full.json_sha256 in shown
    from debugkit.audit.share import shared_view

    view = shared_view(full)
    raw = view.json_bytes().decode()
    for s in (prov["created_by"], prov["run"]["path"]) + tuple(prov["command"]):
        assert s not in raw
    doc = _json.loads(raw)
    assert doc["shared_view"]["full_audit_sha256"] == full.json_sha256
    assert doc["verdict"] == full.doc["verdict"] and doc["sensitive"] == full.doc["sensitive"]
    from debugkit.audit import report as rep

    html = rep.build_report_html(view)
    assert prov["created_by"] not in html and view.json_sha256 in html


@pytest.mark.slow
@pytest.mark.parametrize("page", ["pages/overview.py", "pages/home.py", None])
def test_editing_the_url_to_another_page_keeps_the_audit_alone(ids, page):
    at = shared(SAMPLE, ids[-1], token(ids[-1]), page=page)
    assert_audit_alone(at, ids[-1])
    assert "Steps" not in figures(at)  # not the Overview
    assert "Runs" not in [s.value for s in at.subheader]  # not Home


def refused(at, match):
    assert not at.exception
    assert len(at.error) == 1 and match in at.error[0].value
    assert at.error[0].value.startswith("This share link cannot be opened: ")
    assert not at.title and not at.get("plotly_chart") and not at.markdown and not at.selectbox
    assert len(at.sidebar) == 0
    assert at.session_state["debugkit_pages"] == set()


@pytest.mark.parametrize("case, match", [
    ("altered", MSG_SIGNATURE),
    ("expired", MSG_EXPIRED.split("{when}")[0]),  # "this share link expired on "
    ("other audit", MSG_SIGNATURE),
    ("other run", MSG_SIGNATURE),
    ("malformed", MSG_MALFORMED),
])
def test_bad_links_show_one_refusal(ids, case, match):
    run_id, audit_id = SAMPLE, ids[0]
    tok = token(audit_id)
    if case == "altered":
        tok = tok[:-2] + ("AA" if tok[-2:] != "AA" else "BB")
    elif case == "expired":
        tok = token(audit_id, expires_in=-10)
    elif case == "other audit":
        audit_id = ids[-1]
    elif case == "other run":
        run_id = "digits-mlp"
    else:
        tok = "v1.not-a-token"
    refused(shared(run_id, audit_id, tok), match)


def test_a_valid_token_for_a_run_that_is_gone(ids):
    at = shared("no-such-run", ids[0], token(ids[0], run_id="no-such-run"))
    refused(at, "no longer available")


def test_refusal_on_another_page_path_too(ids):
    tok = token(ids[0])
    tok = tok[:-1] + ("B" if tok[-1] == "A" else "A")  # always a different token (1 in 64 ended in "A")
    refused(shared(SAMPLE, ids[0], tok, page="pages/overview.py"), "altered")


def test_share_only_server_refuses_plain_visits(monkeypatch):
    monkeypatch.setenv("DEBUGKIT_SHARE_ONLY", "1")
    at = app()
    at.run()
    refused(at, "this server only opens share links")


@pytest.mark.slow
def test_share_button_makes_a_link_that_verifies(ids):
    import urllib.parse

    from debugkit.audit import verify_token

    at = app()
    at.query_params["run"] = SAMPLE
    at.switch_page("pages/audit.py")
    at.run()
    next(t for t in at.text_input if t.label == "Dashboard address").set_value("https://dk.example.org")
    next(b for b in at.button if b.label == "Create link").click()
    at.run()
    assert not at.exception
    link = next(c.value for c in at.code if c.value.startswith("https://dk.example.org/audit?"))
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))
    # the page opens on the failing audit, so the link shares that one
    assert q["run"] == SAMPLE and q["audit"] == _failing(ids)
    exp = verify_token(q["token"], SAMPLE, _failing(ids), server_secret(default_store()))
    assert 13 * 86400 < exp - time.time() <= 14 * 86400


@pytest.mark.slow
def test_share_popover_says_what_the_recipient_reaches_on_an_open_server(ids, monkeypatch):
    from pages._share import SHARE_REACH_AUTH, SHARE_REACH_OPEN

    monkeypatch.setenv("DEBUGKIT_BASE_URL", "http://reviewers.example.org:8502")
    at = app()
    at.query_params["run"] = SAMPLE
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    captions = [c.value for c in at.caption]
    assert SHARE_REACH_OPEN in captions  # no [auth]: every page is open to anyone
    assert SHARE_REACH_AUTH not in captions
    assert "debugkit ui --share-only" in SHARE_REACH_OPEN
    base = next(t for t in at.text_input if t.label == "Dashboard address")
    assert base.value == "http://reviewers.example.org:8502"


# ---------------------------------------------------------------------------- the view in the URL
def _open_tabs(node) -> list[int]:
    """The open tab (``default_tab_index``) of every tab container on the page, in page order."""
    out = []
    proto = getattr(node, "proto", None)
    if proto is not None and hasattr(proto, "DESCRIPTOR") and proto.DESCRIPTOR.name == "Block" \
            and proto.WhichOneof("type") == "tab_container":
        out.append(proto.tab_container.default_tab_index)
    for child in getattr(node, "children", {}).values():
        out += _open_tabs(child)
    return out


def _audit_page(**query) -> AppTest:
    at = app()
    for k, v in query.items():
        at.query_params[k] = v
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    return at


@pytest.mark.slow
def test_the_open_attribute_tabs_round_trip_through_the_url(ids):
    at = _audit_page(run=SAMPLE)
    # the failing audit opens on its failing attribute, age_in_years (the first); the SHAP
    # charts per attribute are drawn when opened
    assert _open_tabs(at._tree) == [0]
    at.session_state["audit_shap_groups_open"] = True
    at.session_state["audit_rates_open"] = True
    at.run()
    assert _open_tabs(at._tree) == [0, 0]
    assert "attr" not in at.query_params and "shap_attr" not in at.query_params
    at.session_state["audit_attr_tab"] = "sex · Needs review"  # as a click on the tab does
    at.session_state["audit_shap_tab"] = "foreign_worker"
    at.run()
    assert not at.exception
    assert at.query_params["attr"] == "sex" and at.query_params["shap_attr"] == "foreign_worker"
    keys = [c.key for c in at.get("plotly_chart")]
    assert {"disp_sex", "bars_sex", "bygroup_foreign_worker"} <= set(keys)
    assert not [k for k in keys if k.endswith("age_in_years")]  # the closed tabs' are not sent
    again = _audit_page(run=SAMPLE, audit=_failing(ids), attr="sex", shap_attr="foreign_worker")
    assert _open_tabs(again._tree) == [1, 2]
    assert not again.warning


def test_an_attribute_the_audit_has_not_is_a_warning_and_the_default_tab(ids):
    at = _audit_page(run=SAMPLE, attr="<script>", shap_attr="income")
    warnings = [w.value for w in at.warning]
    assert ("?attr='\\<script>' is not one of 'age_in_years', 'sex', 'foreign_worker': showing the "
            "default instead.") in warnings
    assert ("?shap_attr='income' is not one of 'age_in_years', 'sex', 'foreign_worker': showing the "
            "default instead.") in warnings
    assert _open_tabs(at._tree) == [0, 0]
    assert "attr" not in at.query_params and "shap_attr" not in at.query_params


@pytest.mark.slow
def test_a_share_link_keeps_its_open_tabs_and_shows_nothing_more(ids):
    at, tok = app(), token(ids[0])
    for k, v in {"run": SAMPLE, "audit": ids[0], "token": tok, "attr": "foreign_worker",
                 "shap_attr": "sex"}.items():
        at.query_params[k] = v
    at.switch_page("pages/audit.py")
    at.run()
    assert_audit_alone(at, ids[0])
    assert _open_tabs(at._tree) == [2, 1]
    at.session_state["audit_attr_tab"] = "age_in_years · Needs review"
    at.run()
    assert_audit_alone(at, ids[0])  # a tab click stays in the shared view, with its token
    assert at.query_params["token"] == tok
    assert "attr" not in at.query_params  # the needs-review audit's default tab: the first
    assert at.query_params["shap_attr"] == "sex"


def test_a_share_link_on_another_path_carries_its_open_tabs_to_the_audit(ids):
    at, tok = app(), token(ids[0])
    for k, v in {"run": SAMPLE, "audit": ids[0], "token": tok, "attr": "sex"}.items():
        at.query_params[k] = v
    at.switch_page("pages/overview.py")
    at.run()
    assert_audit_alone(at, ids[0])
    assert _open_tabs(at._tree) == [1]  # the per-attribute SHAP tabs: drawn when opened
    assert at.query_params["attr"] == "sex" and at.query_params["token"] == tok


def test_a_share_link_made_on_a_tab_opens_the_recipient_on_it(ids):
    import urllib.parse

    at = _audit_page(run=SAMPLE, attr="foreign_worker")
    at.session_state["audit_shap_open"] = True  # the sender opened the SHAP summary
    at.run()
    next(b for b in at.button if b.label == "Create link").click()
    at.run()
    assert not at.exception
    link = next(c.value for c in at.code if "/audit?" in c.value)
    q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))
    assert q["attr"] == "foreign_worker" and q["shap"] == "1" and "shap_attr" not in q
    shown = shared(SAMPLE, q["audit"], q["token"], extra={"attr": q["attr"], "shap": q["shap"]})
    assert_audit_alone(shown, q["audit"])
    assert _open_tabs(shown._tree) == [2]
    assert [c.key for c in shown.get("plotly_chart")] == ["disp_foreign_worker", "beeswarm", "mean_abs"]
