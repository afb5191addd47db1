"""GPU idle share and annotated step phases on Holistic Trace Analysis' own test traces
(tests/data/public/hta/, MIT), with HTA 0.5.0's printed numbers as the oracle (see the
README there for the command that printed them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from debugkit.analysis import trace as at
from debugkit.io.chrome_trace import read_chrome_trace

from ..conftest import console_script

HTA = Path(__file__).resolve().parents[1] / "data" / "public" / "hta"
TRACE_FILTER = HTA.parent / "hta_trace_filter"  # shared with the traces-only scenario (issue 16a)
TF0 = TRACE_FILTER / "sampled_rank-0.json.gz"
TF1 = TRACE_FILTER / "sampled_rank-1.json.gz"
ALEXNET = HTA / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
SIMPLE_ADD = HTA / "simple_add" / "benchmark_result_493459_1694039959_trace.json.gz"

# (file, include_last_step) -> HTA's idle_time(us), kernel_time(us), idle_time_pctg
ORACLE = {
    (TF0, False): (321378, 600058, 53.56),
    (TF1, False): (328671, 600674, 54.72),
    (TF0, True): (675191, 1222847, 55.21),
    (TF1, True): (651136, 1231186, 52.89),
    (ALEXNET, False): (12929684, 12996011, 99.49),
    (ALEXNET, True): (12929684, 12996011, 99.49),
    (SIMPLE_ADD, False): (16414376, 16464339, 99.70),
}


@pytest.mark.parametrize("key", list(ORACLE), ids=lambda k: f"{k[0].parent.name}/{k[0].name[:14]}-last={k[1]}")
def test_gpu_idle_equals_htas_temporal_breakdown(key):
    path, last = key
    idle_us, span_us, pctg = ORACLE[key]
    g = at.compute_gpu_idle(read_chrome_trace(path), include_last_step=last)
    assert len(g) == 1
    r = g.iloc[0]
    assert r["idle_ms"] * 1e3 == pytest.approx(idle_us, abs=0.5)
    assert r["window_ms"] * 1e3 == pytest.approx(span_us, abs=0.5)
    assert round(100 * r["idle_fraction"], 2) == pctg
    with_steps = path.parent == TRACE_FILTER
    assert bool(r["last_step_dropped"]) == (with_steps and not last)


def test_the_output_says_which_variant():
    g = at.compute_gpu_idle(read_chrome_trace(TF0))
    assert at.describe_gpu_idle(g) == at.GPU_IDLE_NOTE.format(last=at.GPU_IDLE_LAST_DROPPED)
    g = at.compute_gpu_idle(read_chrome_trace(TF0), include_last_step=True)
    assert at.describe_gpu_idle(g) == at.GPU_IDLE_NOTE.format(last=at.GPU_IDLE_LAST_KEPT)
    # No ProfilerStep: every kernel counts, and the note says the result is less sure.
    g = at.compute_gpu_idle(read_chrome_trace(ALEXNET))
    assert at.GPU_IDLE_FEW_STEPS in at.describe_gpu_idle(g)


def test_profile_summary_prints_htas_figures(tmp_path):
    def summary(*extra):
        proc = subprocess.run([console_script(), "profile-summary", str(TF1), *extra], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    s = json.loads(summary("--json"))
    assert round(100 * s["gpu"]["idle_fraction"], 2) == 54.72
    assert s["gpu"]["idle_definition"] == "hta" and s["gpu"]["last_step_dropped"] is True
    assert s["gpu"]["devices"][0]["events"] > 0
    assert "GPU idle: 54.72%" in summary()
    assert "GPU idle: 52.89%" in summary("--include-last-step")


# ---------------------------------------------------------------------------- annotated steps
NON_GPU = HTA / "rank_non_gpu" / "rank_non_gpu.json.gz"


def test_torchrec_annotations_are_the_phases():
    ann = at.compute_annotated_steps(read_chrome_trace(NON_GPU))
    assert ann["step"].unique().tolist() == [1009]
    ms = dict(zip(ann["phase"], ann["ms"]))
    # The durations of the step's own `## name ##` annotations (they do not overlap).
    assert ms["forward"] == pytest.approx(19.324)
    assert ms["sparse_data_dist"] == pytest.approx(10.246)
    assert ms["backward"] == pytest.approx(34.160)
    assert ms["optimizer"] == pytest.approx(2.906)
    assert ms["wait_sparse_data_dist"] == pytest.approx(5.550)
    assert ann["phase"].iloc[-1] == "other"
    assert ann["ms"].sum() == pytest.approx(75.473)  # the step's duration
    s = at.summarize_step_phases(read_chrome_trace(NON_GPU))
    assert s["source"] == "annotations" and s["note"] == at.MSG_ONE_STEP  # unsure: one step


def test_two_rank_torchrec_trace_uses_annotations_per_step():
    ann = at.compute_annotated_steps(read_chrome_trace(TF0))
    first = ann[ann["step"] == 551].set_index("phase")["ms"]
    assert first["forward"] == pytest.approx(132.826)
    assert first["backward"] == pytest.approx(234.964)
    assert first["optimizer"] == pytest.approx(204.454)
    assert sorted(ann["step"].unique().tolist()) == [551, 552]
    assert ann.attrs["cover"] > at.ANNOTATION_SURE_COVER


def test_annotated_steps_figure_draws_every_phase():
    from debugkit.charts.profile import build_annotated_steps_figure

    ann = at.compute_annotated_steps(read_chrome_trace(NON_GPU))
    fig = build_annotated_steps_figure(ann)
    names = [t.name for t in fig.data]
    assert names[-1] == "other" and "sparse_data_dist" in names and len(names) == ann["phase"].nunique()
    assert sum(sum(t.y) for t in fig.data) == pytest.approx(75.473)


def test_own_record_function_phases_recorded_here(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=1)) as prof:
        for _ in range(6):
            with record_function("## data ##"):
                x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))
            with record_function("## forward ##"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            with record_function("## backward ##"):
                loss.backward()
            with record_function("## optimizer ##"):
                opt.step()
                opt.zero_grad()
            prof.step()
    f = tmp_path / "t.json"
    prof.export_chrome_trace(str(f))
    tr = read_chrome_trace(f)
    ann = at.compute_annotated_steps(tr)
    assert set(ann["phase"]) == {"data", "forward", "backward", "optimizer", "other"}
    assert ann["step"].nunique() == 3
    per_step = ann.groupby("step")["fraction"].sum()
    assert per_step.to_numpy() == pytest.approx(1.0)
    assert at.summarize_step_phases(tr)["source"] == "annotations"


def test_without_user_annotations_the_built_in_split_stays():
    from debugkit.io.run import open_run
    from debugkit.io.run_profiles import get_profile, read_entry

    from ..conftest import SAMPLE_RUNS

    tr = read_entry(get_profile(open_run(SAMPLE_RUNS / "digits-profiled"), "torch-trace"))
    assert len(at.compute_annotated_steps(tr)) == 0
    s = at.summarize_step_phases(tr)
    assert s["source"] == "built-in" and set(s["phases"]) == {"data", "forward", "backward", "optimizer", "other"}
