"""A warm rerun opens the run it shows once, lists its files once, and looks runs up in
the run list's maps instead of resolving every served run's path (issue 31, item 10).

Counted through the layer a visitor reaches (an AppTest of the whole app), on a served
folder of many runs, so that any per-run work in a rerun shows as a count that grows with
the number of runs.
"""

from __future__ import annotations

import collections
import os
import shutil

import pytest

import debugkit.io.run as run_mod

from ._apptest import open_page

N_RUNS = 30
#: sorts after every copy, so a lookup that walks the list meets every run first
SHOWN = "zz-exploding"


@pytest.fixture
def many_runs(tmp_path, monkeypatch, sample_runs):
    root = tmp_path / "runs"
    root.mkdir()
    for i in range(N_RUNS - 1):
        shutil.copytree(sample_runs / "digits-compare-base", root / f"run-{i:02d}")
    shutil.copytree(sample_runs / "digits-exploding", root / SHOWN)
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(root))
    return root


@pytest.fixture
def count(monkeypatch):
    """Counts of ``Run`` objects made (per run folder), file listings (per run folder) and
    ``os.path.realpath`` calls on a path inside the served folder (per run folder), from
    the moment ``start(root)`` is called."""
    counts: dict = {"opens": collections.Counter(), "listings": collections.Counter(),
                    "realpath": collections.Counter()}
    served = []
    on = [False]
    init, listing, realpath = run_mod.Run.__init__, run_mod.files_signature, os.path.realpath

    def counted_init(self, path, *a, **k):
        if on[0]:
            counts["opens"][os.path.basename(str(path))] += 1
        return init(self, path, *a, **k)

    def counted_listing(path, *a, **k):
        if on[0]:
            counts["listings"][os.path.basename(str(path))] += 1
        return listing(path, *a, **k)

    def counted_realpath(path, *a, **k):
        text = os.fspath(path) if isinstance(path, os.PathLike) else path
        if on[0] and isinstance(text, str) and text.startswith(served[0] + os.sep):
            counts["realpath"][text[len(served[0]) + 1:].split(os.sep)[0]] += 1
        return realpath(path, *a, **k)

    monkeypatch.setattr(run_mod.Run, "__init__", counted_init)
    monkeypatch.setattr(run_mod, "files_signature", counted_listing)
    monkeypatch.setattr(os.path, "realpath", counted_realpath)

    def start(root):
        served.append(str(root))
        on[0] = True
        return counts

    return start


def test_a_warm_rerun_of_gradients_opens_its_run_once(many_runs, count):
    at = open_page("gradients", run=SHOWN)
    assert at.title[0].value == "Gradients"
    counts = count(many_runs)
    at.run()
    assert not at.exception
    assert at.title[0].value == "Gradients"
    assert dict(counts["opens"]) == {SHOWN: 1}
    assert dict(counts["listings"]) == {SHOWN: 1}
    # the run's id and the picker's selection are map lookups, not a walk over the list
    # resolving each run's path
    assert sum(counts["realpath"].values()) <= 1, counts["realpath"]


def test_a_warm_rerun_with_an_overlay_opens_each_run_once(many_runs, count):
    at = open_page("gradients", run=SHOWN, **{"with": "run-03"})
    counts = count(many_runs)
    at.run()
    assert not at.exception
    assert dict(counts["opens"]) == {SHOWN: 1, "run-03": 1}
    assert dict(counts["listings"]) == {SHOWN: 1, "run-03": 1}
    assert sum(counts["realpath"].values()) <= 2, counts["realpath"]


def test_a_warm_rerun_of_home_resolves_no_run_path(many_runs, count):
    at = open_page(None, run=SHOWN)  # a run picked: the sidebar names it too
    assert any(s.value == "Runs" for s in at.subheader)
    counts = count(many_runs)
    at.run()
    assert not at.exception
    assert not counts["opens"]  # the run list comes from the index, not from opened runs
    assert sum(counts["realpath"].values()) <= 1, counts["realpath"]
