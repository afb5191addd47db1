"""debugkit's dashboard: the router. Pages live in pages/; the sidebar picks the run.

Start it with ``streamlit run app.py`` (or ``debugkit ui``).
"""

from pathlib import Path

import streamlit as st

from pages import _auth, _routing, _share, _sidebar, _ui

_routing.mark_routed()
# The favicon is a file of the app, not a Material icon, which the browser would fetch
# from a font CDN: an offline install would have none. It is sent as a data URL: a file
# path makes Streamlit open and re-encode the image with PIL on each new session's first
# run (60 ms of CPU before anything of the page is drawn; bench/pages.py's shell floor).
FAVICON = Path(__file__).resolve().parent / "assets" / "favicon.png"
st.set_page_config(page_title="debugkit", page_icon=_ui.data_url(FAVICON), layout="wide")
# Narrow windows (800 px with the sidebar open leaves ~500 px): a row of columns wraps
# instead of squeezing each column until its labels break letter by letter.
st.html("""<style>
/* a page link's label wraps instead of being cut with an ellipsis (Home's "Where to look") */
[data-testid="stMain"] [data-testid="stPageLink-NavLink"] span,
[data-testid="stMain"] [data-testid="stPageLink-NavLink"] [data-testid="stMarkdownContainer"],
[data-testid="stMain"] [data-testid="stPageLink-NavLink"] p { white-space: normal; overflow: visible; }
@media (max-width: 1100px) {
  [data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
  [data-testid="stHorizontalBlock"] > [data-testid="stColumn"] { min-width: min(200px, 100%); }
}
</style>""")

# (page file, title, icon, url path): one entry per page. The router decides what each
# visitor may see.
PAGES = [
    ("pages/home.py", "Home", ":material/home:", "home"),
    ("pages/overview.py", "Overview", ":material/dashboard:", "overview"),
    ("pages/scalars.py", "Scalars", ":material/show_chart:", "scalars"),
    ("pages/gradients.py", "Gradients", ":material/ssid_chart:", "gradients"),
    ("pages/layers.py", "Layers", ":material/stacked_bar_chart:", "layers"),
    ("pages/memory.py", "Memory", ":material/memory:", "memory"),
    ("pages/profiler.py", "Profiler", ":material/speed:", "profiler"),
    ("pages/distributed.py", "Distributed", ":material/lan:", "distributed"),
    ("pages/checkpoints.py", "Checkpoints", ":material/save:", "checkpoints"),
    ("pages/replay.py", "Replay", ":material/replay:", "replay"),
    ("pages/compare.py", "Compare", ":material/compare_arrows:", "compare"),
    ("pages/audit.py", "Bias audit", ":material/balance:", "audit"),
]
AUDIT_PAGE = "pages/audit.py"

share = _share.share_request()
if share is not None:
    # A share link (or a share-only server): the audit page alone, or the refusal alone.
    # No sidebar, no run picker, no upload, no other page: an edited URL path lands here.
    # The link's own path (/audit) is served as it is; any other path falls back to the
    # default page, which only forwards to the audit (or shows the refusal again).
    # Every other page's path is a hidden entry that does the same (forward or refuse), so
    # a link pasted with another page's path opens without Streamlit's "Page not found".
    others = [u for *_, u in PAGES if u != "audit"]
    if share["ok"]:
        pages = [st.Page(_share.share_forward, title="Bias audit", url_path="shared", default=True),
                 st.Page(AUDIT_PAGE, title="Bias audit", icon=":material/balance:", url_path="audit")]
        pages += [st.Page(_share.share_forward, title="Bias audit", url_path=u, visibility="hidden")
                  for u in others]
        _routing.register_pages([AUDIT_PAGE])
    else:
        pages = [st.Page(_share.share_refused, title="Link not valid", url_path="refused", default=True),
                 st.Page(_share.share_refused_here, title="Link not valid", url_path="audit")]
        pages += [st.Page(_share.share_refused, title="Link not valid", url_path=u, visibility="hidden")
                  for u in others]
        _routing.register_pages([])
    try:
        st.navigation(pages, position="hidden").run()
    except _ui.PageEnd:  # the page ended early (an empty state or an error box)
        pass
    except Exception as exc:  # noqa: BLE001 - as below: a box, never a traceback
        _ui.show_error(exc, where="the shared audit")
elif _auth.auth_providers() is not None and not _auth.logged_in():
    # `[auth]` is configured in .streamlit/secrets.toml: everything but a valid share
    # link (above) needs a signed-in user. Every URL path lands on the sign-in page.
    _routing.register_pages([])
    try:
        st.navigation([st.Page(_auth.login_page, title="Sign in", url_path="login", default=True)],
                      position="hidden").run()
    except _ui.PageEnd:
        pass
else:
    if _auth.auth_providers() is not None:
        _auth.signed_in_badge()
    pages = [st.Page(f, title=t, icon=i, url_path=u) if u != "home" else
             # Home is served at the root; its url_path is reserved by Streamlit but not
             # served, so /home is a hidden second entry of the same file (a typed or
             # bookmarked /home opens Home, not a "Page not found" notice).
             st.Page(f, title=t, icon=i, url_path="index", default=True) for f, t, i, u in PAGES]
    aliases = [st.Page("pages/home.py", title="Home", icon=":material/home:", url_path="home",
                       visibility="hidden")]
    _routing.register_pages([f for f, *_ in PAGES])
    # The menu is drawn by the app (page links), not by Streamlit's sidebar navigation,
    # which config.toml turns off (client.showSidebarNavigation = false): Streamlit would
    # otherwise draw a fresh server's first sessions the pages/ folder's file list before
    # this router has run, even to visitors who have not signed in (docs/security.md).
    nav = st.navigation(pages + aliases, position="hidden")
    _sidebar.open_linked_run()  # ?run= opens its run before the page reads it
    try:
        nav.run()
    except _ui.PageEnd:  # the page ended early (an empty state or an error box)
        pass
    except Exception as exc:  # noqa: BLE001 - a page that broke on a run: a box, not a traceback
        # (st.rerun / st.switch_page raise BaseExceptions, which pass: the script reruns.)
        _ui.show_error(exc, where=nav.title)
    # The sidebar (the page menu and the run picker) is drawn after the page: the page's
    # first chart then reaches the browser after 6-8 websocket messages instead of ~27,
    # and the server's work for the sidebar comes after it (bench/pages.py's shell floor).
    # Pages end with _ui.end_page(), not st.stop(), so that the sidebar is still drawn.
    _sidebar.menu(pages)
    _sidebar.sidebar()
