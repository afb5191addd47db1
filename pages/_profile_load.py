"""The Profiler page's shared reads: a stored profile, parsed once, and its original bytes."""

from __future__ import annotations

import streamlit as st

from pages import _data


@st.cache_resource(max_entries=4, ttl=900, show_spinner="Reading the profile…")
def read_profile(run_path: str, sig: tuple, profile_id: str):
    """The parsed profile (shared read-only between sessions; never mutated)."""
    from debugkit.io.profile_cache import read_entry_cached
    from debugkit.io.run import open_run
    from debugkit.io.run_profiles import get_profile

    # Parsed once per profile file into the cache folder: a new server does not parse again.
    return read_entry_cached(get_profile(open_run(run_path), profile_id))


def load(run_path: str, profile_id: str):
    return read_profile(run_path, _data.signature(run_path), profile_id)


def original_bytes(entry: dict) -> bytes:
    """The profile's file, gunzipped within the decompression limits (a bomb is refused)."""
    from debugkit.io.profiles import read_bytes

    return read_bytes(entry["path"])
