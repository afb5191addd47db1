"""What a page load costs, whatever the machine's load (issue 35 item 9): the modules a
page imports on a new server and the Plotly figures it sends before its first chart.
``bench/pages.py`` times the same visits in a browser; these pin the causes.

Each import check runs the page in a new Python process (an AppTest there), so nothing
another test imported hides what the page imports itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

from ._apptest import chart_keys, figures, flames, open_page

PROBE = """
import json, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({app!r}, default_timeout=120)
at.query_params["run"] = {run!r}
for k, v in {query!r}.items():
    at.query_params[k] = v
at.switch_page({page!r})
at.run()
print(json.dumps({{"torch": "torch" in sys.modules, "charts": len(at.get("plotly_chart")),
                   "errors": [str(e.value) for e in at.exception] + [e.value for e in at.error]}}))
"""


def _load_in_new_process(page: str, run: str, tmp_path, **query) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DEBUGKIT_CACHE": str(tmp_path / "cache"),
           "DEBUGKIT_STORE": str(tmp_path / "store")}
    code = PROBE.format(app=str(ROOT / "app.py"), run=run, page=f"pages/{page}.py", query=query)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_checkpoints_page_load_does_not_import_torch(tmp_path):
    """Checkpoints reads the run's safetensors checkpoints with numpy (weight statistics,
    the change heatmap and the first/last comparison); torch's import (1.3-1.8 s of CPU)
    was most of a new server's first visit."""
    got = _load_in_new_process("checkpoints", "digits-resumed", tmp_path, moved="1")
    assert got["errors"] == []
    assert got["charts"] >= 2  # the heatmap and the moved-most bars (opened by ?moved=1) were drawn
    assert got["torch"] is False


def _chart_keys(page: str, run: str) -> list:
    at = open_page(page, run=run)
    return chart_keys(at)


def test_only_the_open_tab_builds_and_sends_its_figures():
    """Tabs build only the open one (``TabContainer.open``; a click on another reruns the
    page): each figure is JSON to send and a plot for the browser to draw before the page
    is done. Distributed sent 6 figures, Checkpoints 3 and the audit 14 before this."""
    assert _chart_keys("distributed", "ddp-straggler") == ["dist_heatmap"]  # lines: when opened
    assert _chart_keys("checkpoints", "digits-resumed") == ["ckpt_heatmap"]  # moved most: when opened


def test_overview_draws_no_code_block_or_data_grid_before_it_is_opened():
    """A code block (Streamlit's syntax highlighter) and a data grid are each over 1.5 MB
    of JavaScript the browser loads and runs before the loss curve is drawn (+2.1 s and
    +0.9 s to the one-chart floor's first chart, paired medians at load 10). The failure
    message is plain text; the traceback and the package list are drawn when opened."""
    at = open_page("overview", run="digits-bad-label")
    assert chart_keys(at) == ["loss_curve"]
    assert not at.code and not at.dataframe and not at.json  # the config is a Markdown table
    config = next(m.value for m in at.markdown if m.value.startswith("| key | value |"))
    assert config.splitlines()[2:4] == ["| lr | 0\\.1 |", "| hidden | 64 |"]  # 0\.1 reads 0.1
    assert [t.value for t in at.text] == ["Target 12 is out of bounds."]  # the failure's message
    assert [e.label for e in at.expander][1:3] == ["Traceback", "Installed packages (13)"]
    at.session_state["ov_tb_r0-s0000075-exception"] = True  # as a click on the expander does
    at.run()
    assert [c.language for c in at.code] == ["python"] and "IndexError" in at.code[0].value
    assert not at.dataframe
    at.session_state["ov_packages"] = True
    at.run()
    assert "torch" in at.dataframe[0].value["package"].tolist()


def test_a_text_table_keeps_every_cell_in_its_column():
    """``_ui.text_table`` (Scalars' last values): recorded names are escaped, a ``|`` in one
    does not split its cell."""
    import pandas as pd

    from pages._ui import text_table

    table = text_table(pd.DataFrame({"key": ["a|b", "__x__", "-1"], "last value": ["NaN", "*2*", "3"]}))
    lines = table.splitlines()
    assert lines[:2] == ["| key | last value |", "|---|---|"]
    assert lines[2:] == ["| a\\|b | NaN |", "| \\_\\_x\\_\\_ | \\*2\\* |", "| \\-1 | 3 |"]


def _figure_bytes(at) -> dict:
    return {c.key: len(c.proto.spec) for c in at.get("plotly_chart")}


def test_gradients_sends_its_heatmap_in_compact_arrays():
    """Gradients' heatmap was 59 kB of figure JSON on digits-exploding (104 steps x 15
    rows): its NaN/Inf overlay sent two full-size arrays for one marked column, the zero
    overlay one for 23 columns, and the hover's step numbers were float32. The overlays now
    span their marked columns and the steps are small integers: 22 kB, the same cells."""
    at = open_page("gradients", run="digits-exploding", lines="1")
    sizes = _figure_bytes(at)
    assert list(sizes) == ["grad_heatmap", "grad_lines_chart"]
    assert sizes["grad_heatmap"] < 30_000, sizes
    heat = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
    assert [t["name"] for t in heat if t["type"] == "heatmap"] == ["log10 norm", "NaN/Inf", "exactly 0"]


