"""AppTest of the Profiler page on the digits-profiled sample (and a stack dump)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

from debugkit.analysis.profile import MSG_COUNT_LAUNCHER
from debugkit.charts.profile import HIGHLIGHT
from pages._profile_sampled import VIEWS

from .._polling import announce_blocked, wait_for
from ..conftest import ROOT, SAMPLE_RUNS
from ._apptest import FLAMEGRAPH, chart_keys, figures, flames, open_page


def app(run="digits-profiled", **params):
    """The Profiler page with its step-breakdown chart opened (``?breakdown=1``; a page load
    draws the flamegraph alone), so the breakdown is figure 0 and the flamegraph figure 1."""
    params.setdefault("breakdown", "1")
    return open_page("profiler", check=False, timeout=240, run=run, **params)


def figure(at, i):
    return json.loads(at.get("plotly_chart")[i].proto.spec)


def metrics(at):
    return figures(at)


def open_view(at, label):
    """Switch the sampled view (only the shown one is drawn) to ``label`` and rerun."""
    at.session_state["sp_view"] = label
    return at.run()


def test_sampled_profile_view():
    at = app()
    assert not at.exception and not at.error
    assert metrics(at) == {"Samples": "46,959", "Duration": "2 min 6 s", "Threads": "24", "Rate": "100 Hz",
                           "Recorded by": "py-spy"}
    assert chart_keys(at) == ["step_breakdown", "flamegraph"]
    assert figure(at, 0)["data"][0]["type"] == "bar"
    assert any("Backward takes the most time: 48% of the training loop." in m.value for m in at.markdown)
    flame = flames(at)["flamegraph"]
    # Opens at the training loop: the samples the breakdown counts, imports left out.
    assert flame["name"][0].startswith("training loop: ") and flame["samples"][0] == 3795
    assert HIGHLIGHT not in flame["color"] and flame["root"] == -1
    at.segmented_control(key="sp_scope").set_value("all").run()
    flame = flames(at)["flamegraph"]
    assert flame["samples"][0] == 12307  # every main-thread sample
    # The views: a segmented control (no tab container), the shown one alone drawn: no data
    # grid is sent before the charts.
    assert at.segmented_control(key="sp_view").options == list(VIEWS.values()) and not at.tabs
    assert at.segmented_control(key="sp_view").value == "Flamegraph" and not at.dataframe
    open_view(at, "Top functions")
    assert not at.exception and chart_keys(at) == ["step_breakdown"]  # no flamegraph
    assert [t.label for t in at.tabs] == ["Self time (code running)", "Total time (on the stack)"]
    (table,) = at.dataframe  # the self-time tab alone
    assert table.value["self_samples"].is_monotonic_decreasing and len(table.value) > 10
    at.session_state["sp_table_tab"] = "Total time (on the stack)"
    (total,) = at.run().dataframe
    assert total.value["total_samples"].is_monotonic_decreasing
    open_view(at, "Threads")
    (threads,) = at.dataframe
    assert len(threads.value) == 24 and "thread_id" not in threads.value.columns
    # py-spy printed 59,614 samples; the page shows 46,959 and says where the rest went.
    note = MSG_COUNT_LAUNCHER.format(reported=59_614, shown=46_959, launcher=12_655)
    assert any(note in c.value for c in at.caption), [c.value for c in at.caption]


def test_search_highlights_the_matching_frames():
    at = app()
    at.text_input(key="search").input("backward").run()
    assert not at.exception
    assert any("function(s) match `backward`" in m.value for m in at.markdown)
    flame = flames(at)["flamegraph"]
    hit = [lab for lab, c in zip(flame["name"], flame["color"]) if c == HIGHLIGHT]
    assert hit and all("backward" in lab.lower() for lab in hit)
    # the zoom picker now offers the matches
    zoom = at.selectbox(key="sp_zoom_train_function_loop")
    assert all("backward" in o.lower() for o in zoom.options[1:])
    first = zoom.options[1].rsplit(" (", 1)[0]
    zoom.select_index(1).run()
    flame = flames(at)["flamegraph"]
    assert flame["name"][flame["root"]] == first


def test_thread_filter_and_frame_grouping():
    at = app()
    at.segmented_control(key="sp_threads").set_value("dataloader").run()
    assert not at.exception
    assert any("_worker_loop" in lab for lab in flames(at)["flamegraph"]["name"])
    at.segmented_control(key="sp_by").set_value("frame").run()
    assert not at.exception


def test_compare_with_the_no_workers_profile():
    at = app()
    assert not any(s.key == "sp_compare" for s in at.selectbox)  # drawn when its tab opens
    open_view(at, "Compare")
    at.selectbox(key="sp_compare").select_index(1).run()
    assert not at.exception and not at.error
    diff = flames(at)["diff_flamegraph"]
    assert diff["kind"] == "diff-flamegraph" and len(set(diff["color"])) > 5  # shades of red and blue
    assert any("the deepest colours at ±" in c.value for c in at.caption)
    assert any(m.value == "**Got slower** (larger share now)" for m in at.markdown)


def test_trace_view():
    at = app(profile="torch-trace")
    assert not at.exception and not at.error
    m = metrics(at)
    assert m["Events"] == "676" and m["Steps"] == "3" and m["GPU idle"] == "no GPU"
    assert any("No GPU kernels in this trace" in i.value for i in at.info)
    names = at.dataframe[0].value["name"].tolist()
    assert "aten::addmm" in names
    types = [figure(at, i)["data"][0]["type"] for i in range(len(at.get("plotly_chart")))]
    assert types == ["bar", "bar"]  # steps, timeline
    at.toggle(key="tr_shapes").set_value(True).run()
    assert "input_shapes" in at.dataframe[0].value.columns


def test_a_strangers_profile_param_is_ignored():
    at = app(profile="../../etc/passwd")
    assert not at.exception and not at.error
    assert metrics(at)["Samples"] == "46,959"


def test_empty_state_without_profiles():
    at = app(run="digits-mlp")
    assert not at.exception
    assert any("This run holds no profiles yet." in i.value for i in at.info)
    assert any("debugkit profile RUN_DIR -- python train.py" in m.value for m in at.markdown)


def test_stack_dump_view(tmp_path, monkeypatch):
    from debugkit.cli._pyspy import dump_process
    from debugkit.io.run_profiles import add_profile

    run = tmp_path / "roots" / "hung"
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", run)
    script = tmp_path / "h.py"
    script.write_text(announce_blocked("get") + textwrap.dedent('''
        import queue
        queue.Queue().get(timeout=120)
    '''))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"  # the main thread is in Queue.get
        # and the thread that said so has ended: the dump sees the one blocked thread
        wait_for(lambda: len(os.listdir(f"/proc/{proc.pid}/task")) == 1, "the announcing thread to end")
        doc = dump_process(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)
    f = tmp_path / "d.json"
    f.write_text(json.dumps(doc))
    add_profile(run, f, format="pyspy-dump", name="hang", origin="py-spy dump")
    from debugkit.diagnose import diagnose
    from debugkit.io.run import open_run

    (hang,) = [x for x in diagnose(open_run(run)) if x.kind == "hang"]
    assert hang.evidence == {"dump": "hang", "threads": 1, "waiting": {"queue": 1}}
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path / "roots"))
    at = app(run="hung")
    assert not at.exception and not at.error
    assert metrics(at)["Threads"] == "1" and metrics(at)["Running"] == "0"
    assert any("Every thread is idle: the process looks hung. Most threads are waiting on a queue" in w.value
               for w in at.warning)
    # its frames without the dumped machine's folders: the script's name, the stdlib's file
    frames = "\n".join(c.value for c in at.code)
    assert "<module>  (h.py:" in frames and "Queue.get  (queue.py:" in frames, frames
    shown = frames + "\n".join(str(j.value) for j in at.json) + at.dataframe[0].value.to_string()
    assert str(tmp_path) not in shown and "/lib/python" not in shown, shown


def test_torchrec_trace_shows_htas_idle_share_and_the_users_phases(tmp_path, monkeypatch):
    """HTA's public 2-rank TorchRec trace (rank 1): GPU idle is HTA's 54.72 %, the steps are
    split by the job's own `## forward ##`-style annotations."""
    from debugkit.io.run_profiles import add_profile

    run = tmp_path / "roots" / "torchrec"
    src = ROOT / "tests" / "data" / "public" / "hta_trace_filter" / "sampled_rank-1.json.gz"
    add_profile(run, src, format="chrome-trace", name="rank1")
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path / "roots"))
    at = app(run="torchrec")
    assert not at.exception and not at.error
    assert metrics(at)["GPU idle"] == "55%"
    assert [s.value for s in at.subheader][:1] == ["Steps (your annotations)"]
    steps = figure(at, 0)["data"]
    names = [t["name"] for t in steps]
    assert {"forward", "backward", "optimizer"} <= set(names) and names[-1] == "other"
    assert any("HTA's definition" in c.value and "last ProfilerStep are left out" in c.value for c in at.caption)


