"""App-layer helpers shared by every page: the run picker, cached readers, errors.

Pages call these thin wrappers; the work is done in :mod:`debugkit`. Run-derived caches
are keyed on the run's path and its files' sizes and modification times, so a live
run refreshes, and bounded (``max_entries``/``ttl``) so memory does not grow with the
number of runs opened.
"""

from __future__ import annotations

import os
import re
import threading
import traceback
from pathlib import Path

import streamlit as st

from debugkit.errors import DebugkitError, InvalidInputError
from debugkit.io import store as run_store

CACHE = {"max_entries": 32, "ttl": 900}
SESSION_RUN = "debugkit_run_path"
SESSION_EXTRA_ROOTS = "debugkit_extra_roots"


# ---------------------------------------------------------------------------- router guard
_ROUTE = threading.local()


def _run_token():
    """An object that exists once per script run (Streamlit makes a new one in each
    run's context reset), or None outside a script run."""
    try:
        from streamlit.runtime.scriptrunner import get_script_run_ctx
    except ImportError:
        return None
    ctx = get_script_run_ctx(suppress_warning=True)
    return getattr(ctx, "parallel_coordinator", None) if ctx is not None else None


def mark_routed() -> None:
    """Called by app.py at the top of every run: this run goes through the router."""
    _ROUTE.token = _run_token()


