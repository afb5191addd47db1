"""compute_straggler_windows against the plain per-window, per-rank definition.

The function computes every window's medians in one grouped pass and every rank's
"median of the other ranks" from one sort per window (it had to: one pandas lookup per
window and rank took minutes on 256 ranks x 5,000 steps). This reference is the
definition written the slow, obvious way; both must agree exactly, NaNs included."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

from debugkit.analysis.distributed import _median_of_others, compute_straggler_windows


def reference(times, window):
    cols = ["window_start", "window_end", "rank", "busy_s", "data_wait_s", "compute_s", "ratio"]
    if times.empty or times["rank"].nunique() < 2:
        return pd.DataFrame(columns=cols)
    n_ranks = times["rank"].nunique()
    counts = times.groupby("step")["rank"].nunique()
    full = counts.index[counts == n_ranks]
    t = times[times["step"].isin(full) & (times["step"] > times["step"].min())]
    steps = sorted(t["step"].unique())
    rows = []
    for i in range(0, len(steps), max(1, int(window))):
        chunk = steps[i:i + window]
        if len(chunk) < max(3, window // 2) and rows:
            break
        w = t[t["step"].isin(chunk)]
        med = w.groupby("rank")[["busy_s", "data_wait_s", "compute_s"]].median()
        for r in med.index:
            ref = float(med.loc[med.index != r, "busy_s"].median())
            rows.append({"window_start": int(chunk[0]), "window_end": int(chunk[-1]), "rank": int(r),
                         "busy_s": float(med.loc[r, "busy_s"]),
                         "data_wait_s": float(med.loc[r, "data_wait_s"]),
                         "compute_s": float(med.loc[r, "compute_s"]),
                         "ratio": float(med.loc[r, "busy_s"]) / ref if ref > 0 else math.nan})
    return pd.DataFrame(rows, columns=cols)


def random_times(seed):
    rng = np.random.default_rng(seed)
    rows = []
    n_ranks, n_steps = int(rng.integers(2, 9)), int(rng.integers(1, 120))
    for r in range(n_ranks):
        for s in range(n_steps):
            if rng.random() < 0.05:
                continue  # a step some rank did not record
            busy = rng.choice([np.nan, 1.0, 2.0, rng.random()], p=[0.05, 0.2, 0.2, 0.55])  # ties, NaN
            rows.append({"step": s, "rank": r, "busy_s": busy, "data_wait_s": rng.random(),
                         "compute_s": rng.random()})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("window", [1, 2, 4, 7, 20])
def test_equals_the_definition(seed, window):
    t = random_times(seed)
    assert_frame_equal(compute_straggler_windows(t, window).reset_index(drop=True),
                       reference(t, window).reset_index(drop=True), check_dtype=False)


def test_leave_one_out_medians():
    m = np.array([[1.0, 2.0, 3.0, 10.0], [5.0, 5.0, 5.0, 5.0], [1.0, np.nan, 3.0, 4.0]])
    got = _median_of_others(m)
    assert got[0].tolist() == [3.0, 3.0, 2.0, 2.0]
    assert got[1].tolist() == [5.0, 5.0, 5.0, 5.0]
    assert got[2].tolist() == [3.5, 3.0, 2.5, 2.0]
    assert np.isnan(_median_of_others(np.array([[1.0]]))).all()