def test_distributed_and_checkpoints_draw_no_data_grid_before_it_is_opened():
    """Each drew a data grid (1.5 MB of JavaScript, +0.9 s to the floor's first chart at
    load 10) above its first chart: the rank list and the checkpoint list. Both are now
    Markdown tables with every column in a grid drawn when opened; so is Checkpoints'
    "All tensors" list (a collapsed expander still drew its grid)."""
    at = open_page("distributed", run="ddp-straggler")
    assert chart_keys(at) == ["dist_heatmap"]
    assert not at.dataframe and not at.code and not at.json and not at.table
    ranks = next(m.value for m in at.markdown if m.value.startswith("| rank |"))
    assert len(ranks.splitlines()) == 2 + 4  # header, rule, ranks 0-3
    at.session_state["dist_ranks"] = True
    at.run()
    assert at.dataframe[0].value["rank"].tolist() == [0, 1, 2, 3]

    at = open_page("checkpoints", run="digits-resumed")
    assert chart_keys(at) == ["ckpt_heatmap"]
    assert not at.dataframe and not at.code and not at.json and not at.table
    listing = next(m.value for m in at.markdown if m.value.startswith("| checkpoint |"))
    assert [r.split(" | ")[0] for r in listing.splitlines()[2:]] == [
        "| step 30", "| step 60", "| step 90", "| step 120", "| step 150"]
    at.session_state["ckpt_all_tensors"] = True
    at.run()
    assert len(at.dataframe[0].value) == 6


def test_the_audit_draws_no_data_grid_or_arrow_table():
    """The audit drew a data grid (the group metrics, above its first chart) and an
    ``st.table`` (the provenance: 1 MB of Arrow JavaScript). Both are Markdown tables now;
    a group's intervals sit beside its rates."""
    at = open_page("audit", run="credit-audit", timeout=240)
    assert not at.dataframe and not at.table and not at.code and not at.json
    groups = next(m.value for m in at.markdown if m.value.startswith("| group | rows |"))
    rows = groups.splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| <25", "| 25\\-34 (reference)", "| 35\\-44", "| 45\\-59", "| 60\\+"]
    assert "| 0.613 (0.490–0.735) |" in rows[0].replace("\\", "")  # selection rate and its interval
    prov = next(m.value for m in at.markdown if m.value.startswith("| what | value |"))
    assert "| Command | examples/credit.py" in prov.replace("\\", "")
    # the beeswarm's numeric points are coloured by uint16 ranks (float64 fractions before)
    at.session_state["audit_shap_open"] = True
    at.run()
    assert _figure_bytes(at)["beeswarm"] < 200_000  # 220.2 kB before


def test_memory_snapshot_builds_only_its_open_tab():
    """A memory snapshot's four tabs each drew their chart (and three data grids) on every
    load, and the allocator settings' collapsed expander still loaded st.json's code: now
    only the open tab is built, and the settings when opened."""
    from pathlib import Path

    from tests.app.test_memory_page import make_oom_run

    make_oom_run(Path(os.environ["DEBUGKIT_STORE"]))
    at = open_page("memory", run="oom-run")
    assert chart_keys(at) == ["mem_timeline", "snap_timeline"]
    assert not at.dataframe and not at.json
    at.session_state["mem_snap_tab"] = "Segments"
    at.run()
    assert chart_keys(at) == ["mem_timeline", "snap_segments"]
    assert len(at.dataframe) == 1


# (page, sample, the one figure its first load sends, a link that opens the rest)
FIRST_CHART = [
    ("gradients", "digits-exploding", "grad_heatmap", {"lines": "1"}, ["grad_lines_chart"]),
    ("distributed", "ddp-straggler", "dist_heatmap", {"lines": "1"}, ["dist_lines"]),
    ("checkpoints", "digits-resumed", "ckpt_heatmap", {"moved": "1"}, ["ckpt_moved"]),
    ("profiler", "digits-profiled", "flamegraph", {"breakdown": "1"}, ["step_breakdown"]),
    ("audit", "credit-audit", "disp_age_in_years", {"rates": "1", "shap": "1", "shap_groups": "1"},
     ["bars_age_in_years", "beeswarm", "mean_abs", "dep_age_in_years", "bygroup_age_in_years"]),
]


@pytest.mark.parametrize("page, run, first, query, more", FIRST_CHART, ids=[p[0] for p in FIRST_CHART])
def test_a_chart_page_sends_one_figure_first_and_the_others_when_opened(page, run, first, query, more):
    """The first load of Gradients, Distributed, Checkpoints, the Profiler and the Bias audit
    sends one figure: each second figure sent and drawn with the first delayed the page's first chart
    (+0.6 to +0.9 s over the one-chart floor with two figures, +1.9 to +2.3 s for the
    audit's six). The others are in expanders built when opened, and a link that opens them
    (``?lines=1`` ...) shows them in a new session."""
    assert _chart_keys(page, run) == [first]
    at = open_page(page, run=run, timeout=240, **query)
    assert sorted(chart_keys(at)) == sorted([first, *more])
    assert not at.warning


