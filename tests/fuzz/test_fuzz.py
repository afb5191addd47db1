"""Property: every reader either opens a mutated input or raises a DebugkitError.

Hypothesis drives the mutations of each target's real seed input (see targets.py);
`derandomize=True` keeps CI reproducible, and `python bench/fuzz.py` explores further
with fresh random mutations. Any other exception, or a reader running past
targets.TIME_LIMIT_S on one input, fails the test; save such an input under
tests/fuzz/corpus/<target>/ so test_corpus.py replays it forever.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .targets import TARGETS, mutate, run_target, seed

EXAMPLES = 60


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seed_input_opens(name):
    """The unmutated seed is a valid input: it must open (else the fuzz proves nothing)."""
    assert run_target(name, seed(name)) == "opened"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rounds=st.integers(1, 3), salt=st.integers(0, 2**32 - 1))
def test_mutated_input_opens_or_is_refused(name, rounds, salt):
    rng = random.Random(salt)
    data = seed(name)
    for _ in range(rounds):
        data = mutate(data, rng)
    assert run_target(name, data) in ("opened", "refused")


def test_the_memory_bound_catches_a_reader_that_allocates_too_much(monkeypatch):
    import numpy as np

    from . import targets

    def greedy(data, tmp):
        np.ones(300 << 20, dtype=np.uint8)  # 300 MiB for a 3-byte input

    monkeypatch.setitem(targets.TARGETS, "greedy", (greedy, lambda: b"abc"))
    with pytest.raises(targets.MemoryBlowup, match=r"greedy: 300 MiB allocated for a 3-byte input"):
        targets.run_target("greedy", b"abc")
    assert targets.run_target("greedy", b"abc", memory_limit=None) == "opened"
