"""Replay every input that once broke a reader (tests/fuzz/corpus/<target>/<file>).

Each file is fed to its target; it must open or be refused with a DebugkitError.
"""

from __future__ import annotations

import pytest

from .targets import CORPUS, TARGETS, run_target

CASES = sorted(p for p in CORPUS.glob("*/*") if p.is_file() and p.name != "README.md")


def test_corpus_is_not_empty_and_names_real_targets():
    assert CASES, "tests/fuzz/corpus holds the inputs that once broke a reader"
    assert {p.parent.name for p in CASES} <= set(TARGETS)


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_input_opens_or_is_refused(path):
    assert run_target(path.parent.name, path.read_bytes()) in ("opened", "refused")