def test_an_expander_link_value_the_page_cannot_use_is_a_warning_and_closed():
    at = open_page("gradients", run="digits-exploding", lines="yes")
    assert [w.value for w in at.warning] == ["?lines='yes' is not 0 or 1: showing the default instead."]
    assert chart_keys(at) == ["grad_heatmap"]
    at = open_page("gradients", run="digits-exploding", line="2.bias")  # a link naming lines opens them
    assert chart_keys(at) == ["grad_heatmap", "grad_lines_chart"]


def test_the_audit_builds_only_the_figures_it_draws(monkeypatch):
    """The audit page built all 14 figures of the German-credit audit on a page load
    (0.25-0.35 s of server CPU once plotly is warm); it now builds each one when a section
    draws it."""
    import streamlit as st

    from debugkit.audit import report

    built = []
    real = report.figure

    def counting(doc, rows, key):
        built.append(key)
        return real(doc, rows, key)

    monkeypatch.setattr(report, "figure", counting)
    st.cache_data.clear()
    at = open_page("audit", run="credit-audit", timeout=240)
    assert chart_keys(at) == ["disp_age_in_years"]
    assert built == ["disparity:age_in_years"]
    at.session_state["audit_attr_tab"] = "sex · Needs review"
    at.run()
    assert built == ["disparity:age_in_years", "disparity:sex"]


def test_overview_shows_a_nested_or_long_config_as_a_table(tmp_path):
    """Nested keys are dotted, values JSON; past 30 keys the rest is in a JSON view drawn
    when opened (``st.json``'s code is loaded only then)."""
    import shutil

    run = tmp_path / "r"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"] = {"optim": {"lr": 0.1, "betas": [0.9, 0.99]}, "name": "a|b",
                          **{f"k{i:02d}": i for i in range(40)}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    at = open_page("overview", run_path=run)
    table = next(m.value for m in at.markdown if m.value.startswith("| key | value |")).splitlines()
    assert table[2:5] == ["| optim.lr | 0\\.1 |", "| optim.betas | [0.9, 0.99] |", "| name | a\\|b |"]
    assert len(table) == 2 + 30 and not at.json
    at.session_state["ov_config_all"] = True  # as a click on "All 43 keys (JSON)" does
    at.run()
    assert at.json[0].value and json.loads(at.json[0].value)["optim"]["betas"] == [0.9, 0.99]


def test_the_profiler_says_the_step_breakdown_in_words_before_its_chart_is_opened():
    at = open_page("profiler", run="digits-profiled")
    assert chart_keys(at) == ["flamegraph"]
    # the finding, then the shares line, in one element (each element before the flamegraph delays it)
    words = next(m.value for m in at.markdown if "\n\ndata loading **" in m.value)
    shares = words.split("\n\n")[-1]
    assert words.startswith("Backward takes the most time")
    assert "backward **48 %**" in shares and shares.count(" %**") == 5  # every phase of the bar


def test_the_profiler_builds_only_the_flame_tree_it_draws(monkeypatch):
    """The flamegraph opens at the training loop; a page load also built the whole
    profile's tree (a third of the page's script run before its first chart, cold) and
    threw it away. It is built when "the whole profile" is picked."""
    import streamlit as st

    from debugkit.analysis import profile as ap

    built = {"all": 0, "loop": 0}
    real_all, real_loop = ap.compute_flame_tree, ap.compute_loop_flame_tree

    def count_all(*a, **k):
        built["all"] += 1
        return real_all(*a, **k)

    def count_loop(*a, **k):
        built["loop"] += 1
        return real_loop(*a, **k)

    monkeypatch.setattr(ap, "compute_flame_tree", count_all)
    monkeypatch.setattr(ap, "compute_loop_flame_tree", count_loop)
    st.cache_data.clear()
    at = open_page("profiler", run="digits-profiled", timeout=240)
    assert chart_keys(at) == ["flamegraph"]
    flame = flames(at)["flamegraph"]
    assert flame["name"][0].startswith("training loop: ")
    assert built == {"all": 0, "loop": 1}
    at.segmented_control(key="sp_scope").set_value("all").run()
    assert built == {"all": 1, "loop": 1}
    flame = flames(at)["flamegraph"]
    assert flame["samples"][0] == 12307  # every main-thread sample


def test_the_profiler_computes_its_step_breakdown_once(monkeypatch):
    """The breakdown's words and the training loop's flamegraph both need the step
    breakdown; the page computed it twice (0.03-0.06 s each of a cold page load before
    the first chart). The loop's tree now takes the page's (``phases=``)."""
    import streamlit as st

    from debugkit.analysis.profile import steps

    calls = []
    real = steps._step_breakdown

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(steps, "_step_breakdown", counting)
    st.cache_data.clear()
    at = open_page("profiler", run="digits-profiled", timeout=240)
    flame = flames(at)["flamegraph"]
    assert flame["name"][0].startswith("training loop: ")
    assert any("\n\ndata loading **" in m.value for m in at.markdown)
    assert len(calls) == 1


