"""One fact, one finding (issue 31): the findings of one non-finite step are one error
finding, with the others attached as ``evidence["related"]``."""

from __future__ import annotations

import json
import subprocess

from debugkit.analysis.findings import Finding, attach_related

from ..conftest import SAMPLE_RUNS, console_script


def test_accelerate_nan_is_one_error_finding_through_the_console_script():
    """Before: nonfinite_grad (error), nonfinite_loss (error) and a step_failure warning for
    the one NaN step 5, the same event read while training (the capture) and from the logs."""
    p = subprocess.run([console_script(), "diagnose", str(SAMPLE_RUNS / "accelerate-nan"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (f,) = json.loads(p.stdout)["findings"]
    assert (f["kind"], f["step"], f["rank"], f["layer"], f["severity"]) == \
        ("nonfinite_grad", 5, 0, "0.weight", "error")
    assert [(r["kind"], r["severity"]) for r in f["evidence"]["related"]] == \
        [("nonfinite_loss", "error"), ("step_failure", "warning")]
    assert f["evidence"]["related"][0]["evidence"]["last_finite_step"] == 4
    # the capture stays reachable from the one finding
    assert f["evidence"]["failure"] == "r0-s0000005-nonfinite"
    assert "capture r0-s0000005-nonfinite; replay it with `debugkit replay`" in f["message"]
    text = subprocess.run([console_script(), "diagnose", str(SAMPLE_RUNS / "accelerate-nan")],
                          capture_output=True, text=True, timeout=300).stdout
    assert "1 finding(s)" in text.splitlines()[0]


def _f(kind, step, rank=0, severity="error", **evidence):
    return Finding(kind, step, rank, None, severity, f"{kind} at {step}", evidence)


def test_only_the_same_step_and_rank_merge_and_an_exception_stays_its_own_finding():
    found = [
        _f("nonfinite_loss", 5, rank=0),
        _f("nonfinite_grad", 5, rank=1),           # another rank: its own fact
        _f("nonfinite_loss", 5, rank=1),
        _f("step_failure", 5, rank=1, severity="warning", failure="r1-nf", capture_kind="nonfinite"),
        _f("step_failure", 9, rank=0, failure="r0-ex", capture_kind="exception"),
        _f("nonfinite_grad", 9, rank=0),           # an exception capture is not the NaN's evidence
        _f("loss_spike", 5, rank=1, severity="warning"),
    ]
    out = attach_related(found)
    assert [(f.kind, f.step, f.rank) for f in out] == [
        ("nonfinite_loss", 5, 0), ("nonfinite_grad", 5, 1), ("step_failure", 9, 0),
        ("nonfinite_grad", 9, 0), ("loss_spike", 5, 1)]
    merged = out[1]
    assert merged.severity == "error" and merged.evidence["failure"] == "r1-nf"
    assert [r["kind"] for r in merged.evidence["related"]] == ["nonfinite_loss", "step_failure"]
    assert "related" not in out[0].evidence and "related" not in out[3].evidence
    assert "related" not in found[1].evidence  # the input is left as it was


def test_a_lone_nonfinite_capture_stays_a_warning():
    (f,) = attach_related([_f("step_failure", 3, severity="warning", failure="x", capture_kind="nonfinite")])
    assert f.severity == "warning" and "related" not in f.evidence


def test_a_named_cause_stays_and_its_consequence_is_attached():
    """issue 30's loss-computation link: the loss (error) is the cause, the gradients (a
    warning) its consequence; merged, the loss stays and keeps its cross-reference shape."""
    loss = _f("nonfinite_loss", 6, origin="loss_computation", failure="cap",
              related=[{"kind": "nonfinite_grad", "step": 6, "rank": 0, "relation": "consequence"}])
    grad = _f("nonfinite_grad", 6, severity="warning",
              related=[{"kind": "nonfinite_loss", "step": 6, "rank": 0, "relation": "cause"}])
    cap = _f("step_failure", 6, severity="warning", failure="cap", capture_kind="nonfinite")
    (f,) = attach_related([grad, loss, cap])
    assert (f.kind, f.severity, f.evidence["origin"]) == ("nonfinite_loss", "error", "loss_computation")
    assert [(r["kind"], r["step"], r["rank"], r["relation"], r["severity"]) for r in f.evidence["related"]] == \
        [("nonfinite_grad", 6, 0, "consequence", "warning"), ("step_failure", 6, 0, "same_event", "warning")]
    assert f.message == loss.message  # its capture was already its own
