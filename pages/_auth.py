"""Access control: sign-in through ``st.login`` when ``[auth]`` is configured."""

from __future__ import annotations

import streamlit as st

from pages._ui import md


def auth_providers() -> list[str] | None:
    """The OIDC providers configured in ``.streamlit/secrets.toml``'s ``[auth]``
    section, or None when there is none (local use: no login).

    ``[auth]`` with ``client_id`` itself is the default provider (``[""]``, i.e.
    ``st.login()``); ``[auth.<name>]`` subsections are named providers.
    """
    try:
        auth = st.secrets.get("auth") if "auth" in st.secrets else None
    except Exception:  # no secrets.toml at all, or an unreadable one: no auth section
        return None
    if not auth:
        return None
    named = [k for k, v in auth.items() if hasattr(v, "keys")]
    return ([""] if "client_id" in auth else []) + sorted(named) or [""]


def logged_in() -> bool:
    """Whether this visitor has signed in through ``st.login`` (``st.user``)."""
    return bool(getattr(st.user, "is_logged_in", False))


def login_page() -> None:
    """Shown instead of every page when ``[auth]`` is configured and nobody signed in."""
    st.title("debugkit")
    st.write("This debugkit server requires you to sign in. Shared audit links open "
             "without signing in.")
    for name in auth_providers() or [""]:
        label = f"Sign in with {name.capitalize()}" if name else "Sign in"
        if st.button(label, key=f"login_{name or 'default'}", type="primary",
                     icon=":material/login:"):
            st.login(name) if name else st.login()


def signed_in_badge() -> None:
    """Who is signed in, and a way out (sidebar), when login is on."""
    with st.sidebar:
        who = st.user.get("email") or st.user.get("name") or "signed in"
        st.caption(f"Signed in as **{md(who)}**")
        if st.button("Sign out", key="logout", icon=":material/logout:"):
            st.logout()
