"""Share tokens: HMAC-SHA256 over run, audit and expiry; every kind of bad token refused."""

from __future__ import annotations

import os
import stat
import urllib.parse

import pytest

from debugkit.audit.share import (
    MSG_EXPIRED,
    MSG_MALFORMED,
    MSG_SIGNATURE,
    SECRET_FILE,
    check_base_url,
    make_token,
    parse_duration,
    server_secret,
    share_link,
    verify_token,
)
from debugkit.errors import InvalidInputError, ShareTokenError

SECRET = b"s" * 32
RUN, AUDIT = "credit-audit", "0123456789abcdef"
NOW = 1_800_000_000


def test_valid_token_verifies_and_returns_its_expiry():
    tok = make_token(RUN, AUDIT, NOW + 60, SECRET)
    assert tok.startswith(f"v1.{NOW + 60}.") and len(tok.split(".")[2]) == 43
    assert verify_token(tok, RUN, AUDIT, SECRET, now=NOW) == NOW + 60


def test_token_is_the_documented_hmac():
    import base64
    import hashlib
    import hmac

    tok = make_token(RUN, AUDIT, NOW, SECRET)
    mac = hmac.new(SECRET, f"debugkit-share-v1\n{RUN}\n{AUDIT}\n{NOW}".encode(), hashlib.sha256).digest()
    assert tok.split(".")[2] == base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _flip(ch: str) -> str:
    return "A" if ch != "A" else "B"


@pytest.mark.parametrize("case", ["altered signature", "altered expiry", "other audit", "other run",
                                  "other secret"])
def test_refused_tokens(case):
    tok = make_token(RUN, AUDIT, NOW + 3600, SECRET)
    run, audit, secret = RUN, AUDIT, SECRET
    if case == "altered signature":
        tok = tok[:-1] + _flip(tok[-1])
    elif case == "altered expiry":
        tok = tok.replace(f".{NOW + 3600}.", f".{NOW + 7200}.")
    elif case == "other audit":
        audit = "fedcba9876543210"
    elif case == "other run":
        run = "digits-mlp"
    else:
        secret = b"t" * 32
    with pytest.raises(ShareTokenError, match=MSG_SIGNATURE.replace("(", r"\(").replace(")", r"\)")):
        verify_token(tok, run, audit, secret, now=NOW)


def test_expired_token_is_refused():
    tok = make_token(RUN, AUDIT, NOW, SECRET)
    with pytest.raises(ShareTokenError, match=r"this share link expired on 2027-01-15 08:00 UTC"):
        verify_token(tok, RUN, AUDIT, SECRET, now=NOW)
    assert MSG_EXPIRED.startswith("this share link expired")


@pytest.mark.parametrize("token", ["", "v1", "v2.1800000000.abc", "v1.x.y", "v1.1800000000." + "a" * 42,
                                   None, 12, "v1.1800000000." + "a" * 43 + "=", "x" * 500])
def test_malformed_tokens(token):
    with pytest.raises(ShareTokenError, match=MSG_MALFORMED.replace("(", r"\(").replace(")", r"\)")):
        verify_token(token, RUN, AUDIT, SECRET, now=NOW)


def test_bad_run_or_audit_in_the_url_is_a_mismatch():
    tok = make_token(RUN, AUDIT, NOW + 60, SECRET)
    for run, audit in (("../x", AUDIT), (RUN, "zz"), (None, AUDIT)):
        with pytest.raises(ShareTokenError, match=r"does not match"):
            verify_token(tok, run, audit, SECRET, now=NOW)


def test_secret_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DEBUGKIT_SECRET", "x" * 20)
    assert server_secret(tmp_path) == b"x" * 20
    monkeypatch.setenv("DEBUGKIT_SECRET", "short")
    with pytest.raises(InvalidInputError, match=r"DEBUGKIT_SECRET is 5 characters long; use at least 16"):
        server_secret(tmp_path)


def test_secret_from_streamlit_secrets(monkeypatch, tmp_path):
    monkeypatch.delenv("DEBUGKIT_SECRET", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text('DEBUGKIT_SECRET = "from-secrets-toml-123"\n')
    assert server_secret(tmp_path / "store") == b"from-secrets-toml-123"
    (tmp_path / ".streamlit" / "secrets.toml").write_text('[debugkit]\nsecret = "table-form-secret-456"\n')
    assert server_secret(tmp_path / "store") == b"table-form-secret-456"
    assert not (tmp_path / "store").exists()


def test_secret_generated_into_the_store_once(monkeypatch, tmp_path):
    monkeypatch.delenv("DEBUGKIT_SECRET", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    store = tmp_path / "store"
    a = server_secret(store)
    b = server_secret(store)
    assert a == b and len(a) == 64
    mode = stat.S_IMODE(os.stat(store / SECRET_FILE).st_mode)
    assert mode == 0o600


def test_share_link_shape_and_roundtrip():
    link, exp = share_link("https://dk.example.com/team/", RUN, AUDIT, expires_in_s=14 * 86400,
                           secret=SECRET, now=NOW)
    parts = urllib.parse.urlsplit(link)
    assert parts.scheme == "https" and parts.netloc == "dk.example.com" and parts.path == "/team/audit"
    q = dict(urllib.parse.parse_qsl(parts.query))
    assert set(q) == {"run", "audit", "token"} and q["run"] == RUN and q["audit"] == AUDIT
    assert exp == NOW + 14 * 86400
    assert verify_token(q["token"], q["run"], q["audit"], SECRET, now=NOW) == exp


@pytest.mark.parametrize("value, seconds", [("14d", 14 * 86400), ("12h", 43200), ("30m", 1800),
                                            ("2w", 14 * 86400), ("90s", 90), (" 1d ", 86400)])
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "14", "d", "0d", "400d", "1y", "-1d", "1.5d"])
def test_bad_durations(value):
    with pytest.raises(InvalidInputError, match=r"expires=.*: expected a number and a unit"):
        parse_duration(value)


@pytest.mark.parametrize("url", ["localhost:8501", "ftp://x", "http://", "http://x/?a=1", "javascript:alert(1)"])
def test_bad_base_urls(url):
    with pytest.raises(InvalidInputError, match=r"base URL .*: expected http:// or https:// and a host"):
        check_base_url(url)


def test_unwritable_store_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("DEBUGKIT_SECRET", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(InvalidInputError, match=r"cannot read or create the share secret .*set DEBUGKIT_SECRET"):
        server_secret(blocker / "store")
