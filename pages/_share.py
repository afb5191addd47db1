"""Signed share links: whether this visitor came with one, and the pages such a visitor gets
(the audit alone, or the refusal)."""

from __future__ import annotations

import os

import streamlit as st

from debugkit.errors import DebugkitError
from debugkit.io import served_runs as run_store
from pages._runs import store_dir
from pages._ui import md

SESSION_SHARE = "debugkit_share"
SHARE_REFUSED = ("This share link cannot be opened: {reason}. Ask the person who sent it "
                 "for a new link.")


SHARE_REACH_AUTH = ("The link opens this audit, read-only, without signing in: a recipient who is "
                    "not signed in reaches this audit alone (no other page, no run picker, no upload, "
                    "no recompute). Signed with the server's secret (HMAC-SHA256).")
SHARE_REACH_OPEN = ("This server has no sign-in: anyone who can reach its address opens every page "
                    "and every run, with or without this link. The link itself shows this audit "
                    "read-only. To give a reviewer this audit alone, start a share-only server "
                    "from the same folder (`debugkit ui --share-only --port 8502`: share links and "
                    "nothing else) and put its address below, or configure sign-in (`[auth]`, "
                    "docs/security.md).")


def share_reach_text() -> str:
    """What a link's recipient can reach on this server, said exactly."""
    from pages import _auth

    return SHARE_REACH_AUTH if _auth.auth_providers() is not None else SHARE_REACH_OPEN


def share_only_mode() -> bool:
    """``DEBUGKIT_SHARE_ONLY=1``: a server for compliance reviewers that serves valid share
    links and nothing else."""
    return os.environ.get("DEBUGKIT_SHARE_ONLY", "").strip().lower() in ("1", "true", "yes")


def share_request() -> dict | None:
    """Decide, before anything renders, whether this visitor came with a share link.

    Returns None for a normal visitor (no ``token`` in the URL, and the server is not in
    share-only mode). Otherwise ``{"ok": True, "run_path", "run_id", "audit_id",
    "expires_at"}`` for a valid link, or ``{"ok": False, "message"}``. The signature is
    checked before the run or audit is looked up, so a stranger cannot probe which runs
    exist. The result is stored for this script run only (see :func:`share_context`).
    """
    from debugkit.audit.share import server_secret, verify_token
    from debugkit.audit.stored_audits import load_audit, validate_audit_id
    from debugkit.errors import ShareTokenError

    qp = st.query_params
    token = qp.get("token")
    if token is None and not share_only_mode():
        st.session_state[SESSION_SHARE] = None
        return None
    run_id, audit_id = qp.get("run") or "", qp.get("audit") or ""
    try:
        if not token:
            raise ShareTokenError("this server only opens share links, and this address has none")
        expires_at = verify_token(token, run_id, audit_id, server_secret(store_dir()))
        validate_audit_id(audit_id)
        try:
            entry = run_store.resolve_run(run_id, run_store.served_roots())
            load_audit(entry.path, audit_id)
        except DebugkitError as exc:
            raise ShareTokenError("the shared run or audit is no longer available, or it was "
                                  "modified after the link was made") from exc
    except DebugkitError as exc:
        res = {"ok": False, "message": SHARE_REFUSED.format(reason=str(exc))}
    else:
        res = {"ok": True, "run_path": str(entry.path), "run_id": run_id, "audit_id": audit_id,
               "expires_at": expires_at}
    st.session_state[SESSION_SHARE] = res
    return res


def share_context() -> dict | None:
    """The verified share link of this script run (set by the router), or None."""
    ctx = st.session_state.get(SESSION_SHARE)
    return ctx if ctx and ctx.get("ok") else None


def share_refused() -> None:
    """The page a visitor with an invalid, altered, expired or mismatched link gets."""
    ctx = st.session_state.get(SESSION_SHARE) or {}
    st.error(md(ctx.get("message") or SHARE_REFUSED.format(reason="it is not valid")),
             icon=":material/link_off:")


def share_refused_here() -> None:
    """The refusal, served at the link's own path (``/audit``)."""
    share_refused()


#: What a share link carries to the audit page: the link itself and the view (the open tabs
#: and charts).
SHARE_PARAMS = ("run", "audit", "token", "attr", "shap_attr", "rates", "shap", "shap_groups")


def share_forward() -> None:
    """Where a share-link visitor lands on any path but ``/audit``: on to the audit."""
    st.switch_page("pages/audit.py", query_params={k: st.query_params.get(k) for k in
                                                   SHARE_PARAMS if st.query_params.get(k)})
