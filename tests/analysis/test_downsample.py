"""The extreme-preserving downsampler keeps what a person must see, for any series."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from debugkit.analysis.downsample import downsample_minmax

values = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                   st.sampled_from([0.0, -0.0, 1e-300, -1e300, np.nan, np.inf, -np.inf]))


@settings(max_examples=300, deadline=None)
@given(y=arrays(np.float64, st.integers(0, 3000), elements=values),
       max_points=st.integers(-5, 400))
def test_keeps_global_extremes_and_every_nonfinite_point(y, max_points):
    x = np.arange(len(y))
    idx = downsample_minmax(x, y, max_points)
    assert idx.dtype == np.int64
    assert np.all(np.diff(idx) > 0)  # sorted, unique
    assert idx.size == 0 or (idx[0] >= 0 and idx[-1] < len(y))
    kept = set(idx.tolist())
    assert set(np.flatnonzero(~np.isfinite(y)).tolist()) <= kept
    finite = np.flatnonzero(np.isfinite(y))
    if len(finite):
        assert y[finite].max() in y[idx]
        assert y[finite].min() in y[idx]
        # the finite points kept are bounded: 3 per bucket plus the last point
        assert np.isfinite(y[idx]).sum() <= max(max(3, max_points), 3 * (max(3, max_points) // 3) + 1)


def test_a_single_spike_in_a_million_points_survives():
    n = 1_000_000
    y = np.ones(n)
    y[123_457] = 50.0
    y[654_321] = np.nan
    idx = downsample_minmax(np.arange(n), y, 5000)
    assert 123_457 in idx and 654_321 in idx
    assert len(idx) <= 5002