def test_the_audits_first_chart_draws_its_band_and_rows_in_one_layout_update(monkeypatch):
    """plotly's ``add_hline`` / ``add_vrect`` / ``add_vline`` re-validate every shape of
    the layout on each call: six calls were 0.14 s of a new server's first Bias audit
    visit before its chart. The disparity figure sets its shapes at once, the same ones."""
    import plotly.graph_objects as go
    import streamlit as st

    def refuse(*a, **k):
        raise AssertionError("shape added one at a time")

    for name in ("add_hline", "add_vline", "add_vrect", "add_hrect", "add_shape"):
        monkeypatch.setattr(go.Figure, name, refuse)
    st.cache_data.clear()
    at = open_page("audit", run="credit-audit", timeout=240)
    chart = at.get("plotly_chart")[0]
    assert chart.key == "disp_age_in_years"
    layout = json.loads(chart.proto.spec)["layout"]
    band = next(s for s in layout["shapes"] if s["type"] == "rect")
    assert (band["x0"], band["x1"], band["yref"], band["layer"]) == (0.8, 1.25, "y domain", "below")
    parity = [s for s in layout["shapes"] if s["type"] == "line" and s["xref"] == "x"]
    assert [(s["x0"], s["line"]["dash"]) for s in parity] == [(1.0, "dot")]
    rows = [s["y0"] for s in layout["shapes"] if s["type"] == "line" and s["xref"] == "x domain"]
    assert rows == [0.5, 1.5, 2.5, 3.5]  # between the five metrics' rows
    assert [a["text"] for a in layout["annotations"] if a["text"].startswith("band ")] == ["band 0.8–1.25"]


def test_the_audit_reads_its_stored_audit_once(monkeypatch):
    """The page's data and its figures each read the stored audit through one cached call,
    but with its arguments written two ways (``shared`` passed, and left to its default),
    which Streamlit keys apart: the audit (JSON, rows' Parquet) was read twice before the
    first chart on a new server."""
    import streamlit as st

    from debugkit.audit import stored_audits

    read = []
    real = stored_audits.load_audit

    def counting(*a, **k):
        read.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(stored_audits, "load_audit", counting)
    st.cache_data.clear()
    at = open_page("audit", run="credit-audit", timeout=240)
    assert chart_keys(at) == ["disp_age_in_years"]
    assert len(read) == 1
    at.session_state["audit_attr_tab"] = "sex · Needs review"
    at.run()
    assert chart_keys(at) == ["disp_sex"] and len(read) == 1


@pytest.mark.parametrize("page, run, first, labels", [
    ("overview", "digits-bad-label", "loss_curve", ["Steps", "Ranks", "Failures", "Started", "Duration"]),
    ("memory", "memory-leak", "mem_timeline",
     ["Growth per step", "Started at step", "Grown by", "Runs out at step"]),
    ("profiler", "digits-profiled", "flamegraph", ["Samples", "Duration", "Threads", "Rate", "Recorded by"]),
    ("checkpoints", "digits-resumed", "ckpt_heatmap",
     ["Total relative change", "Tensors that moved", "Never moved", "NaN/Inf in B"]),
    ("audit", "credit-audit", "disp_age_in_years",
     ["demographic parity difference", "demographic parity ratio", "equalized odds difference",
      "equal opportunity difference"]),
])
def test_a_chart_page_draws_its_figures_without_st_metric(page, run, first, labels):
    """``st.metric`` makes the browser fetch and run the Metric and numbro code (8 files,
    ~68 kB) before a page's first chart, wherever the cards are drawn in the script run:
    the pages draw the same figures with ``_ui.figures`` (one st.html block, whose code
    the app shell loads anyway). Every figure is still there, with its label."""
    at = open_page(page, run=run, timeout=240)
    assert not at.metric
    assert list(figures(at)) == labels
    assert chart_keys(at)[:1] == [first]


def test_figures_escape_what_they_show():
    """A run's name or a metric's label is text, never HTML."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(
        "from pages import _ui\n"
        "_ui.figures([('<b>x</b>', '<img src=x onerror=alert(1)>', 'a \"tip\"', '!<i>bad</i>')])\n")
    at.run()
    body = next(e.proto.body for e in at.get("html") if "dk-figures" in e.proto.body)
    assert "<img" not in body and "<b>x" not in body and "<i>" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body and 'title="a &quot;tip&quot;"' in body
    assert 'class="dk-figure-note bad">&lt;i&gt;bad&lt;/i&gt;' in body
    assert figures(at) == {"<b>x</b>": "<img src=x onerror=alert(1)>"}


def test_distributed_computes_the_gradient_divergence_when_its_tab_is_opened(monkeypatch):
    """A page load computed every rank's gradient divergence (40 ms of CPU before the
    first chart on a new server) for a tab that is not open and for findings the run
    list's index already holds: it is computed when its tab is opened."""
    import streamlit as st

    from debugkit.analysis import distributed as ad

    calls = []
    real = ad.compute_grad_divergence

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    open_page(None)  # Home: the run list's index now holds every sample's findings
    monkeypatch.setattr(ad, "compute_grad_divergence", counting)
    st.cache_data.clear()
    at = open_page("distributed", run="ddp-straggler")
    assert chart_keys(at)[:1] == ["dist_heatmap"]
    assert "straggler" in " ".join(m.value for m in at.markdown)  # the findings are shown
    assert calls == []
    at.session_state["dist_tab"] = "Gradient divergence"  # as a click on the tab does
    at.run()
    assert calls == [1] and chart_keys(at) == ["dist_divergence"]


