"""A fresh server with `[auth]`: no visitor sees the names of the pages before signing in.

Streamlit sends a new session the pages it knows before the app's router has run; with
pages/ next to app.py that is the pages-folder list, which the sidebar draws until the
router's `st.navigation` replaces it. A MutationObserver installed before the page loads
records every page name that ever appears in the DOM, for several sessions opened at once
on a server that has served nobody yet.
"""

from __future__ import annotations

import pytest

from .conftest import start_server, stop_server, wait_for_app

pytestmark = pytest.mark.browser

SECRETS = """
[auth]
redirect_uri = "http://127.0.0.1:{port}/oauth2callback"
cookie_secret = "not-a-real-secret"
client_id = "debugkit-test"
client_secret = "s3cret"
server_metadata_url = "http://127.0.0.1:9/.well-known/openid-configuration"
"""

# Names a pages-folder menu or the router's menu would show (titles and file stems).
NAMES = ["Gradients", "gradients", "Memory", "memory", "Profiler", "profiler", "Distributed",
         "distributed", "Checkpoints", "checkpoints", "Replay", "replay", "Overview", "overview"]

WATCH = """
(() => {
  window.__seen = [];
  const names = %s;
  const look = () => {
    const nav = document.querySelector('[data-testid="stSidebarNav"]');
    if (nav) window.__seen.push('stSidebarNav: ' + nav.innerText.slice(0, 200));
    for (const a of document.querySelectorAll('a')) {
      const t = (a.innerText || '') + ' ' + (a.getAttribute('href') || '');
      for (const n of names) if (t.includes(n)) window.__seen.push('link: ' + t.slice(0, 100));
    }
  };
  new MutationObserver(look).observe(document, {childList: true, subtree: true, characterData: true});
})();
""" % NAMES  # noqa: UP031  (a JavaScript template: its braces would need doubling for format())


SESSIONS = 8


def test_a_fresh_auth_server_never_shows_the_page_names(tmp_path, browser, server_args=()):
    secrets = tmp_path / "secrets.toml"
    # The port is only known once the server runs; the redirect URI is never followed here.
    secrets.write_text(SECRETS.format(port=8501))
    srv = start_server(tmp_path, args=("--secrets.files", str(secrets), *server_args))
    try:
        contexts = [browser.new_context(viewport={"width": 1280, "height": 800}) for _ in range(SESSIONS)]
        pages = []
        for ctx in contexts:
            pg = ctx.new_page()
            pg.set_default_timeout(60_000)
            pg.add_init_script(WATCH)
            pages.append(pg)
        # Three sessions at once on a server nobody has used: each navigation starts
        # before any of them has run the router.
        for i, pg in enumerate(pages):
            pg.goto(srv.url + ["/", "/gradients", "/replay", "/memory"][i % 4], wait_until="commit")
        for pg in pages:
            wait_for_app(pg)
            pg.get_by_role("button", name="Sign in").first.wait_for(state="visible")
            pg.wait_for_timeout(300)
        seen = [pg.evaluate("window.__seen") for pg in pages]
        assert not any(seen), [s[:3] for s in seen if s]
        for pg in pages:
            text = pg.inner_text("body")
            assert "Gradients" not in text and "Distributed" not in text, text[:500]
        for ctx in contexts:
            ctx.close()
    finally:
        stop_server(srv)