def test_data_bound_profile_names_the_workers_hot_function(tmp_path, monkeypatch):
    """The data-bound job of tests/data/public/pyspy/linux-databound: the flamegraph opens
    at the training loop, idle frames are out of the self-time table until asked for, the
    workers' top function is named, and the workers view claims no training loop."""
    from debugkit.analysis.profile import MSG_WORKERS_VIEW

    shutil.copytree(ROOT / "tests" / "data" / "public" / "pyspy" / "linux-databound" / "run",
                    tmp_path / "roots" / "databound")
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(tmp_path / "roots"))
    at = app(run="databound")
    assert not at.exception and not at.error
    assert any("96% is spent waiting for data" in m.value and "`decode_row` (train.py:37)" in m.value
               for m in at.markdown)
    flame = flames(at)["flamegraph"]
    # Opens at the training loop, not the imports: 960 of the main thread's 2,885 samples.
    assert flame["name"][0] == "training loop: main (i16b_db/train.py, lines 80-84)"  # no /tmp
    assert flame["samples"][0] == 960 and "EncodedWine.__init__" not in flame["name"]  # set-up left out
    waits = {"Condition.wait", "socket.accept", "_PollLikeSelector.select", "Connection._recv"}
    open_view(at, "Top functions")
    running = set(at.dataframe[0].value.query("self_samples > 0")["name"])
    assert not running & waits
    assert any("idle samples" in c.value and "left out of the self time" in c.value for c in at.caption)
    at.toggle(key="sp_idle").set_value(True).run()
    assert set(at.dataframe[0].value.query("self_samples > 0")["name"]) & waits
    at.segmented_control(key="sp_threads").set_value("dataloader").run()
    assert not at.exception
    assert any(i.value.startswith(MSG_WORKERS_VIEW) and "`decode_row`" in i.value for i in at.info)
    assert not any("BaseProcess.run" in m.value for m in [*at.markdown, *at.caption, *at.info])


