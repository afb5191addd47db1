"""``diagnose(run, sources=[...])`` gives the findings of those sources in the order the
whole diagnosis gives them (what a dashboard page shows of its area)."""

from __future__ import annotations

import pytest

from debugkit.diagnose import diagnose
from debugkit.io.run import open_run

from ..conftest import ROOT


@pytest.mark.parametrize("run,sources", [
    ("digits-exploding", ["failures", "gradients"]),
    ("ddp-hang", ["failures", "distributed"]),
    ("memory-leak", ["memory"]),
])
def test_sources_keep_the_whole_diagnosis_order(run, sources):
    r = open_run(ROOT / "sample_runs" / run)
    whole = diagnose(r)
    part = diagnose(r, sources=sources)
    assert part
    kinds = {f.kind for f in part}
    assert [f.to_dict() for f in part] == [f.to_dict() for f in whole if f.kind in kinds]


def test_inputs_reach_their_source():
    r = open_run(ROOT / "sample_runs" / "digits-exploding")
    from debugkit.analysis.gradients.matrix import pivot_grad_norms

    mats = pivot_grad_norms(r.grad_norms())
    assert diagnose(r, sources=["gradients"], inputs={"gradients": {"matrices": mats}}) == \
        diagnose(r, sources=["gradients"])