#: Streamlit's front end (StreamlitMarkdown): a Markdown text that matches this loads the
#: emoji plugin (remark-emoji and a 259 kB library) before it is drawn.
FRONT_END_SHORTCODE = r":(?!material/|streamlit:)[A-Za-z0-9_+-][A-Za-z0-9_+-]*:"


def _texts(node) -> list[str]:
    out = [t for t in (getattr(node, "value", None), getattr(node, "label", None)) if isinstance(t, str)]
    for child in getattr(node, "children", {}).values():
        out += _texts(child)
    return out


@pytest.mark.parametrize("page, run", [("distributed", "ddp-straggler"), ("audit", "credit-audit")])
def test_no_text_makes_the_browser_load_the_emoji_code(page, run):
    """A timestamp in Markdown (the rank list's last heartbeat, the audit's creation time)
    holds what Streamlit's front end takes for an emoji shortcode (``05:34:26+00:00``:
    ``:26+00:``), so the browser loaded 265 kB of emoji JavaScript for those pages. The
    colons of recorded text are escaped both sides; the text reads the same."""
    import re

    from pages._ui import md

    at = open_page(page, run=run, timeout=240)
    found = [t for t in _texts(at._tree) if re.search(FRONT_END_SHORTCODE, t)]
    assert found == []
    assert md("2026-12-06T05:34:26+00:00") == "2026\\-12-06T05\\:34\\:26+00\\:00"  # reads the same
    assert md("a:smile:b") == "a\\:smile\\:b" and md("error: x") == "error: x"


def test_a_new_server_loads_the_audit_charts_template_before_the_first_visit():
    """``pages/_serve.warm_plotly`` (run while ``debugkit ui`` starts) loads the audit's
    ``plotly_white`` template, which plotly reads from its package data and validates on
    its first use (0.07-0.1 s of CPU of the audit's first chart on a new server): after
    it, an audit figure is built without reading any template."""
    code = """
import pkgutil
from pages._serve import warm_plotly
warm_plotly()
def refuse(*a, **k):
    raise AssertionError(f"read {a} on the first visit")
pkgutil.get_data = refuse
from debugkit.charts.audit import build_disparity_figure
a = {"groups": {"a": {"selection_rate": 0.5}, "b": {"selection_rate": 0.4}}, "order": ["a", "b"],
     "reference_group": "a", "ratios": {"b": {"selection_rate": 0.8}}}
print(build_disparity_figure(a, metrics=("selection_rate",)).layout.template.layout.plot_bgcolor)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "white"


PRELOADED_PROBE = """
import sys
from pages._serve import PRELOAD, preload
assert preload(PRELOAD) == []
from streamlit.testing.v1 import AppTest
before = set(sys.modules)
at = AppTest.from_file({app!r}, default_timeout=120)
at.query_params["run"] = {run!r}
at.switch_page({page!r})
at.run()
assert len(at.get("plotly_chart")) + len(at.get("bidi_component")) == 1 and not at.exception, at.exception
print(" ".join(sorted(m for m in set(sys.modules) - before
                      if m.startswith("pyarrow") or m == "streamlit.material_icon_names")))
"""


@pytest.mark.parametrize("page, run", [("audit", "credit-audit"), ("profiler", "digits-profiled")])
def test_a_new_servers_first_visit_imports_no_pyarrow_module_or_the_icon_names(page, run, tmp_path):
    """After ``debugkit ui``'s preload, the Bias audit's first visit imported pyarrow's
    Parquet reader (its dataset, filesystem and substrait modules with it) and
    ``pandas_compat``, and the Profiler ``pandas_compat`` and Streamlit's Material icon
    names: 16-25 ms of CPU before the first chart on a new server. The preload imports them."""
    code = PRELOADED_PROBE.format(app=str(ROOT / "app.py"), run=run, page=f"pages/{page}.py")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "DEBUGKIT_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1:] in ([], [""]), out.stdout


def test_a_new_server_lists_plotlys_array_plugins_before_the_first_visit():
    """plotly passes every array of a figure to narwhals, which on the first one reads the
    entry points of every installed package (its plugins); ``warm_plotly`` does that while
    the server starts, so the first chart page does not."""
    code = """
import importlib.metadata
import numpy as np
from pages._serve import warm_plotly
warm_plotly()
def refuse(*a, **k):
    raise AssertionError("listed the entry points on the first visit")
importlib.metadata.entry_points = refuse
import plotly.graph_objects as go
print(len(go.Figure(go.Heatmap(z=np.ones((2, 3)), x=np.arange(3))).data))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1"