def test_the_views_widgets_keep_their_values_while_another_tab_is_open():
    """A widget in a tab that is not drawn would lose its value (Streamlit drops the
    state of widgets a run does not draw); the page keeps them."""
    at = app()
    at.segmented_control(key="sp_scope").set_value("all").run()
    at.toggle(key="sp_flame").set_value(True).run()
    open_view(at, "Top functions")
    at.toggle(key="sp_idle").set_value(True).run()
    open_view(at, "Flamegraph")
    assert not at.exception and not at.warning
    assert at.segmented_control(key="sp_scope").value == "all" and at.toggle(key="sp_flame").value
    assert flames(at)["flamegraph"]["samples"][0] == 12307  # the whole profile, as chosen
    open_view(at, "Top functions")
    assert at.toggle(key="sp_idle").value


def test_no_folder_of_the_recording_machine_is_shown():
    """The sample was recorded under /root and /work/wt/...: the page shows the command, the
    training loop and the files without those folders."""
    at = open_page("profiler", run="digits-profiled", breakdown="1")
    texts = [c.value for c in at.caption] + [m.value for m in at.markdown]
    assert any("examples.digits --out sample_runs/digits-profiled" in t for t in texts)
    assert any("examples/digits.py, lines" in t for t in texts)
    for t in texts:
        assert "/root/" not in t and "/work/" not in t, t
    for df in at.dataframe:
        if "file" in df.value.columns:
            assert not df.value["file"].astype(str).str.startswith("/").any()
    # nor do the charts: the flamegraph's frames (the training loop's root among them) and hovers
    for i in range(len(at.get("plotly_chart"))):
        spec = at.get("plotly_chart")[i].proto.spec
        assert "/root/" not in spec and "/work/" not in spec, i
    for c in at.get("bidi_component"):
        assert "/root/" not in c.proto.json and "/work/" not in c.proto.json, c.key
    flame = flames(at)["flamegraph"]
    assert flame["name"][0] == "training loop: train (examples/digits.py, lines 94-101)"
    assert all(not t.startswith("/") for t in flame["tip"])


