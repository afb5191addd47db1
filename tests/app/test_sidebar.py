"""The sidebar's "Open a path" and "Upload a run" boxes are drawn when opened, not with
every page (their widgets, a file uploader among them, are front-end code each page
would otherwise load and draw)."""

from __future__ import annotations

from ._apptest import new_app


def _labels(at):
    return [t.label for t in at.sidebar.text_input], [u.label for u in at.sidebar.get("file_uploader")]


def test_the_boxes_are_closed_and_empty_on_a_page_load():
    at = new_app()
    at.run()
    assert not at.exception
    assert [e.label for e in at.sidebar.expander] == ["Open a path", "Upload a run"]
    assert _labels(at) == ([], [])


def test_opening_a_box_draws_its_widgets():
    at = new_app()
    at.session_state["sidebar_upload"] = True
    at.run()
    assert _labels(at) == ([], ["Run directory", "…or a .zip of one"])
    at.session_state["sidebar_upload"] = False
    at.session_state["sidebar_open_path"] = True
    at.run()
    assert _labels(at) == (["Run directory, .zip or TensorBoard log dir"], [])
