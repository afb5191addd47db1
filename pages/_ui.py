"""How pages show things: Markdown-safe text, errors, findings cards, the page's note.

Every user or code string that goes into Markdown goes through :func:`md` or :func:`code`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import traceback
from pathlib import Path
from typing import NoReturn

import streamlit as st

from debugkit.errors import DebugkitError

log = logging.getLogger("debugkit.pages")

# What Markdown (CommonMark + GFM, as Streamlit renders it) would read as formatting:
# emphasis and code marks, backslashes, ``~`` and ``$`` (strikethrough, maths) anywhere;
# an underscore only where it can open or close emphasis (not inside ``batch_size``);
# ``](`` / ``][`` (links, images) and ``[^`` (footnotes), not a lone ``[0, 10)``; ``<``
# before a tag or autolink; a colon that opens an ``:icon:`` shortcode or a
# ``:red[...]`` directive; and at the start of a line what opens a block (headings,
# quotes, lists, tables, rules, setext underlines).
_MD_INLINE = re.compile(r"[\\`*~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[])|\[(?=\^)"
                        r"|<(?=[A-Za-z/!?])|:(?=[A-Za-z0-9_+/-]+[:\[])")
_MD_LINE_START = re.compile(r"^(\s*(?:\d+)?)([#>+=|.)-])", re.MULTILINE)


class PageEnd(BaseException):
    """Raised by :func:`end_page`: the page has said what it had to (an empty state, an
    error box) and ends here. app.py catches it and then draws the sidebar, which comes
    after the page's content (a BaseException, so a page's ``except Exception`` does not
    swallow it)."""


def end_page() -> NoReturn:
    """End the page here, like ``st.stop()``, but let app.py draw the sidebar after it:
    after ``st.stop()`` Streamlit draws nothing more in this script run, and the sidebar
    (the page menu and the run picker) is drawn after the page, so that the page's first
    chart reaches the browser before the sidebar's 20 or so messages."""
    raise PageEnd


@functools.lru_cache(maxsize=8)
def data_url(file: Path, mime: str = "image/png") -> str:
    """A small file of the app (the favicon) as a ``data:`` URL, read once per process.
    Given a path, ``st.set_page_config(page_icon=...)`` opens and re-encodes the image with
    PIL in every new session's first script run; a data URL is passed to the browser as
    it is, and the browser fetches nothing more for it."""
    import base64

    return f"data:{mime};base64," + base64.b64encode(Path(file).read_bytes()).decode("ascii")


def md(value) -> str:
    """``value`` as literal text inside Markdown (``st.markdown``, ``st.caption``,
    ``st.error`` ... all render Markdown).

    User and code text (layer names such as ``__getitem__``, ``__main__.CreditMLP``,
    paths, error messages, run names) is escaped: each character Markdown or Streamlit
    would read as formatting gets a backslash (CommonMark allows one before any ASCII
    punctuation), so ``__getitem__`` stays ``__getitem__`` and ``:red[x]`` stays text.
    """
    text = _MD_INLINE.sub(lambda m: "\\" + m.group(0), str(value))
    text = _close_shortcodes(text)
    return _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


# What Streamlit's front end takes for an emoji shortcode (``:smile:``) before it renders
# Markdown; a match anywhere makes the browser load the emoji plugin (265 kB of JavaScript)
# first. A time or timestamp reads as one: ``05:34:26+00:00`` holds ``:26+00:``.
_SHORTCODE = re.compile(r"(?=(:[\w+-][\w+-]*):)")


def _close_shortcodes(text: str) -> str:
    """Escape the colon that would close a shortcode (the one that opens it is escaped by
    ``_MD_INLINE``): the text reads the same, and no longer looks like one to the front
    end, which would load its emoji code for it (issue 35 item 9)."""
    closing = {m.start() + len(m.group(1)) for m in _SHORTCODE.finditer(text)}
    if not closing:
        return text
    return "".join("\\:" if i in closing else c for i, c in enumerate(text))