def test_the_audit_draws_its_compute_form_when_opened():
    """"Compute a new audit" (collapsed on a run that has audits) drew its form, eight number
    inputs, a text area and text inputs, on every visit; now when it is opened (it opens by
    itself on a run with no audit yet)."""
    at = open_page("audit", run="credit-audit", timeout=240)
    assert "Compute a new audit" in [e.label for e in at.expander]
    assert not at.number_input and not at.text_area
    at.session_state["audit_compute_open"] = True  # as a click on it does
    at.run()
    assert "Bootstrap resamples" in [n.label for n in at.number_input]


@pytest.mark.parametrize("page,run", [("overview", "digits-bad-label"), ("distributed", "ddp-straggler"),
                                      ("scalars", "digits-exploding")])
def test_with_a_run_open_the_sidebar_draws_its_run_picker_when_opened(page, run):
    """The app shell (bench/pages.py's shell floor): the sidebar's run picker was a select
    box on every page, 21 JavaScript files (185 kB) the browser fetched and ran before the
    page's first chart, and 4 of the 21 websocket messages the shell adds to the floor's 6.
    With a run open, the sidebar names it in an expander that draws the picker when opened
    (with the run selected; picking another opens it); without one, the picker is open."""
    at = open_page(page, run=run)
    assert not at.sidebar.selectbox
    if page != "scalars":  # Overview and Distributed draw no select box at all (Scalars: its series)
        assert not at.selectbox and not at.multiselect
    box = [e for e in at.sidebar.expander if e.label == f"{run} · change"]
    assert box, [e.label for e in at.sidebar.expander]
    at.session_state["sidebar_pick_run"] = True  # as a click on it does
    at.run()
    picker = at.sidebar.selectbox[0]
    assert picker.label == "Open a run" and picker.value == run
    picker.select("memory-leak").run()
    assert not at.exception
    assert at.query_params["run"] == "memory-leak"
    assert at.session_state["debugkit_run_path"].endswith("memory-leak")
    assert [e.label for e in at.sidebar.expander][0] == "memory-leak · change"
    assert not at.sidebar.selectbox  # closed again once a run is picked


def test_without_a_run_the_run_picker_is_open():
    at = open_page("overview")
    assert [s.label for s in at.sidebar.selectbox] == ["Open a run"]
    assert at.sidebar.selectbox[0].value == "—"
    assert not [e for e in at.sidebar.expander if "· change" in e.label]


#: Widgets whose front-end code the browser loads before it draws the page's first chart
#: when they are drawn on the page: a select box or multiselect (~20 files, 125 kB of
#: combobox code), a slider (120 kB with moment and numbro), a radio or select slider.
#: Inside a popover they are drawn when it is opened (bench/pages.py: the Scalars page
#: fetched 98 scripts before its chart with them on the page, 76 with them in popovers).
HEAVY_WIDGETS = ("selectbox", "multiselect", "slider", "select_slider", "radio")


def _drawn_on_load(node, in_popover: bool = False) -> list[str]:
    """The heavy widgets of the element tree that are not inside a popover."""
    out = []
    if getattr(node, "type", None) in HEAVY_WIDGETS and not in_popover:
        out.append(f"{node.type} {getattr(node, 'label', '')!r}")
    inside = in_popover or getattr(node, "type", None) == "popover"
    for child in getattr(node, "children", {}).values():
        out += _drawn_on_load(child, inside)
    return out


def _popovers(at) -> list[str]:
    """The labels of the main area's popovers, in page order."""
    def walk(node):
        if getattr(node, "type", None) == "popover":
            yield node.proto.popover.label
        for child in getattr(node, "children", {}).values():
            yield from walk(child)
    return list(walk(at.main))


# (page, sample run, its first chart, a popover label on load)
CONTROLS = [
    ("scalars", "digits-exploding", "scalars_chart", "Scalars: loss"),
    ("gradients", "digits-exploding", "grad_heatmap", "Layers: all 14"),
    ("memory", "memory-leak", "mem_timeline", "Series: RSS (host)"),
    ("profiler", "digits-profiled", "flamegraph", "Zoom: the training loop (all of it)"),
    ("checkpoints", "digits-resumed", "ckpt_heatmap", "A (before): step 30"),
    ("audit", "credit-audit", "disp_age_in_years",
     "Audit: Gradient boosting (sklearn), held-out 40 % · Fail · 2026-12-06 05:34 · 2c7b2261f0316234"),
]


@pytest.mark.parametrize("page, run, first, popover", CONTROLS, ids=[p[0] for p in CONTROLS])
def test_a_chart_page_keeps_its_select_widgets_in_popovers(page, run, first, popover):
    """The chart pages over the floor were the ones whose own select boxes, multiselects
    and sliders the browser loaded (and ran) before their first chart; drawn after the
    chart in the same script run, they still were. In a popover named after what they
    are set to, their code is loaded when it is opened."""
    at = open_page(page, run=run, timeout=240)
    assert chart_keys(at)[:1] == [first]
    assert _drawn_on_load(at._tree) == []
    assert popover in _popovers(at)


