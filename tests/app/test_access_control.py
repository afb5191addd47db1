"""Access control: off by default; with an `[auth]` section in secrets.toml every page
needs `st.login()` (OIDC) except a valid shared audit link."""

from __future__ import annotations

import time

import pytest
import streamlit
from streamlit.testing.v1 import AppTest

from debugkit.audit import list_audits, make_token
from debugkit.audit.share import server_secret
from debugkit.io.served_runs import default_store
from pages import _auth

from ..conftest import SAMPLE_RUNS
from ._apptest import figures, open_page

OIDC = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "not-a-real-secret",
        "client_id": "debugkit-test", "client_secret": "s3cret",
        "server_metadata_url": "https://id.example.com/.well-known/openid-configuration"}


def app(secrets=None, page=None, **query) -> AppTest:
    return open_page(page, auth=secrets, **query)


def shows_only_sign_in(at):
    assert [t.value for t in at.title] == ["debugkit"]
    assert "requires you to sign in" in at.markdown[0].value
    assert at.session_state["debugkit_pages"] == set()
    assert "Open a run" not in [s.label for s in at.selectbox]  # no run picker
    assert not figures(at) and not at.get("plotly_chart") and not at.dataframe


def test_without_auth_section_the_app_is_open():
    at = app(run="digits-bad-label", page="pages/overview.py")
    assert "Steps" in figures(at)
    assert "Sign out" not in [b.label for b in at.button]


@pytest.mark.parametrize("page", [None, "pages/overview.py", "pages/replay.py", "pages/audit.py"])
def test_with_auth_every_page_asks_to_sign_in(page):
    at = app(OIDC, page=page, run="digits-bad-label")
    shows_only_sign_in(at)
    assert [b.label for b in at.button] == ["Sign in"]


def test_named_providers_get_one_button_each():
    at = app({"redirect_uri": OIDC["redirect_uri"], "cookie_secret": "x",
              "google": {k: OIDC[k] for k in ("client_id", "client_secret", "server_metadata_url")},
              "okta": {k: OIDC[k] for k in ("client_id", "client_secret", "server_metadata_url")}})
    shows_only_sign_in(at)
    assert [b.label for b in at.button] == ["Sign in with Google", "Sign in with Okta"]


def test_sign_in_button_starts_the_oidc_flow(monkeypatch):
    calls = []
    monkeypatch.setattr(streamlit, "login", lambda *a: calls.append(a))
    at = app(OIDC)
    at.button(key="login_default").click().run()
    assert calls == [()]


def test_signed_in_user_sees_the_app_and_can_sign_out(monkeypatch):
    monkeypatch.setattr(_auth, "logged_in", lambda: True)
    out = []
    monkeypatch.setattr(streamlit, "logout", lambda: out.append(1))
    at = app(OIDC, run="digits-bad-label", page="pages/overview.py")
    assert "Steps" in figures(at)
    assert any("Signed in as" in c.value for c in at.sidebar.caption)
    at.button(key="logout").click().run()
    assert out == [1]


def test_a_valid_share_link_opens_without_signing_in():
    run = "credit-audit"
    audit_id = list_audits(SAMPLE_RUNS / run)[0]["id"]
    tok = make_token(run, audit_id, int(time.time()) + 3600, server_secret(default_store()))
    at = app(OIDC, page="pages/audit.py", run=run, audit=audit_id, token=tok)
    assert at.session_state["debugkit_pages"] == {"pages/audit.py"}
    assert at.title[0].value.startswith("Bias audit: ")
    assert "Sign in" not in [b.label for b in at.button]


def test_an_altered_share_link_with_auth_on_is_refused_not_signed_in():
    run = "credit-audit"
    audit_id = list_audits(SAMPLE_RUNS / run)[0]["id"]
    tok = make_token(run, audit_id, int(time.time()) + 3600, server_secret(default_store()))
    at = app(OIDC, page="pages/audit.py", run=run, audit=audit_id, token=tok[:-2] + ("xx" if tok[-2:] != "xx" else "yy"))
    assert at.error and at.error[0].value.startswith("This share link cannot be opened: ")
    assert not at.get("plotly_chart")
