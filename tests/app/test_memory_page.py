"""AppTest of the Memory page: healthy run, leaking run, and a run with an OOM capture and
a memory snapshot."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from debugkit import Recorder
from debugkit.io.run_memsnaps import import_snapshot
from debugkit.recorder.memhistory import write_snapshot
from tests.conftest import SAMPLE_RUNS
from tests.memsnap_factory import USER, MiB, leaky_training

from ._apptest import figures, open_page


def _app(run_id: str, **params) -> AppTest:
    return open_page("memory", run=run_id, **params)


def _chart_specs(at) -> list[dict]:
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def _texts(elements) -> list[str]:
    return [e.value for e in elements]


def test_healthy_run_has_no_memory_finding():
    at = _app("digits-mlp")
    assert at.title[0].value == "Memory · digits-mlp"
    assert "No leak, pressure or fragmentation found." in _texts(at.success)
    assert not at.warning and not at.error
    (spec,) = _chart_specs(at)
    assert [t["name"] for t in spec["data"]][0] == "RSS"
    assert not any("No capacity recorded" in c for c in _texts(at.caption))  # host memory is recorded
    assert any("No memory snapshot in this run" in i for i in _texts(at.info))


def _old_run(dst: Path) -> Path:
    """digits-mlp as a debugkit from before capacities were recorded wrote it."""
    shutil.copytree(SAMPLE_RUNS / "digits-mlp", dst)
    for meta in dst.glob("ranks/*/meta-*.json"):
        d = json.loads(meta.read_text())
        for k in ("host_memory_bytes", "host_memory_limit_bytes", "device_memory_bytes"):
            d.pop(k, None)
        meta.write_text(json.dumps(d))
    return dst


def test_a_run_without_capacities_says_so(tmp_path, monkeypatch):
    _old_run(tmp_path / "store" / "old-run")
    monkeypatch.setenv("DEBUGKIT_STORE", str(tmp_path / "store"))
    at = _app("old-run")
    (spec,) = _chart_specs(at)
    assert [t["name"] for t in spec["data"]] == ["RSS"]
    assert any("No capacity recorded" in c for c in _texts(at.caption))


def test_leaking_run_shows_the_leak_its_rate_and_the_trend():
    at = _app("memory-leak")
    # the finding card every page draws (pages._ui.show_findings)
    assert any(m.startswith(":material/warning: **memory_leak** · step 0 · rank 0") for m in _texts(at.markdown))
    assert any(c.startswith("Rank 0: host RSS keeps growing by") for c in _texts(at.caption))
    metrics = figures(at)
    assert metrics["Started at step"] == "0"
    assert metrics["Growth per step"].endswith("MiB")
    assert metrics["Runs out at step"] != "—"
    (spec,) = _chart_specs(at)
    names = [t["name"] for t in spec["data"]]
    assert names[0] == "RSS" and names[1].startswith("leak trend: +")
    # the host's capacity is far above the data: named in a note, not flattening the curve
    notes = [a["text"] for a in spec["layout"]["annotations"]]
    assert any(n.startswith("↑ host capacity") for n in notes)
    at.toggle(key="mem_capacity").set_value(True).run()
    assert not at.exception
    (spec,) = _chart_specs(at)
    assert not any(a["text"].startswith("↑") for a in spec["layout"]["annotations"])
    assert any(a["text"].startswith("host capacity") for a in spec["layout"]["annotations"])


def test_thresholds_move_the_band():
    at = _app("memory-leak")
    at.slider(key="mem_host_thr").set_value(0.9).run()
    assert not at.exception
    (spec,) = _chart_specs(at)
    assert any(a["text"] == "90%" for a in spec["layout"]["annotations"])


@pytest.fixture
def oom_run():
    return make_oom_run(Path(os.environ["DEBUGKIT_STORE"]))


def make_oom_run(store: Path):
    """A run recorded with the real Recorder whose step 3 hits a real allocation failure,
    with a memory snapshot linked to that capture."""
    run = store / "oom-run"
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(run, model, optimizer=opt, flush_every_s=0.1)
    with pytest.raises(RuntimeError, match="can't allocate memory|not enough memory"):
        with rec:
            for i in range(6):
                with rec.step((torch.randn(4, 8),)):
                    loss = model(torch.randn(4, 8)).sum()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    rec.log(loss=loss)
                    if i == 3:  # a real CPU allocation failure: 4 EiB
                        torch.empty(1 << 62, dtype=torch.uint8)
    (fid,) = [p.name for p in (run / "failures").iterdir()]
    b = leaky_training(20)
    b.oom(64 * MiB, 3 * MiB, b.frames((USER + "train.py", 30, "train_step")))
    write_snapshot(run, b.snapshot(), rank=0, step=3, reason="oom", device="cuda:0", failure=fid)
    src = store.parent / "extra.pickle"
    leaky_training(5, legacy=True).dump(src)
    import_snapshot(src, run, step=1)
    return run, fid


def test_oom_capture_is_linked_and_its_snapshot_opens(oom_run):
    run, fid = oom_run
    at = _app("oom-run")
    assert "Out-of-memory failures" in _texts(at.subheader)
    assert any(md.value.startswith("**Step 3 · rank 0 · RuntimeError**") for md in at.markdown)
    # the capture is linked to the Replay page, with the run and the failure
    links = [e for e in at.get("page_link") if e.proto.label == "Replay the failing step 3"]
    assert len(links) == 1 and links[0].proto.page == "replay"
    assert links[0].proto.query_string == f"run=oom-run&failure={fid}&step=3"
    (spec,) = _chart_specs(at)[:1]
    assert any(t["name"] == "out of memory, step 3" for t in spec["data"])
    # the snapshot taken at the OOM is the one shown first
    assert [s.value for s in at.selectbox if s.label == "Snapshot"] == ["r0-s0000003-oom"]
    at.selectbox(key="mem_snap_pick").set_value("r0-imported-extra").run()
    assert at.query_params["snapshot"] == "r0-imported-extra"
    open_btn = [b for b in at.button if b.label.startswith("Open the memory snapshot")]
    assert [b.label for b in open_btn] == ["Open the memory snapshot r0-s0000003-oom"]
    open_btn[0].click().run()
    assert not at.exception
    assert at.query_params["snapshot"] == "r0-s0000003-oom"
    metrics = figures(at)
    assert metrics["OOM events"] == "1"
    assert metrics["Peak active"] == "120.0 MiB"  # 32 MiB weights + 20 x 3 MiB kept + 28 MiB of a step
    assert any(e.startswith("Out of memory at event") and "asked for 64.0 MiB with 3.0 MiB free"
               in e for e in _texts(at.error))
    assert any(f"Written for the failure capture `{fid}` at step 3." in c for c in _texts(at.caption))
    specs = _chart_specs(at)
    titles = [s["layout"].get("xaxis", {}).get("title", {}).get("text") for s in specs]
    assert "seconds into the trace" in titles
    # the other tabs are built when opened (as a click on the tab does)
    at.session_state["mem_snap_tab"] = "Segments"
    at.run()
    titles = [s["layout"].get("xaxis", {}).get("title", {}).get("text") for s in _chart_specs(at)]
    assert "position in segment (%)" in titles
    at.session_state["mem_snap_tab"] = "Alive at the end (leaks)"
    at.run()
    leak_spec = next(s for s in _chart_specs(at) if s["layout"]["xaxis"]["title"]["text"].startswith("still alive"))
    assert leak_spec["data"][0]["y"][0] == "train.py:34 train_step"


def test_snapshot_query_param_is_validated_and_segments_moment_changes(oom_run):
    at = _app("oom-run", snapshot="../../etc/passwd")
    assert any("no such snapshot in this run" in w for w in _texts(at.warning))
    at = _app("oom-run", snapshot="r0-s0000003-oom", tab="segments")
    from debugkit.analysis import memsnap as ms
    from debugkit.io.memsnap import read_snapshot

    snap = read_snapshot(oom_run[0] / "memory_snapshots" / "r0-s0000003-oom.pickle")
    sites = ms.site_labels(snap.stacks)
    at_end, _ = ms.compute_segments_at(snap, sites=sites)
    at_peak, _ = ms.compute_segments_at(snap, seq=ms.find_peak(snap)["seq"], sites=sites)
    assert any(c.startswith(f"{len(at_end)} segments, ") for c in _texts(at.caption))
    at.segmented_control(key="mem_seg_when").set_value("at the peak").run()
    assert not at.exception
    assert any(c.startswith(f"{len(at_peak)} segments, ") for c in _texts(at.caption))
    at.slider(key="mem_depth").set_value(2).run()
    assert not at.exception
    at.session_state["mem_snap_tab"] = "Alive at the end (leaks)"  # built when opened
    at.run()
    leak_spec = next(s for s in _chart_specs(at)
                     if s["layout"]["xaxis"]["title"]["text"].startswith("still alive"))
    assert leak_spec["data"][0]["y"][0] == "train.py:34 train_step"  # no deeper user frame
    at.toggle(key="mem_user_code").set_value(False).run()
    leak_spec = next(s for s in _chart_specs(at)
                     if s["layout"]["xaxis"]["title"]["text"].startswith("still alive"))
    assert leak_spec["data"][0]["y"][0] == "_tensor.py:40 wrapped < train.py:34 train_step"


def test_legacy_snapshot_without_times_renders(oom_run):
    at = _app("oom-run", snapshot="r0-imported-extra")
    assert any("PyTorch 2.0 format" in c for c in _texts(at.caption))
    titles = [s["layout"].get("xaxis", {}).get("title", {}).get("text") for s in _chart_specs(at)]
    assert "allocator event" in titles


def test_two_ranks_overlaid_or_side_by_side(monkeypatch):
    store = Path(os.environ["DEBUGKIT_STORE"])
    run = store / "two-ranks"
    for rank in (0, 1):  # two real ranks' recorders writing one run, as torchrun would
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        model = torch.nn.Linear(4, 2)
        with Recorder(run, model, flush_every_s=0.1) as rec:
            for _ in range(4):
                with rec.step():
                    model(torch.randn(3, 4)).sum().backward()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    at = _app("two-ranks")
    (spec,) = _chart_specs(at)[:1]
    assert [t["name"] for t in spec["data"]] == ["RSS (rank 0)", "RSS (rank 1)"]
    at.segmented_control(key="mem_layout").set_value("side by side").run()
    assert not at.exception
    (spec,) = _chart_specs(at)[:1]
    assert [t["xaxis"] for t in spec["data"]] == ["x", "x2"]


def test_the_timeline_view_round_trips_through_the_url():
    at = _app("ddp-straggler")
    at.segmented_control(key="mem_x").set_value("time").run()
    at.segmented_control(key="mem_layout").set_value("side by side").run()
    at.toggle(key="mem_capacity").set_value(True).run()
    at.slider(key="mem_host_thr").set_value(0.9).run()
    q = at.query_params
    assert q["x"] == "time" and q["ranks"] == "side" and q["capacity"] == "1"
    assert q["host_warn"] == "0.9" and "gpu_warn" not in q and "series" not in q  # defaults left out
    # the link, opened in a new session, shows the same view
    again = _app("ddp-straggler", series=["rss_bytes"], x="time", ranks="side", capacity="1",
                 host_warn="0.9")
    assert not again.warning
    assert again.multiselect(key="mem_series").value == ["rss_bytes"]
    assert again.segmented_control(key="mem_x").value == "time"
    assert again.segmented_control(key="mem_layout").value == "side by side"
    assert again.toggle(key="mem_capacity").value is True
    assert again.slider(key="mem_host_thr").value == 0.9
    (spec,) = _chart_specs(again)
    xaxes = [v for k, v in spec["layout"].items() if k.startswith("xaxis")]
    assert any((a.get("title") or {}).get("text") == "time" for a in xaxes)
    assert sum("rank 3" in a["text"] for a in spec["layout"]["annotations"]) >= 1  # a panel per rank
    assert any(a["text"] == "90%" for a in spec["layout"]["annotations"])


def test_bad_view_values_in_the_url_are_warnings_and_defaults():
    at = _app("memory-leak", series=["rss_bytes", "nope"], x="sideways", host_warn="7", capacity="yes")
    warnings = " ".join(_texts(at.warning))
    for name in ("series", "x", "host_warn", "capacity"):
        assert f"?{name}=" in warnings, (name, warnings)
    assert at.multiselect(key="mem_series").value == ["rss_bytes"]  # the known one is kept
    assert at.segmented_control(key="mem_x").value == "step"
    assert at.slider(key="mem_host_thr").value == 0.75
    assert at.toggle(key="mem_capacity").value is False
    assert "x" not in at.query_params and "host_warn" not in at.query_params


def test_the_snapshot_view_round_trips_through_the_url(oom_run):
    at = _app("oom-run")
    at.slider(key="mem_depth").set_value(2).run()
    at.toggle(key="mem_user_code").set_value(False).run()
    at.session_state["mem_snap_tab"] = "Segments"
    at.run()
    at.segmented_control(key="mem_seg_when").set_value("at the peak").run()
    q = at.query_params
    assert (q["snapshot"], q["frames"], q["user_code"], q["tab"], q["moment"]) == \
        ("r0-s0000003-oom", "2", "0", "segments", "peak")
    again = _app("oom-run", snapshot="r0-s0000003-oom", frames="2", user_code="0", tab="segments",
                 moment="event", event="5")
    assert again.slider(key="mem_depth").value == 2
    assert again.toggle(key="mem_user_code").value is False
    assert again.session_state["mem_snap_tab"] == "Segments"
    assert again.segmented_control(key="mem_seg_when").value == "at an event"
    assert again.slider(key="mem_seg_event").value == 5
    assert again.query_params["event"] == "5"
    bad = _app("oom-run", tab="flames", frames="9", moment="never")
    warnings = " ".join(_texts(bad.warning))
    assert "?tab='flames'" in warnings and "?frames='9'" in warnings and "?moment='never'" in warnings
    assert bad.session_state["mem_snap_tab"] == "Active memory over time"
    assert bad.slider(key="mem_depth").value == 1
