from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def app():
    """An AppTest of the whole app (router + pages), with a fresh session."""

    def make(**query):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=90)
        for k, v in query.items():
            at.query_params[k] = v
        return at

    return make
