"""Whole-run fuzz (issue 28): a sample run with some files mutated, structure-aware
(tests/fuzz/wholerun.py), opened on Home, Overview, Gradients, Memory, Profiler,
Distributed, Checkpoints, Replay and Audit. Every page draws or shows a DebugkitError's
box; nothing raises into Streamlit, shows a traceback of the app's code or the "Something
went wrong" box, prints a traceback to the process's stderr (the server log), crashes the
process (each run is opened in a child) or writes outside the store and the cache. The seeds are fixed; ``python bench/fuzz.py --whole-run N``
explores more.
"""

from __future__ import annotations

import json

import pytest

from .wholerun import BAD, PAGES, RUNS, classify, mutate_file_bytes, run_isolated


def _broken(result: dict) -> list[str]:
    return [f"{page}: {outcome}: {detail}" for page, (outcome, detail) in result["pages"].items()
            if outcome in BAD]


def test_a_mutated_run_opens_on_every_page():
    result = run_isolated("digits-bad-label", 0)
    assert set(result["pages"]) == set(PAGES) and result["files"], result
    assert not _broken(result), (result["files"], _broken(result))


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("sample", RUNS)
def test_mutated_sample_runs_open_on_every_page(sample):
    broken = []
    for salt in range(1, 2):  # one seeded run per sample here; bench/fuzz.py --whole-run N does more
        result = run_isolated(sample, salt)
        broken += [f"{sample} salt={salt} {result['files']}: {b}" for b in _broken(result)]
    assert not broken, "\n".join(broken)


@pytest.mark.slow  # every page on a mutated run: 5.2 CPU s (tests._cputime)
def test_a_run_with_every_file_mutated_opens_on_every_page():
    result = run_isolated("digits-profiled", 0, every_file=True)
    assert len(result["files"]) == 12, result["files"]  # every file of the sample
    assert not _broken(result), _broken(result)


def test_the_classifier_tells_a_leaked_traceback_from_run_data():
    """The capture's own traceback is run data (shown on purpose); the app's is a leak."""
    from .wholerun import ROOT

    class Box:
        def __init__(self, value):
            self.value = value

    class At:
        exception = []
        warning = markdown = caption = info = []

        def __init__(self, errors=(), codes=()):
            self.error = [Box(e) for e in errors]
            self.code = [Box(c) for c in codes]
            self.sidebar = type("S", (), {"error": []})()

    run_tb = 'Traceback (most recent call last):\n  File "/home/u/train.py", line 3, in <module>'
    app_tb = f'Traceback (most recent call last):\n  File "{ROOT}/debugkit/io/run.py", line 9, in x'
    assert classify(At(codes=[run_tb]))[0] == "drew"
    assert classify(At(codes=[app_tb]))[0] == "traceback"
    assert classify(At(errors=["Something went wrong on run x: TypeError: y"]))[0] == "unexpected"
    assert classify(At(errors=["run.json: refused"]))[0] == "refused"


@pytest.mark.parametrize("name", ["manifest.json", "events-000.jsonl", "model.safetensors",
                                  "rank0.pt.trace.json.gz", "grads-000.arrows"])
def test_each_file_kind_gets_a_structure_aware_mutation(name):
    import gzip
    import random

    from .wholerun import SAMPLES

    src = {"manifest.json": "digits-mlp/manifest.json",
           "events-000.jsonl": "digits-bad-label/ranks/0/events-000.jsonl",
           "model.safetensors": "digits-resumed/checkpoints/000000030/model.safetensors",
           "rank0.pt.trace.json.gz": "ddp-straggler/traces/rank0.pt.trace.json.gz",
           "grads-000.arrows": "digits-mlp/ranks/0/grads-000.arrows"}[name]
    data = (SAMPLES / src).read_bytes()
    outs = [mutate_file_bytes(data, name, random.Random(s)) for s in range(20)]
    assert sum(o != data for o in outs) >= 15
    if name.endswith(".json"):  # most stay valid JSON: the lie is in the values
        valid = 0
        for o in outs:
            try:
                json.loads(o)
                valid += 1
            except (ValueError, RecursionError):
                pass
        assert valid >= 10
    if name.endswith(".gz"):  # most still inflate: the lie is in the payload
        ok = 0
        for o in outs:
            try:
                gzip.decompress(o)
                ok += 1
            except (OSError, EOFError):
                pass
        assert ok >= 8
