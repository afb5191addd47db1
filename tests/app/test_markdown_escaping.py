"""User and code text keeps its characters when a page renders it as Markdown (issue 17,
item 5): `__getitem__` must not become bold "getitem", `__main__.CreditMLP` not bold
"main"."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from pages._ui import code, md

RENDER = MarkdownIt("commonmark").enable(["table", "strikethrough"])

CASES = [
    "__getitem__",
    "a hang in Dataset.__getitem__ (data.py:12) while rank 1 waits",
    "__main__.CreditMLP",
    "label 12 outside [0, 10)",
    "see [the docs](http://evil.example) and ![x](y.png)",
    "*star* and **bold** and `tick` and ~~gone~~",
    "# not a heading",
    "- not a list\n+ nor this\n3. nor this",
    "> not a quote",
    "age_in_years=<25 is 1.71x that of 25-34",
    "<b>no html</b> <http://autolink.example>",
    "C:\\Users\\me\\run and a\\*b",
    ":red[not red] :material/warning: :smile:",
    "costs $5 and $10",
    "batch_size and nonfinite_weights stay readable",
]


def plain(markdown: str) -> str:
    """The text a reader sees, and the tags Markdown produced."""
    out = RENDER.render(markdown)
    tags = set(re.findall(r"<(\w+)", out)) - {"p", "br"}
    text = html.unescape(re.sub(r"<[^>]+>", "", out)).strip()
    return text, tags


@pytest.mark.parametrize("text", CASES)
def test_escaped_text_renders_as_itself(text):
    seen, tags = plain(md(text))
    assert tags == set(), (text, md(text), tags)
    assert seen.split() == text.split()


def test_streamlit_directives_are_not_left_open():
    # Streamlit's own syntax on top of CommonMark: ":red[...]" and ":icon:" start with a colon
    out = md(":red[x] :material/warning: and a plain colon: here")
    assert "\\:red[x]" in out and "\\:material/warning:" in out and "colon: here" in out


def test_identifiers_are_not_changed_where_markdown_would_leave_them():
    # no needless backslashes in the common case (tests and readers see the same text)
    assert md("nonfinite_weights at step 4: [0, 10)") == "nonfinite_weights at step 4: [0, 10)"


@pytest.mark.parametrize("text", ["a`b", "`lead", "plain", "x``y"])
def test_code_spans_hold_any_text(text):
    out = RENDER.render(code(text))
    assert html.unescape(re.sub(r"<[^>]+>", "", out)).strip() == text
    assert "<code>" in out


def test_overview_shows_dunder_names_as_written(app, tmp_path):
    """A real run whose failure message names `__getitem__`: the Overview's findings and
    its title keep the underscores."""
    import torch

    from debugkit import Recorder

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = tmp_path / "dunder"
    with pytest.raises(KeyError):
        with Recorder(run, model, optimizer=opt, name="__main__.CreditMLP", flush_every_s=0.2) as rec:
            with rec.step((torch.randn(4, 3), torch.tensor([0, 1, 0, 1]))):
                raise KeyError("Dataset.__getitem__ got index 7")
    at = app()
    at.session_state["sidebar_open_path"] = True  # the box is drawn when its expander is open
    at.run()
    at.sidebar.expander[0].text_input[0].input(str(run))
    at.sidebar.expander[0].button[0].click()
    at.run()
    at.switch_page("pages/overview.py")
    at.run()
    assert not at.exception
    assert at.title[0].value == md("__main__.CreditMLP") == "\\_\\_main\\_\\_.CreditMLP"
    captions = [c.value for c in at.caption]
    assert any(md("Dataset.__getitem__ got index 7") in c for c in captions), captions
    # rendered, the reader sees the name itself
    (finding,) = [c for c in captions if "getitem" in c]
    assert "Dataset.__getitem__ got index 7" in plain(finding)[0]
    assert "strong" not in plain(finding)[1]


HOSTILE_FAILURES = {
    # the report: became links and a remote image the browser fetched (the typed
    # decoder of debugkit.runschema now refuses such a record; md() is the second layer)
    "numbers": {
        "step": "[click](http://evil.example/step) ![px](http://127.0.0.1:9/step.png)",
        "rank": "<http://evil.example/rank> [r](javascript:alert(1))",
        "dataset_indices": ["![px](http://127.0.0.1:9/idx.png)", "[i](http://evil.example/i)"],
        "attempt": "![a](http://127.0.0.1:9/attempt.png)",
    },
    # strings the format allows, shown as written
    "strings": {
        "error_type": "[click](http://evil.example/type)",
        "kind": "![px](http://127.0.0.1:9/kind.png)",
        "capture_errors": {"model": "[m](http://evil.example/m) ![px](http://127.0.0.1:9/m.png)"},
    },
}


def _rendered_tags(at) -> set:
    """Every tag Markdown makes of the text the page sent (markdown, captions, boxes)."""
    tags: set = set()
    for el in [*at.markdown, *at.caption, *at.error, *at.warning, *at.info, *at.success]:
        tags |= plain(str(el.value))[1]
    return tags


@pytest.mark.parametrize("fields", list(HOSTILE_FAILURES))
@pytest.mark.parametrize("page", ["overview", "replay"])
def test_a_failure_s_step_rank_and_indices_are_text(page, fields, tmp_path):
    """Issue 28: a failure.json whose step, rank and dataset indices are Markdown links and
    remote images (the browser fetched them) renders them as text on every page."""
    import json
    import os
    import shutil

    from tests.conftest import SAMPLE_RUNS

    from ._apptest import open_page

    run = os.path.join(os.environ["DEBUGKIT_STORE"], "md-failure")
    shutil.copytree(SAMPLE_RUNS / "digits-bad-label", run)
    fj = os.path.join(run, "failures", "r0-s0000075-exception", "failure.json")
    rec = json.load(open(fj))
    rec.update(HOSTILE_FAILURES[fields])
    with open(fj, "w") as f:
        json.dump(rec, f)
    at = open_page(page, check=False, run="md-failure")
    assert not at.exception, [e.value for e in at.exception]
    tags = _rendered_tags(at)
    assert not tags & {"a", "img"}, tags
    if fields == "strings":  # shown, as text
        shown = "\n".join(plain(str(el.value))[0] for el in [*at.markdown, *at.caption])
        assert "[click](http://evil.example/type)" in shown