def test_the_sampled_view_round_trips_through_the_url():
    at = app()
    at.segmented_control(key="sp_threads").set_value("dataloader").run()
    at.segmented_control(key="sp_by").set_value("frame").run()
    at.selectbox(key="sp_fold").set_value(0.005).run()
    at.toggle(key="sp_flame").set_value(True).run()
    open_view(at, "Top functions")
    at.toggle(key="sp_idle").set_value(True).run()
    at.session_state["sp_table_tab"] = "Total time (on the stack)"
    at.run()
    q = at.query_params
    assert (q["threads"], q["by"], q["fold"], q["flame"], q["view"], q["idle"], q["table"]) == \
        ("dataloader", "frame", "0.005", "1", "functions", "1", "total")
    again = app(threads="dataloader", by="frame", fold="0.005", flame="1", view="functions", idle="1",
                table="total")
    assert not again.exception and not again.warning
    assert again.segmented_control(key="sp_threads").value == "dataloader"
    assert again.segmented_control(key="sp_by").value == "frame"
    assert again.selectbox(key="sp_fold").value == 0.005
    (total,) = again.dataframe  # the total-time table of the functions view
    assert total.value["total_samples"].is_monotonic_decreasing and "line" in total.value.columns
    assert again.toggle(key="sp_idle").value is True
    flame = open_view(again, "Flamegraph")
    assert flame.toggle(key="sp_flame").value is True
    assert any("_worker_loop" in lab for lab in flames(flame)["flamegraph"]["name"])
    assert flames(flame)["flamegraph"]["flame"] is True  # root at the bottom


def test_the_zoom_scope_and_baseline_round_trip_through_the_url():
    at = app()
    at.segmented_control(key="sp_scope").set_value("all").run()
    zoom = at.selectbox(key="sp_zoom_train_function_all")
    zoom.select_index(2).run()
    node = str(at.selectbox(key="sp_zoom_train_function_all").value)
    assert at.query_params["scope"] == "all" and at.query_params["zoom"] == node
    zoomed = flames(at)["flamegraph"]
    assert zoomed["root"] > 0
    again = app(scope="all", zoom=node)
    flame = flames(again)["flamegraph"]
    assert flame["root"] == zoomed["root"] and flame["name"] == zoomed["name"]  # zoomed into the same frame
    open_view(at, "Compare")
    at.selectbox(key="sp_compare").select_index(1).run()
    baseline = at.query_params["baseline"]
    compared = app(view="compare", baseline=baseline)
    assert compared.selectbox(key="sp_compare").value == 0
    assert flames(compared)["diff_flamegraph"]["kind"] == "diff-flamegraph"


