"""Typed paths with a NUL byte or 5,000 characters are refused with a clean message, no
traceback naming server paths (issue 22, item 5): the sidebar's "Open a path" box and
the Checkpoints page's folder box."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._apptest import new_app, open_page

ROOT = Path(__file__).resolve().parents[2]

HOSTILE = [
    ("/tmp/a\x00b", "it contains a NUL or control character"),
    ("/" + "a" * 5000, "longer than 4096 characters"),
    ("/tmp/" + "b" * 300, "a component is longer than 255 characters"),
]


def _shown(at) -> str:
    return "\n".join(str(x.value) for x in [*at.error, *at.sidebar.error, *at.warning, *at.code, *at.text])


@pytest.mark.parametrize("value, why", HOSTILE, ids=["nul", "5000-chars", "long-component"])
def test_the_sidebar_path_box(value, why):
    at = new_app()
    at.session_state["sidebar_open_path"] = True  # the box is drawn when its expander is open
    at.run()
    box = next(t for t in at.sidebar.text_input if t.label.startswith("Run directory"))
    box.input(value)
    next(b for b in at.sidebar.button if b.label == "Open").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.sidebar.error]
    assert any(e.startswith("path ") and why in e for e in errors), errors
    assert all(len(e) < 400 for e in errors)
    assert "Traceback" not in _shown(at) and str(ROOT) not in _shown(at)


@pytest.mark.parametrize("value, why", HOSTILE, ids=["nul", "5000-chars", "long-component"])
def test_the_checkpoints_folder_box(value, why):
    at = open_page("checkpoints", check=False, run="digits-mlp")
    at.text_input[0].input(value)
    next(b for b in at.button if b.label == "Read folder").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(why in e.value for e in at.error), [e.value for e in at.error]
    assert "Traceback" not in _shown(at) and str(ROOT) not in _shown(at)