def test_the_scalars_popovers_drive_the_chart_and_the_url():
    from pages._ui import key_for

    at = open_page("scalars", run="digits-exploding")
    assert _popovers(at) == ["Scalars: loss", "Overlay runs: none", "Smoothing 0.6"]
    run = ROOT / "sample_runs" / "digits-exploding"
    at.multiselect(key=key_for("scalars_keys", run)).set_value(["loss", "lr"]).run()
    at.slider(key="smoothing").set_value(0.3).run()
    at.multiselect(key=key_for("scalars_with", run)).set_value(["digits-mlp"]).run()
    assert not at.exception
    assert _popovers(at) == ["Scalars: loss, lr", "Overlay runs: digits-mlp", "Smoothing 0.3"]
    assert at.query_params["key"] == ["loss", "lr"] and at.query_params["smoothing"] == "0.3"
    assert at.query_params["with"] == "digits-mlp"
    names = {t["name"] for t in json.loads(at.get("plotly_chart")[0].proto.spec)["data"]}
    assert {"loss", "lr", "loss · digits-mlp", "lr · digits-mlp"} <= names, names


def test_the_gradients_popovers_drive_the_heatmap_and_the_url():
    at = open_page("gradients", run="digits-exploding")
    rows = lambda: json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["y"]  # noqa: E731
    assert len(rows()) == 15  # 14 parameters and the total
    at.multiselect(key="grad_modules").set_value(["10"]).run()
    at.text_input(key="grad_regex").input("bias").run()
    at.number_input(key="grad_clip").set_value(1.0).run()
    assert not at.exception
    assert _popovers(at)[:2] == ["Layers: 10, /bias/", "What-if clip: 1"]
    assert at.query_params["module"] == "10" and at.query_params["grad_regex"] == "bias"
    assert at.query_params["grad_clip"] == "1"
    assert rows() == ["10.bias", "__total__"]


def test_a_rank_popover_names_the_rank_and_a_pick_changes_the_url(tmp_path, monkeypatch):
    from tests.app.test_gradients_page import _two_rank_run

    _two_rank_run(tmp_path)
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path))
    at = open_page("gradients", run="two-ranks")
    assert _popovers(at)[0] == "Rank 0" and _drawn_on_load(at._tree) == []
    at.selectbox(key="grad_rank_pick").set_value(1).run()
    assert _popovers(at)[0] == "Rank 1" and at.query_params["rank"] == "1"
    at = open_page("gradients", run="two-ranks", rank="1")  # a link opens the rank it names
    assert _popovers(at)[0] == "Rank 1" and at.selectbox(key="grad_rank_pick").value == 1


def test_the_checkpoint_memory_profiler_and_audit_popovers_name_what_they_hold():
    at = open_page("checkpoints", run="digits-resumed")
    at.selectbox(key="ckpt_a").set_value(1).run()
    assert "A (before): step 60" in _popovers(at) and at.query_params["a"] == "60"
    at = open_page("memory", run="memory-leak")
    at.slider(key="mem_host_thr").set_value(0.9).run()
    assert at.query_params["host_warn"] == "0.9" and _popovers(at) == ["Series: RSS (host)", "Thresholds"]
    at = open_page("profiler", run="digits-profiled")
    at.selectbox(key="sp_fold").set_value(0.005).run()
    assert "Frames: by function · fold 0.5 %" in _popovers(at) and at.query_params["fold"] == "0.005"
    at.segmented_control(key="sp_by").set_value("frame").run()
    assert "Frames: by line · fold 0.5 %" in _popovers(at) and at.query_params["by"] == "frame"


def _sidebar_drawn(at) -> bool:
    """The sidebar's page menu (one link per page) and its run section are there."""
    links = at.sidebar.get("page_link")
    return len(links) == 12 and "### Run" in [m.value for m in at.sidebar.markdown]