def test_bad_view_values_in_the_url_are_warnings_and_defaults():
    at = app(threads="gpu", by="page", fold="0.5", view="sandwich", zoom="999999", flame="2")
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    for name in ("threads", "by", "fold", "view", "zoom", "flame"):
        assert f"?{name}=" in warnings, (name, warnings)
    assert at.segmented_control(key="sp_threads").value == "main"
    assert at.segmented_control(key="sp_by").value == "function"
    assert at.session_state["sp_view"] == "Flamegraph"
    assert flames(at)["flamegraph"]["samples"][0] == 3795  # the default view: the training loop
    trace = app(profile="torch-trace", shapes="1", events="10000", levels="9")
    assert trace.toggle(key="tr_shapes").value is True
    assert "input_shapes" in trace.dataframe[0].value.columns
    assert trace.select_slider(key="tr_max").value == 10000
    assert any("?levels='9'" in w.value for w in trace.warning)
    assert trace.select_slider(key="tr_depth").value == 2


def test_every_profiler_chart_has_a_csv_download():
    for at in (app(), app(profile="torch-trace")):
        csv = [b for b in at.get("download_button") if b.proto.label == "CSV"]
        assert len(csv) == len(chart_keys(at)) >= 2
    names = {b.proto.label: b for b in app().get("download_button")}
    assert "CSV" in names and "Download the original file" in names


def test_a_new_server_draws_the_profile_without_computing_its_breakdown_again(monkeypatch):
    """The step breakdown and the training loop's flame tree are kept with the parsed
    profile in the cache folder: a new server (no Streamlit cache) reads them (20-30 ms each
    of its first visit's script run before the flamegraph) and draws the same page."""
    import streamlit as st

    from debugkit.analysis import profile as ap

    st.cache_data.clear()  # computed in this test's cache folder, not taken from another test's
    st.cache_resource.clear()
    first = open_page("profiler", run="digits-profiled")
    st.cache_data.clear()
    st.cache_resource.clear()

    def refused(*a, **k):
        raise AssertionError("computed again on a new server")

    monkeypatch.setattr(ap, "compute_step_phases", refused)
    monkeypatch.setattr(ap, "compute_loop_flame_tree", refused)
    again = open_page("profiler", run="digits-profiled")
    assert flames(again), [(e.type, getattr(e, "value", "")) for e in again.main if e.type in ("alert", "exception", "error")]
    assert flames(again) == flames(first)
    assert [m.value for m in again.markdown] == [m.value for m in first.markdown]


def _walk(node):
    """A page's elements in the order they are drawn (blocks first, then their content)."""
    yield node
    for _, child in sorted(getattr(node, "children", {}).items()):
        yield from _walk(child)


def test_the_flamegraph_comes_before_the_profiles_facts_and_one_toolbar_holds_its_controls():
    """Every element mounted before the flamegraph delayed it (issue 35 item 9): the sample
    counts and the command line are drawn under the views, and the view, the search and
    the frames' grouping and folding (a popover) are one toolbar above them."""
    at = open_page("profiler", run="digits-profiled")
    order = list(_walk(at.main))
    kinds = [getattr(n, "type", None) for n in order]
    chart = next(i for i, n in enumerate(order) if kinds[i] == "bidi_component" and n.key == "flamegraph")
    assert order[chart].proto.component_name == FLAMEGRAPH
    facts = next(i for i, n in enumerate(order) if kinds[i] == "html" and "dk-figures" in n.proto.body)
    assert chart < facts
    assert kinds[:chart].count("text_input") == 1 and kinds[:chart].count("html") == 0
    popovers = [n.proto.popover.label for n in order[:chart] if getattr(n, "type", None) == "popover"]
    assert "Frames: by function · fold 0.1 %" in popovers
    assert "Samples" in figures(at) and not at.exception
