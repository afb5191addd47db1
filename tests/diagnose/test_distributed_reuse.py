"""diagnose.distributed.collect gives the same findings when the Distributed page hands it
what the page has read and computed already (nothing read or computed twice)."""

from __future__ import annotations

import pytest

from debugkit.analysis import distributed as ad
from debugkit.diagnose.distributed import collect
from debugkit.io.run import open_run

from ..conftest import SAMPLE_RUNS


@pytest.mark.parametrize("sample", ["ddp-straggler", "ddp-hang"])
def test_precomputed_inputs_give_the_same_findings(sample):
    run = open_run(SAMPLE_RUNS / sample)
    plain = [f.to_dict() for f in collect(run, {})]
    times = ad.compute_rank_step_times(run.steps())
    grads = run.grad_norms()
    reused = [f.to_dict() for f in collect(run, {}, times=times, grad_norms=grads,
                                            windows=ad.compute_straggler_windows(times),
                                            divergence=ad.compute_grad_divergence(grads))]
    assert reused == plain and plain  # each sample has findings to compare
    # windows computed with the default size are not used for another window size
    other = [f.to_dict() for f in collect(run, {"window": 5}, times=times,
                                           windows=ad.compute_straggler_windows(times))]
    assert other == [f.to_dict() for f in collect(run, {"window": 5})]
