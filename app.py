"""debugkit's dashboard: the router. Pages live in pages/; the sidebar picks the run.

Start it with ``streamlit run app.py`` (or ``debugkit ui``).
"""

import streamlit as st

from pages import _common

st.set_page_config(page_title="debugkit", page_icon=":material/bug_report:", layout="wide")

# (page file, title, icon, url path): one entry per page. The router decides what each
# visitor may see.
PAGES = [
    ("pages/home.py", "Home", ":material/home:", "home"),
    ("pages/overview.py", "Overview", ":material/dashboard:", "overview"),
    ("pages/audit.py", "Bias audit", ":material/balance:", "audit"),
]
AUDIT_PAGE = "pages/audit.py"

share = _common.share_request()
if share is not None:
    # A share link (or a share-only server): the audit page alone, or the refusal alone.
    # No sidebar, no run picker, no upload, no other page: an edited URL path lands here.
    if share["ok"]:
        page = st.Page(AUDIT_PAGE, title="Bias audit", icon=":material/balance:", url_path="audit",
                       default=True)
        _common.register_pages([AUDIT_PAGE])
    else:
        page = st.Page(_common.share_refused, title="Link not valid", icon=":material/link_off:",
                       url_path="audit", default=True)
        _common.register_pages([])
    st.navigation([page], position="hidden").run()
else:
    pages = [st.Page(f, title=t, icon=i, url_path=u, default=(u == "home")) for f, t, i, u in PAGES]
    _common.register_pages([f for f, *_ in PAGES])
    nav = st.navigation(pages)
    _common.sidebar()
    nav.run()