def test_a_page_that_ends_early_still_draws_the_sidebar_after_it(tmp_path, monkeypatch):
    """app.py draws the sidebar after the page (its ~20 messages came before every page's
    first chart: tests/e2e/test_bench_pages.py counts them in the browser). A page that
    stops early (no run picked, the run gone, its status unreadable, Home with no runs)
    ends with ``_ui.end_page()``: after ``st.stop()`` Streamlit draws nothing more, and the
    sidebar with the run picker, the one way on from there, would be missing."""
    at = open_page("memory")  # no run: the empty state, then the open picker
    assert [i.value for i in at.info][0].startswith("Pick a run in the sidebar to see its memory")
    assert _sidebar_drawn(at) and [s.label for s in at.sidebar.selectbox] == ["Open a run"]

    broken = tmp_path / "broken"
    shutil.copytree(ROOT / "sample_runs" / "digits-bad-label", broken)
    (broken / "manifest.json").write_text("{not json")
    at = open_page("memory", check=False, run_path=broken)  # its status cannot be read
    assert not at.exception and at.error, [e.value for e in at.exception]
    assert _sidebar_drawn(at)

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(empty))
    monkeypatch.setenv("DEBUGKIT_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("DEBUGKIT_CACHE", str(tmp_path / "cache"))
    at = open_page("home")
    assert any(i.value.startswith("No runs found.") for i in at.info)
    assert _sidebar_drawn(at)


def test_a_row_of_figures_with_one_note_keeps_every_value_on_one_line():
    """The Overview's "Started" figure has a date under its value; the other figures get an
    empty note, so that in the browser every value sits at the same height (the label
    takes the rest of the cell) instead of the noted one standing higher."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_string(
        "from pages import _ui\n"
        "_ui.figures([('Steps', '76'), ('Started', '04:53', 'tip', '2026-12-04'), ('Ranks', '1')])\n"
        "_ui.figures([('Steps', '76'), ('Ranks', '1')])\n")
    at.run()
    rows = [e.proto.body for e in at.get("html") if "dk-figures" in e.proto.body]
    assert [r.count('class="dk-figure-note') for r in rows] == [3, 0]
    assert rows[0].count('aria-hidden="true">&nbsp;</p>') == 2
    assert figures(at) == {"Steps": "76", "Started": "04:53", "Ranks": "1"}


def test_memory_draws_a_short_timeline_in_svg_and_a_long_one_in_webgl():
    """A WebGL trace makes the browser create a GL context and compile its shaders before
    the first line (0.2-0.3 s in Chromium without a GPU, where the same 60-point line in
    SVG draws in 0.01-0.02 s): the timeline's lines are SVG up to ``SVG_MAX_POINTS`` points
    drawn, WebGL past it, so a long multi-rank run stays as quick to draw as before."""
    import numpy as np
    import pandas as pd

    at = open_page("memory", run="memory-leak")
    sent = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
    assert [t["type"] for t in sent] == ["scatter", "scatter"]  # RSS and the leak's trend
    from debugkit.charts.memory import build_memory_timeline_figure
    from debugkit.charts.traces import SVG_MAX_POINTS

    steps = 5_000
    long = pd.DataFrame({"step": np.tile(np.arange(steps), 8), "rank": np.repeat(np.arange(8), steps),
                         "wall_time": 0.0, "allocated_bytes": 1.0, "reserved_bytes": 2.0,
                         "peak_bytes": np.nan, "rss_bytes": 4.0})
    fig = build_memory_timeline_figure(long, None, metrics=["allocated_bytes", "rss_bytes"])
    assert 8 * 2 * 3000 > SVG_MAX_POINTS and {t.type for t in fig.data} == {"scattergl"}


def test_the_scalars_and_overview_curves_are_svg_when_short():
    """The Scalars page's and the Overview's first charts drew their curves as WebGL too
    (``Scattergl``: 190-200 ms to draw in Chromium without a GPU, 12-18 ms in SVG); they
    are SVG up to ``SVG_MAX_POINTS`` points drawn, as Memory's timeline is."""
    for page, run in (("scalars", "digits-exploding"), ("overview", "digits-bad-label")):
        at = open_page(page, run=run)
        sent = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
        assert {t["type"] for t in sent} == {"scatter"}, page


@pytest.mark.parametrize("page, run", [("overview", "digits-bad-label"), ("profiler", "digits-profiled"),
                                       ("audit", "credit-audit")])
def test_the_what_am_i_looking_at_note_is_sent_when_opened(page, run):
    """A closed expander's content is still mounted by the browser before the page's first
    chart: the note under each page's title is drawn when its expander is opened."""
    at = open_page(page, run=run, timeout=240)
    (box,) = [e for e in at.main.expander if e.label == "What am I looking at?"]
    assert box.key.startswith("about_") and not box.markdown
    at.session_state[box.key] = True  # as a click on it does
    at.run()
    (box,) = [e for e in at.main.expander if e.label == "What am I looking at?"]
    assert len(box.markdown) == 1 and len(box.markdown[0].value) > 80 and not at.exception


def test_magic_is_off_and_no_page_has_an_expression_it_would_write():
    """``.streamlit/config.toml`` turns Streamlit's magic off: with it on, every page file
    was parsed and rewritten before it was compiled (30 ms for the Bias audit's) in a new
    server's first visit and whenever no browser was connected. Magic writes a bare
    expression's value to the page; no page has one, so nothing drawn changes. A page
    that gained one would now draw nothing for it: this keeps the two in step."""
    import ast

    import tomllib
    from streamlit.runtime.scriptrunner import magic

    assert tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["runner"]["magicEnabled"] is False
    files = [ROOT / "app.py", *sorted((ROOT / "pages").glob("[a-z]*.py"))]
    assert len(files) > 10
    written = {}
    for f in files:
        src = f.read_text()
        plain = ast.unparse(ast.parse(src))
        rewritten = ast.unparse(magic.add_magic(src, str(f)))
        # magic adds its own import, and wraps each expression it would write in a call
        rewritten = rewritten.replace("import streamlit.runtime.scriptrunner.magic_funcs as __streamlitmagic__\n", "", 1)
        if rewritten != plain:
            written[f.name] = [ln for ln in rewritten.splitlines() if "__streamlitmagic__" in ln][:3]
    assert written == {}


def test_the_magic_check_sees_an_expression_magic_would_write():
    """The check above compares a page with magic's rewrite of it: for a page with a bare
    value the two differ."""
    import ast

    from streamlit.runtime.scriptrunner import magic

    src = "import streamlit as st\nx = 1\nx\n"
    rewritten = ast.unparse(magic.add_magic(src, "p.py"))
    assert "__streamlitmagic__" in rewritten.replace(
        "import streamlit.runtime.scriptrunner.magic_funcs as __streamlitmagic__\n", "", 1)
