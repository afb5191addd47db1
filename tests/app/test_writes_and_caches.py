"""No anonymous write outside the store (issue 28, item 7): *Compute audit* on a bundled
sample stores the audit in the run store, not in the sample's folder; a zip opened by
path unpacks into a cache with a size bound and eviction; with ``[auth]`` configured
only a signed-in user can compute."""

from __future__ import annotations

import io
import os
import shutil
import zipfile

import pytest

from debugkit._fsutil import cache_dir
from debugkit.audit import list_audits
from debugkit.audit.stored_audits import OVERLAY_DIR, server_audits_dir
from debugkit.io.decompress import forget_refusals
from debugkit.io.served_runs import default_store

from ..conftest import SAMPLE_RUNS
from ._apptest import new_app

SAMPLE = "credit-audit"


def tree(path) -> dict:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(path.rglob("*"))}


@pytest.fixture
def sample_left_as_it_was():
    """The bundled sample's files before; anything a failing run added is removed after."""
    before = tree(SAMPLE_RUNS / SAMPLE)
    yield before
    for d in (SAMPLE_RUNS / SAMPLE / "audits").iterdir():
        if str(d.relative_to(SAMPLE_RUNS / SAMPLE)) not in before:
            os.chmod(d, 0o755)
            for f in d.iterdir():
                os.chmod(f, 0o644)
            shutil.rmtree(d)


@pytest.mark.slow
def test_compute_audit_on_a_bundled_sample_writes_into_the_store(sample_left_as_it_was, monkeypatch):
    monkeypatch.delenv("DEBUGKIT_AUDIT_LOADERS", raising=False)
    at = new_app(timeout=240, run=SAMPLE)
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = len(list_audits(SAMPLE_RUNS / SAMPLE))
    next(e for e in at.expander if e.label == "Compute a new audit")
    at.session_state["audit_compute_open"] = True  # as a click on it does (drawn when opened)
    at.run()
    next(n for n in at.number_input if n.label == "Bootstrap resamples").set_value(0)
    next(b for b in at.button if b.label == "Compute audit").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert tree(SAMPLE_RUNS / SAMPLE) == sample_left_as_it_was  # not a byte written there
    overlay = server_audits_dir(SAMPLE_RUNS / SAMPLE, default_store())
    assert overlay.parent == default_store() / OVERLAY_DIR
    (stored,) = [d.name for d in overlay.iterdir()]
    assert any(f"Stored audit {stored}" in s.value for s in at.success)
    assert at.query_params["audit"] == stored
    # listed with the sample's own audits, and opened from there by the page
    assert len(list_audits(SAMPLE_RUNS / SAMPLE)) == shown + 1
    assert at.selectbox[0].label == "Audit" and at.selectbox[0].value == stored


def test_compute_audit_is_refused_when_the_store_is_at_its_quota(sample_left_as_it_was, monkeypatch):
    """What a visitor writes counts against the store's quota, as an upload does."""
    monkeypatch.delenv("DEBUGKIT_AUDIT_LOADERS", raising=False)
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", default_store() / "some-run")
    monkeypatch.setenv("DEBUGKIT_STORE_MAX_FILES", "5")
    at = new_app(timeout=240, run=SAMPLE)
    at.switch_page("pages/audit.py")
    at.session_state["audit_compute_open"] = True  # its form is drawn when opened
    at.run()
    next(b for b in at.button if b.label == "Compute audit").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(e.value.startswith("audit: the run store ") and "over its limit of 5 (DEBUGKIT_STORE_MAX_FILES)"
               in e.value for e in at.error), [e.value for e in at.error]
    assert tree(SAMPLE_RUNS / SAMPLE) == sample_left_as_it_was
    assert not (default_store() / OVERLAY_DIR).exists()


def test_with_auth_only_a_signed_in_user_can_compute():
    auth = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "x" * 32,
            "client_id": "id", "client_secret": "secret",
            "server_metadata_url": "https://example.invalid/.well-known/openid-configuration"}
    at = new_app(auth=auth, run=SAMPLE)
    at.switch_page("pages/audit.py")
    at.run()
    assert not at.exception
    assert not [b for b in at.button if b.label == "Compute audit"]
    assert [b.label for b in at.button] == ["Sign in"]


# ---------------------------------------------------------------------------- the cache
def zipped_run(name: str, payload_bytes: int) -> bytes:
    """A zip of a small real run plus ``payload_bytes`` of incompressible data."""
    buf = io.BytesIO()
    src = SAMPLE_RUNS / "digits-mlp"
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                z.write(p, f"{name}/{p.relative_to(src).as_posix()}")
        z.writestr(f"{name}/payload.bin", os.urandom(payload_bytes))
    return buf.getvalue()


def open_typed(at, path):
    at.session_state["sidebar_open_path"] = True
    at.run()
    next(t for t in at.sidebar.text_input if t.label.startswith("Run directory")).input(str(path))
    next(b for b in at.sidebar.button if b.label == "Open").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def cache_bytes() -> int:
    return sum(p.stat().st_blocks * 512 for p in cache_dir().rglob("*") if not p.is_symlink())


@pytest.mark.slow  # three zips unpacked by pages: 5.5 CPU s (tests._cputime)
def test_zips_opened_by_path_stay_inside_the_cache_bound(monkeypatch):
    """Three zips inside an uploaded run, each unpacking to ~1.2 MiB, opened by path
    one after the other with a 3 MiB cache: the oldest is evicted, the cache never
    passes its bound, and a zip larger than the whole cache is refused, then refused
    again at once."""
    forget_refusals()
    monkeypatch.setenv("DEBUGKIT_CACHE_MAX_MB", "3")
    run = default_store() / "carrier"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", run)
    for i in range(3):
        (run / f"inner{i}.zip").write_bytes(zipped_run(f"inner{i}", 1 << 20))
    (run / "huge.zip").write_bytes(zipped_run("huge", 4 << 20))
    unpacked = []
    for i in range(3):
        at = open_typed(new_app(), run / f"inner{i}.zip")
        assert not at.sidebar.error, [e.value for e in at.sidebar.error]
        assert cache_bytes() <= 3 << 20
        unpacked.append(at.session_state["debugkit_run_path"])
    assert not os.path.exists(unpacked[0]) and os.path.isdir(unpacked[2])  # least recent went first
    at = open_typed(new_app(), run / "huge.zip")
    assert any("opening a zip unpacks it into the cache, which holds at most 3145728 bytes "
               "(DEBUGKIT_CACHE_MAX_MB)" in e.value for e in at.sidebar.error)
    assert cache_bytes() <= 3 << 20
    monkeypatch.setattr(zipfile, "ZipFile", None)  # the refusal is remembered: not unpacked again
    at = open_typed(new_app(), run / "huge.zip")
    assert any("DEBUGKIT_CACHE_MAX_MB" in e.value for e in at.sidebar.error)
    forget_refusals()