def text_table(df) -> str:
    """A small DataFrame as a Markdown table, every cell escaped (:func:`md`, and ``|``).

    For a few rows of text that need no sorting or scrolling: the Markdown renderer is
    already loaded on every page, where ``st.dataframe`` (or ``st.table``) makes the
    browser load and run 1-1.5 MB of data-grid and Arrow JavaScript first, which comes
    before a chart on the same page is drawn.
    """
    def cell(v) -> str:  # each piece between pipes escaped, the pipes escaped for the table
        return "\\|".join(md(part) for part in str(v).replace("\n", " ").split("|"))

    lines = ["| " + " | ".join(cell(c) for c in df.columns) + " |",
             "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def code(value) -> str:
    """``value`` as an inline code span (shown verbatim; backticks inside are kept)."""
    text = str(value).replace("\n", " ")
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def visitor_text(value) -> str:
    """``value`` as a visitor may see it: the served folders' absolute paths (and the
    cache's) replaced by their names, so a message names ``runs/my-run/...``, never
    where the server keeps it (:func:`debugkit.io.served_runs.relative_to_roots`)."""
    from debugkit._fsutil import cache_dir
    from debugkit.io.served_runs import relative_to_roots
    from pages._runs import roots, store_dir

    # the served roots, the store, and the app's own folder (its examples/, debugkit/)
    folders = [*roots(), store_dir(), Path(__file__).resolve().parents[1]]
    try:
        folders.append(cache_dir())
    except OSError:
        pass
    return relative_to_roots(str(value), folders)


def key_for(prefix: str, path) -> str:
    """A widget key for one run: ``prefix`` and a digest of the run's path. A key reaches
    the browser (in the element's id and its ``st-key-`` class), so it never holds the
    server's path."""
    import hashlib

    return f"{prefix}_{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"


def recorded_text(value, roots=()) -> str:
    """A text a run recorded (a traceback, an error message, a file path, a diff) as a
    visitor may see it: the recording machine's folders gone, each recorded path relative to
    its code root or project folder (``roots``: :func:`pages._data.recorded_roots`); one
    under none of them but under a folder this server serves as :func:`visitor_text` names
    it (``runs/my-run/x``), else by its file name."""
    from debugkit.analysis.recorded_paths import display_paths_in

    text = "" if value is None else str(value)
    if "/" not in text and "\\" not in text:
        return text  # no path in it (most table cells)
    return visitor_text(display_paths_in(text, roots, unknown=visitor_text))


def recorded_path(file, roots=()) -> str:
    """One recorded file path as a visitor may see it (``examples/digits.py``; see
    :func:`recorded_text`)."""
    from debugkit.analysis.recorded_paths import display_path

    return display_path(file, roots, unknown=visitor_text)  # never an absolute path


def recorded_frame(df, roots=()):
    """``df`` with every text cell as :func:`recorded_text` shows it (a table of recorded
    names: threads, processes, commands)."""
    from pandas.api.types import is_object_dtype, is_string_dtype

    out = df.copy()
    for col in out.columns:
        if is_string_dtype(out[col]) or is_object_dtype(out[col]):
            out[col] = [recorded_text(v, roots) if isinstance(v, str) else v for v in out[col]]
    return out


def recorded_values(value, roots=()):
    """``value`` (a report: dicts, lists, strings) with every string in it as
    :func:`recorded_text` shows it, for a page that shows it whole (a JSON view)."""
    if isinstance(value, str):
        return recorded_text(value, roots)
    if isinstance(value, dict):
        return {k: recorded_values(v, roots) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [recorded_values(v, roots) for v in value]
    return value


def show_error(exc: BaseException, where: str = "") -> None:
    """A DebugkitError as its message; anything else as a short note that names the run
    (its traceback goes to the server's log, never to the visitor: it would show server
    paths, and a bad run must not make the page look broken for everyone). Either way
    without the server's folders (:func:`visitor_text`)."""
    if isinstance(exc, DebugkitError):
        st.error(md(visitor_text(exc)), icon=":material/error:")
        return
    run = st.session_state.get("debugkit_run_path")
    rid = st.query_params.get("run") or (os.path.basename(str(run).rstrip("/")) if run else "")
    log.error("unexpected error%s on run %s:\n%s", f" in {where}" if where else "", rid or "-",
              "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    detail = str(exc)
    if run:
        detail = detail.replace(str(run), rid or "the run")
    detail = visitor_text(detail)  # the served folders as their names
    st.error(MSG_UNEXPECTED.format(where=f" in {md(where)}" if where else "",
                                   run=f" on run {code(rid)}" if rid else "",
                                   type=type(exc).__name__, detail=md(detail[:300])),
             icon=":material/bug_report:")


#: What a visitor sees for an exception that is not a DebugkitError (a bug, or a file
#: shape no check foresaw); the traceback is in the server's log.
MSG_UNEXPECTED = ("Something went wrong{where}{run}: {type}: {detail}. The rest of the app "
                  "and other runs are not affected; the details are in the server's log.")

SEVERITY_ICON = {"error": ":material/error:", "warning": ":material/warning:", "info": ":material/info:"}


def show_findings(found: list, *, empty: str | None = None, summary: str | None = None,
                  scroll_over: int | None = None, detail=None, action=None, roots=()) -> None:
    """Findings as cards, in the order given (:func:`pages._data.findings`: `debugkit
    diagnose`'s): severity, kind, step, rank, layer, the message (escaped), the findings
    attached as evidence (:func:`show_related`). Every page shows findings with this.

    ``empty``: what a success box says when there are none (nothing drawn without it);
    ``summary``: a caption line of counts by severity, this text after them; ``scroll_over``:
    more findings than this scroll in a box; ``detail(f)`` draws a page's own evidence
    under a card's message, ``action(f, i)`` its buttons at the card's foot; ``roots`` the
    recording machine's folders (:func:`pages._data.recorded_roots`): a message quoting a
    recorded path (an error naming a file) shows it as :func:`recorded_text` does.
    """
    if not found:
        if empty:
            st.success(empty, icon=":material/check:")
        return
    if summary is not None:
        counts = {s: sum(f.severity == s for f in found) for s in ("error", "warning", "info")}
        st.caption(" · ".join(f"{n} {s}" for s, n in counts.items() if n) + (f" · {summary}" if summary else ""))
    box = (st.container(height=120 * scroll_over, border=False)
           if scroll_over is not None and len(found) > scroll_over else st.container(border=False))
    with box:
        for i, f in enumerate(found):
            with st.container(border=True):
                where = " · ".join(x for x in (f"step {md(f.step)}" if f.step is not None else "",
                                               f"rank {md(f.rank)}" if f.rank is not None else "") if x)
                st.markdown(f"{SEVERITY_ICON.get(f.severity, '')} **{md(f.kind)}**"
                            + (f" · {where}" if where else "") + (f" · {code(f.layer)}" if f.layer else ""))
                st.caption(md(recorded_text(f.message, roots)))
                if detail is not None:
                    detail(f)
                show_related(f, roots)
                if action is not None:
                    action(f, i)


def show_related(f, roots=()) -> None:
    """The findings attached to ``f`` as its evidence (``evidence["related"]``: the same
    event seen by another detector, or its consequence), one caption line each, under its card."""
    for r in f.evidence.get("related") or []:
        if not r.get("message"):
            continue  # a cross-reference to a finding listed on its own
        what = "Its consequence" if r.get("relation") == "consequence" else "Same event, also seen as"
        st.caption(f"{what} **{md(r.get('kind'))}** ({md(r.get('severity'))}): {md(recorded_text(r.get('message'), roots))}")


def about(text: str) -> None:
    """The page's short "what am I looking at" note, under its title, sent when opened: a
    closed expander's content is still mounted by the browser, one more element before
    the page's first chart on every page (issue 35 item 9)."""
    import zlib

    box = st.expander("What am I looking at?", icon=":material/help:", on_change="rerun",
                      key=f"about_{zlib.crc32(text.encode()):08x}")
    if box.open:
        with box:
            st.markdown(text)


def keep_widget_state(*prefixes: str) -> None:
    """Keep the values of widgets that are not drawn in every run.

    Streamlit drops a widget's value at the end of a run that did not draw it, so a
    toggle inside a lazily drawn tab or expander (``on_change="rerun"``) would be back at
    its default when its tab is opened again. Assigning the value to its own key makes
    it Session State's, which is kept (Streamlit's documented way to keep widget state
    across pages). Call it in the runs that do not draw them (a run that draws a widget
    whose value was just set this way logs Streamlit's default-value warning).
    """
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefixes)]:
        st.session_state[key] = st.session_state[key]


def is_dark() -> bool:
    """Whether the visitor's page is in the dark theme (the app follows the visitor's
    system setting, or the one picked in the app menu)."""
    try:
        return (st.context.theme or {}).get("type") == "dark"
    except Exception:  # an older Streamlit, or no browser (a bare script run)
        return False


def chart(fig, *, key: str | None = None, csv_name: str = "chart", **kwargs):
    """``st.plotly_chart(fig, key=key, **kwargs)`` and, under it, a small *CSV* button that
    downloads the data the chart draws (:func:`debugkit.charts.export.figure_csv`, made
    only when clicked). Returns what ``st.plotly_chart`` returns (a selection event)."""
    from debugkit.charts.export import figure_csv

    if is_dark():
        from debugkit.charts.theme import for_dark_theme

        fig = for_dark_theme(fig)  # white gaps, grey rules and labels drawn for a light page
    event = st.plotly_chart(fig, key=key, **kwargs)
    n = st.session_state.get("_csv_buttons", 0) + 1
    st.session_state["_csv_buttons"] = n
    st.download_button("CSV", data=lambda: figure_csv(fig), file_name=f"{key or csv_name}.csv",
                       mime="text/csv", key=f"csv_{key or n}", on_click="ignore", type="tertiary",
                       icon=":material/download:", help="The data of this chart, as CSV")
    return event


#: The figures' look (:func:`figures`): a label (wrapped between words in a narrow window) over a large value, like ``st.metric``'s
#: cards, in the page's own font and colours (light and dark themes alike).
_FIGURES_CSS = (
    "<style>"
    ".dk-figures{display:flex;flex-wrap:wrap;gap:1rem;margin:0 0 .25rem}"
    # a label wrapped to two lines keeps its value level with the others' in the row
    # each card a size container: its value's type shrinks to fit the card's width (``--n``:
    # the value's characters, ~0.6 em each), down to 1rem, instead of ending in "…" in a
    # narrow window ("432.4 MiB" in a third of 450 px)
    ".dk-figure{flex:1 1 8rem;min-width:0;display:flex;flex-direction:column;container-type:inline-size}"
    ".dk-figure-label{font-size:.875rem;opacity:.8;margin:0;flex-grow:1}"
    ".dk-figure-label[title]{text-decoration:underline dotted;text-underline-offset:3px;cursor:help}"
    ".dk-figure-value{font-size:clamp(1rem,calc(100cqi / (.6 * var(--n,1))),2.25rem);line-height:1.3;"
    "margin:0;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}"
    ".dk-figure-note{font-size:.875rem;opacity:.7;margin:0}"
    ".dk-figure-note.bad{color:#ff4b4b;opacity:1}"
    "</style>")


def figures(items) -> None:
    """A row of figures, each a label over a large value (the look of ``st.metric``), as
    one ``st.html`` block.

    ``items``: ``(label, value)``, ``(label, value, help)`` or ``(label, value, help,
    note)`` tuples (``help``: the label's tooltip; ``note``: a small line under the value,
    given as ``"!text"`` to draw it in red). Every piece is escaped as HTML text.

    ``st.metric`` makes the browser fetch and run its own code and a number-formatting
    library (Metric, numbro: ~60 kB of JavaScript) before the page's first chart, even
    drawn after it (the browser mounts every element of a script run at once); the app
    shell's ``st.html`` code is loaded on every page already (issue 35 item 9).
    """
    import html

    cells = []
    items = [(*item, None, None)[:4] for item in items]
    # a row where some figure has a note gives the others an empty one, so that every
    # value sits on one line (the labels take the rest: see _FIGURES_CSS)
    noted = any(note for *_, note in items)
    for label, value, help_, note in items:
        tip = f' title="{html.escape(str(help_))}"' if help_ else ""
        cell = (f'<div class="dk-figure"><p class="dk-figure-label"{tip}>{html.escape(str(label))}</p>'
                f'<p class="dk-figure-value" style="--n:{max(len(str(value)), 1)}">{html.escape(str(value))}</p>')
        if note:
            bad = str(note).startswith("!")
            cell += (f'<p class="dk-figure-note{" bad" if bad else ""}">'
                     f"{html.escape(str(note)[1:] if bad else str(note))}</p>")
        elif noted:
            cell += '<p class="dk-figure-note" aria-hidden="true">&nbsp;</p>'
        cells.append(cell + "</div>")
    st.html(_FIGURES_CSS + '<div class="dk-figures">' + "".join(cells) + "</div>")


def controls(label: str, shown=None, *, none: str = "none", most: int = 3, **kwargs):
    """A popover for a page's select boxes, multiselects and sliders, its button naming
    what they are set to (``Scalars: loss, lr``; ``shown``: a value, a list of values, or
    None for ``label`` alone), for use as ``with _ui.controls(...):``.

    The browser draws a popover's content when it is opened, so the widgets' front-end
    code is not fetched and run before the page's first chart (issue 35 item 9): a select
    box or multiselect is ~20 JavaScript files (125 kB of combobox code), a slider 120 kB
    with its number and date formatting. Drawn after the chart in the same script run
    they were still loaded before it (the browser mounts every element of a run at once).
    The widgets keep their keys and session state: a change reruns the page as before.
    """
    if shown is None:
        text = label
    else:
        values = [shown] if isinstance(shown, str | int | float) else list(shown)
        words = ", ".join(md(v) for v in values[:most]) or none
        text = f"{label}: {words}" + (f" +{len(values) - most}" if len(values) > most else "")
    return st.popover(text, **kwargs)