def page_guard() -> None:
    """Make sure this page runs under app.py's router. Call first in every page file.

    Streamlit still knows the old "pages directory" mode: until a script run has called
    ``st.navigation``, a process whose main script has a ``pages/`` folder next to it runs
    a requested page file directly, without the main script (this happens for the first
    runs of a fresh server process, and on every rerun under ``AppTest``). That would skip
    the router's decisions (the selected run, what a shared audit link may see, sign-in).
    When it happens, switch the process to ``st.navigation`` mode and rerun, so app.py
    routes the request. Whether this run was routed is known per run (app.py marks it),
    not from the process-wide mode flag: sessions that started at once on a fresh server
    may have begun in the old mode after another session switched it.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without the old mode
        return
    token = _run_token()
    if token is not None:
        if getattr(_ROUTE, "token", None) is token:
            return
        PagesManager.uses_pages_directory = False
        st.rerun()
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


# ---------------------------------------------------------------------------- text
# What Markdown (CommonMark + GFM, as Streamlit renders it) would read as formatting:
# emphasis and code marks, backslashes, ``~`` and ``$`` (strikethrough, maths) anywhere;
# an underscore only where it can open or close emphasis (not inside ``batch_size``);
# ``](`` / ``][`` (links, images) and ``[^`` (footnotes), not a lone ``[0, 10)``; ``<``
# before a tag or autolink; a colon that opens an ``:icon:`` shortcode or a
# ``:red[...]`` directive; and at the start of a line what opens a block (headings,
# quotes, lists, tables, rules, setext underlines).
_MD_INLINE = re.compile(r"[\\`*~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[])|\[(?=\^)"
                        r"|<(?=[A-Za-z/!?])|:(?=[A-Za-z0-9_+/-]+[:\[])")
_MD_LINE_START = re.compile(r"^(\s*(?:\d+)?)([#>+=|.)-])", re.MULTILINE)


def md(value) -> str:
    """``value`` as literal text inside Markdown (``st.markdown``, ``st.caption``,
    ``st.error`` ... all render Markdown).

    User and code text (layer names such as ``__getitem__``, ``__main__.CreditMLP``,
    paths, error messages, run names) is escaped: each character Markdown or Streamlit
    would read as formatting gets a backslash (CommonMark allows one before any ASCII
    punctuation), so ``__getitem__`` stays ``__getitem__`` and ``:red[x]`` stays text.
    """
    text = _MD_INLINE.sub(lambda m: "\\" + m.group(0), str(value))
    return _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def code(value) -> str:
    """``value`` as an inline code span (shown verbatim; backticks inside are kept)."""
    text = str(value).replace("\n", " ")
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------------------- errors
def show_error(exc: BaseException, where: str = "") -> None:
    """A DebugkitError as its message; anything else as a short note plus traceback."""
    if isinstance(exc, DebugkitError):
        st.error(md(exc), icon=":material/error:")
    else:
        st.error(f"Something went wrong{' in ' + md(where) if where else ''}: "
                 f"{type(exc).__name__}: {md(exc)}", icon=":material/bug_report:")
        with st.expander("Traceback", expanded=False):
            st.code("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


# ---------------------------------------------------------------------------- roots
def store_dir() -> Path:
    return run_store.default_store()


def roots() -> list[Path]:
    extra = [Path(p) for p in st.session_state.get(SESSION_EXTRA_ROOTS, [])]
    return run_store.default_roots() + [p for p in extra if p not in run_store.default_roots()]


@st.cache_data(ttl=5, max_entries=64, show_spinner=False)
def _find(roots_key: tuple[str, ...]):
    return [(e.id, str(e.path)) for e in run_store.find_runs([Path(r) for r in roots_key])]


def run_entries() -> list[tuple[str, str]]:
    """``(id, path)`` of every run under the served roots."""
    return _find(tuple(str(r) for r in roots()))


# ---------------------------------------------------------------------------- cached reads
def signature(path: str) -> tuple:
    from debugkit.io.run import open_run

    return open_run(path).files_signature()


@st.cache_data(**CACHE, show_spinner=False)
def _table(path: str, sig: tuple, table: str):
    from debugkit.io.run import open_run

    run = open_run(path)
    return getattr(run, table)()


def table(path: str, name: str):
    """A cached run table (``scalars``, ``grad_norms``, ``memory``, ``steps``, ``failures``,
    ``events``)."""
    return _table(path, signature(path), name)


@st.cache_data(**CACHE, show_spinner=False)
def _summary(path: str, sig: tuple):
    from debugkit.io.run import open_run

    run = open_run(path)
    return {"manifest": run.manifest, "status": run.status, "ranks": run.ranks,
            "env": run.env(), "name": run.name, "warnings": list(run.warnings),
            "time_span": run.time_span()}


def summary(path: str) -> dict:
    """Manifest, status, ranks and environment of a run (status is never cached long)."""
    s = dict(_summary(path, signature(path)))
    from debugkit.io.run import open_run

    s["status"] = open_run(path).status
    return s


@st.cache_data(**CACHE, show_spinner=False)
def _findings(path: str, sig: tuple) -> list:
    from debugkit.diagnose import diagnose
    from debugkit.io.run import open_run

    return diagnose(open_run(path))


def findings(path: str) -> list:
    """What `debugkit diagnose` finds in a run (list of ``Finding``, ordered by step;
    cached on the run's files). Raises ``DebugkitError`` for a run that cannot be read."""
    return _findings(path, signature(path))


SEVERITY_ICON = {"error": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}


def show_findings(found: list) -> None:
    """Findings as cards: severity, kind, step, rank, layer, and the message (escaped)."""
    for f in found:
        with st.container(border=True):
            where = " · ".join(x for x in (f"step {f.step}" if f.step is not None else "",
                                           f"rank {f.rank}" if f.rank is not None else "") if x)
            st.markdown(f"{SEVERITY_ICON.get(f.severity, '')} **{md(f.kind)}**"
                        + (f" · {where}" if where else "") + (f" · {code(f.layer)}" if f.layer else ""))
            st.caption(md(f.message))


@st.cache_data(**CACHE, show_spinner=False)
def _findings_counts(path: str, sig: tuple) -> dict:
    from debugkit.diagnose.index import findings_counts as counts

    return counts(findings(path))


def findings_counts(path: str) -> dict:
    """``{errors, warnings, top}``: what `debugkit diagnose` finds in a run (cached on
    the run's files), for the Home page's run list. A run that cannot be analysed gives
    ``top`` = the error's message and None counts."""
    try:
        return _findings_counts(path, signature(path))
    except DebugkitError as exc:
        return {"errors": None, "warnings": None, "top": f"cannot analyse: {exc}"}


def about(text: str) -> None:
    """The page's short "what am I looking at" note, under its title."""
    with st.expander("What am I looking at?", icon=":material/help:"):
        st.markdown(text)


# ---------------------------------------------------------------------------- selection
def _select(path: str | None, run_id: str | None = None) -> None:
    st.session_state[SESSION_RUN] = path
    if run_id:
        st.query_params["run"] = run_id
    elif "run" in st.query_params:
        del st.query_params["run"]


def _id_for(path: str) -> str | None:
    for rid, p in run_entries():
        if os.path.realpath(p) == os.path.realpath(path):
            return rid
    return None


def apply_query_params() -> None:
    """Open the run named by ``?run=<id>`` (validated; a bad value shows an error)."""
    rid = st.query_params.get("run")
    if not rid:
        return
    current = st.session_state.get(SESSION_RUN)
    if current and _id_for(current) == rid:
        return
    try:
        entry = run_store.resolve_run(rid, roots())
    except DebugkitError as exc:
        st.session_state["debugkit_link_error"] = str(exc)
        return
    st.session_state[SESSION_RUN] = str(entry.path)


def current_run_path() -> str | None:
    """The selected run's path, or None."""
    path = st.session_state.get(SESSION_RUN)
    if path and not _exists(path):
        st.session_state[SESSION_RUN] = None
        st.warning(f"The run at {md(path)} is gone (deleted or moved). Pick another run.")
        return None
    if path:
        rid = _id_for(path)
        if rid and st.query_params.get("run") != rid:
            st.query_params["run"] = rid
    return path


def _exists(path: str) -> bool:
    """Whether a run path (local, or an fsspec URL such as ``s3://...``) still exists."""
    from debugkit.io.fs import as_path

    try:
        return as_path(path).exists()
    except (DebugkitError, OSError, ValueError):
        return False


def require_run(what: str) -> str:
    """The selected run's path; without one, an empty state that says what to do, then stop."""
    path = current_run_path()
    if not path:
        st.info(f"Pick a run in the sidebar to see {what}: a sample run, one from the run "
                f"store, a typed path, or an uploaded run directory or .zip.",
                icon=":material/arrow_back:")
        st.stop()
    return path


# ---------------------------------------------------------------------------- sidebar
def _handle_upload(files) -> None:
    from debugkit.io.upload import unpack_files

    try:
        target = unpack_files([(f.name, f) for f in files], store_dir())
    except DebugkitError as exc:
        st.session_state["debugkit_upload_error"] = str(exc)
        return
    except OSError as exc:
        st.session_state["debugkit_upload_error"] = f"upload: could not write to the store ({exc})"
        return
    st.session_state.pop("debugkit_upload_error", None)
    _find.clear()
    _select(str(target), _id_for(str(target)))
    st.session_state["debugkit_upload_ok"] = f"Uploaded as {target.name}"


def _open_typed(path_text: str) -> None:
    from debugkit.io.run import open_run
    from debugkit.io.access import check_allowed

    try:
        path = check_allowed(path_text.strip())  # a local path or an fsspec URL
        run = open_run(path)
    except DebugkitError as exc:
        st.session_state["debugkit_path_error"] = str(exc)
        return
    st.session_state.pop("debugkit_path_error", None)
    parent = str(Path(run.path).parent)
    extra = st.session_state.setdefault(SESSION_EXTRA_ROOTS, [])
    if parent not in extra:
        extra.append(parent)
    _find.clear()
    _select(str(run.path), _id_for(str(run.path)))


def sidebar() -> None:
    """The run picker: served runs, a typed path, or an upload."""
    apply_query_params()
    with st.sidebar:
        st.markdown("### Run")
        if msg := st.session_state.pop("debugkit_link_error", None):
            st.error(md(msg))
        entries = run_entries()
        ids = [rid for rid, _ in entries]
        paths = dict(entries)
        current = st.session_state.get(SESSION_RUN)
        cur_id = _id_for(current) if current else None
        choice = st.selectbox("Open a run", ["—"] + ids,
                              index=(ids.index(cur_id) + 1) if cur_id in ids else 0,
                              key=f"run_picker_{cur_id}",
                              help="Runs in sample_runs/ and in the run store "
                                   f"({store_dir()})")
        if choice != "—" and choice != cur_id:
            _select(paths[choice], choice)
            st.rerun()
        with st.expander("Open a path", expanded=False):
            with st.form("open_path", clear_on_submit=False, border=False):
                text = st.text_input("Run directory, .zip or TensorBoard log dir", placeholder="runs/my-run")
                if st.form_submit_button("Open") and text.strip():
                    _open_typed(text)
                    st.rerun()
            if msg := st.session_state.get("debugkit_path_error"):
                st.error(md(msg))
        with st.expander("Upload a run", expanded=False):
            from debugkit.io.upload import UploadLimits

            # The widget refuses a file the unpacker would refuse anyway (per-file limit,
            # DEBUGKIT_MAX_UPLOAD_MB), before it is sent.
            max_mb = max(1, UploadLimits.from_env().max_file_bytes >> 20)
            files = st.file_uploader("Run directory", accept_multiple_files="directory",
                                     max_upload_size=max_mb,
                                     key=f"upload_dir_{st.session_state.get('upload_gen', 0)}",
                                     help="Pick the run's folder; it is copied into the run store.")
            zipf = st.file_uploader("…or a .zip of one", type=["zip"], max_upload_size=max_mb,
                                    key=f"upload_zip_{st.session_state.get('upload_gen', 0)}")
            picked = list(files or []) or ([zipf] if zipf is not None else [])
            if picked:
                _handle_upload(picked)
                st.session_state["upload_gen"] = st.session_state.get("upload_gen", 0) + 1
                st.rerun()
            if msg := st.session_state.get("debugkit_upload_error"):
                st.error(md(msg))
            if msg := st.session_state.pop("debugkit_upload_ok", None):
                st.success(md(msg))


# ---------------------------------------------------------------------------- navigation
def register_pages(page_files) -> None:
    """Remember which page files the router serves this visitor (see :func:`link_to`)."""
    st.session_state["debugkit_pages"] = set(page_files)


def has_page(page_file: str) -> bool:
    return page_file in st.session_state.get("debugkit_pages", set())


def link_to(page_file: str, label: str, icon: str | None = None, **query_params) -> bool:
    """A link to another page carrying query params, if that page is served; else nothing."""
    if not has_page(page_file):
        return False
    st.page_link(page_file, label=label, icon=icon,
                 query_params={k: str(v) for k, v in query_params.items() if v is not None})
    return True


# ---------------------------------------------------------------------------- share links
SESSION_SHARE = "debugkit_share"
SHARE_REFUSED = ("This share link cannot be opened: {reason}. Ask the person who sent it "
                 "for a new link.")


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
    from debugkit.audit.store import load_audit, validate_audit_id
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
            entry = run_store.resolve_run(run_id, run_store.default_roots())
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


def share_forward() -> None:
    """Where a share-link visitor lands on any path but ``/audit``: on to the audit."""
    st.switch_page("pages/audit.py", query_params={k: st.query_params.get(k) for k in
                                                   ("run", "audit", "token") if st.query_params.get(k)})


# ---------------------------------------------------------------------------- access control
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
