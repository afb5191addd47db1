"""collective_mismatch on hand-built collective counts (the Recorder's ``collectives``
events) and step tables: the rank, the step, the direction, the later failure."""

from __future__ import annotations

import pandas as pd

from debugkit.analysis.collectives import compute_collective_counts, detect_collective_mismatch


def _steps(n, ranks=(0, 1)):
    return pd.DataFrame([{"rank": r, "step": s} for r in ranks for s in range(n)])


def test_rank_that_skipped_an_all_reduce_is_named_with_the_later_timeout():
    events = [{"kind": "collectives", "rank": 0, "step": 0, "calls": 2},
              {"kind": "collectives", "rank": 1, "step": 0, "calls": 2},
              {"kind": "collectives", "rank": 1, "step": 17, "calls": 1},
              {"kind": "collectives", "rank": 1, "step": 18, "calls": 2}]
    counts = compute_collective_counts(events, _steps(40))
    assert counts[(counts["rank"] == 1) & (counts["step"].isin([16, 17, 18]))]["calls"].tolist() == [2, 1, 2]
    failures = [{"id": "r0-s0000039-exception", "step": 39, "rank": 0, "error_type": "RuntimeError",
                 "message": "[../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 20000ms "
                            "for recv operation to complete",
                 "traceback": ('  File "train.py", line 30, in main\n    dist.all_reduce(t)\n'
                               '  File "/x/torch/distributed/distributed_c10d.py", line 2501, in '
                               'all_reduce\n    work.wait()\n')}]
    (f,) = detect_collective_mismatch(counts, failures)
    assert (f.kind, f.step, f.rank, f.severity) == ("collective_mismatch", 17, 1, "error")
    assert f.evidence["direction"] == {"1": "skipped"} and f.evidence["calls"] == {"0": 2, "1": 1}
    assert "rank 1 skipped an all_reduce at step 17" in f.message
    assert [c["step"] for c in f.evidence["consequences"]] == [39]


def test_equal_counts_and_a_single_rank_are_not_findings():
    events = [{"kind": "collectives", "rank": r, "step": 0, "calls": 3} for r in (0, 1)]
    assert detect_collective_mismatch(compute_collective_counts(events, _steps(20))) == []
    one = compute_collective_counts(events[:1], _steps(20, ranks=(0,)))
    assert detect_collective_mismatch(one) == []
