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
    ("pages/profiler.py", "Profiler", ":material/speed:", "profiler"),
]

pages = [st.Page(f, title=t, icon=i, url_path=u, default=(u == "home")) for f, t, i, u in PAGES]
_common.register_pages([f for f, *_ in PAGES])
nav = st.navigation(pages)
_common.sidebar()
nav.run()
