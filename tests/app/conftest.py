from __future__ import annotations

import pytest

from ._apptest import new_app


@pytest.fixture
def app():
    """``new_app``: an AppTest of the whole app (router + pages), with a fresh session;
    call it with query parameters (``app(run="digits-mlp")``)."""
    return new_app
