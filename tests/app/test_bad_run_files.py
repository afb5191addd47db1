"""One bad run never breaks another visitor's page (issue 28, item 4).

A store holds a healthy run next to runs with one hostile JSON file each: a failure.json
nested 100,000 deep (RecursionError), a checkpoint record that is a number, a checkpoint
file entry that is a number, a manifest whose ``env`` is a string, an event whose
``time`` is a string, a torch.profiler trace nested 100,000 deep. Home lists every run,
the bad ones as a row naming the run and the file; each page of a bad run draws or shows
an error box; nothing shows a traceback.
"""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from tests.conftest import ROOT

from ._apptest import open_page

SAMPLES = ROOT / "sample_runs"
DEEP = b"[" * 100_000 + b"]" * 100_000


def _deep_failure(run):
    (next((run / "failures").iterdir()) / "failure.json").write_bytes(DEEP)


def _checkpoint_number(run):
    p = run / "checkpoints/index.json"
    doc = json.loads(p.read_text())
    doc["checkpoints"][0] = 3
    p.write_text(json.dumps(doc))


def _checkpoint_file_number(run):
    p = run / "checkpoints/index.json"
    doc = json.loads(p.read_text())
    doc["checkpoints"][-1]["files"]["model.safetensors"] = 3
    p.write_text(json.dumps(doc))


def _manifest_env(run):
    p = run / "manifest.json"
    doc = json.loads(p.read_text())
    doc["env"] = "x"
    p.write_text(json.dumps(doc))


def _event_time(run):
    p = run / "ranks/0/events-000.jsonl"
    p.write_text(p.read_text() + json.dumps({"time": "noon", "kind": "start"}) + "\n")


def _deep_trace(run):
    (run / "traces/rank1.pt.trace.json.gz").write_bytes(
        gzip.compress(b'{"traceEvents": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"))


#: (bad run id, sample it is copied from, how it is spoiled, the file its error names)
BAD = [
    ("deep-failure", "digits-bad-label", _deep_failure, "failure.json"),
    ("checkpoint-number", "digits-resumed", _checkpoint_number, "index.json"),
    ("checkpoint-file-number", "digits-resumed", _checkpoint_file_number, "index.json"),
    ("manifest-env", "digits-mlp", _manifest_env, "manifest.json"),
    ("event-time", "digits-mlp", _event_time, "events-000.jsonl"),
    ("deep-trace", "ddp-straggler", _deep_trace, "rank1.pt.trace.json.gz"),
]


@pytest.fixture
def store(tmp_path, monkeypatch):
    root = tmp_path / "served"
    root.mkdir()
    shutil.copytree(SAMPLES / "digits-mlp", root / "healthy")
    for rid, sample, spoil, _ in BAD:
        shutil.copytree(SAMPLES / sample, root / rid)
        spoil(root / rid)
    monkeypatch.setenv("DEBUGKIT_ROOTS", str(root))
    return root


def _shown(at) -> str:
    parts = [*at.error, *at.warning, *at.info, *at.code, *at.text, *at.markdown, *at.caption, *at.table,
             *at.exception]
    return "\n".join(str(getattr(x, "value", x)) for x in parts)


def test_home_lists_every_run_and_names_the_bad_file(store):
    at = open_page(None, check=False)
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value.set_index("run")
    assert "healthy" in table.index
    for rid, _, _, _ in BAD:
        assert rid in table.index, (rid, list(table.index))
    found = {rid: str(v) for rid, v in table["finding"].items()}
    assert "Cannot be analysed" not in found["healthy"], found
    # Each bad run's row names the file that was refused, relative to the run.
    assert found["manifest-env"].endswith("#Cannot be analysed: manifest.json"), found
    assert found["checkpoint-number"].endswith("#Cannot be analysed: checkpoints/index.json"), found
    assert found["checkpoint-file-number"].endswith("#Cannot be analysed: checkpoints/index.json"), found
    assert found["deep-trace"].endswith("#Cannot be analysed: traces/rank1.pt.trace.json.gz"), found
    assert not any(str(store) in v for v in found.values()), found
    # A failure record or an event line that cannot be read is skipped, the run still listed.
    assert table["status"]["deep-failure"] == "failed" and table["status"]["event-time"] == "finished"
    assert "Traceback" not in _shown(at)


@pytest.mark.parametrize("rid, says", [
    ("manifest-env", "manifest.json field 'env' must be a JSON object"),
    ("checkpoint-number", "checkpoints/index.json field 'checkpoints[0]' must be a JSON object"),
    ("checkpoint-file-number", "field 'checkpoints[4].files[...]' must be a JSON object, got int"),
])
def test_the_bad_run_s_page_names_the_file_and_field(store, rid, says):
    page = "overview" if rid == "manifest-env" else "checkpoints"
    at = open_page(page, check=False, run_path=store / rid, run=rid)
    assert not at.exception, [e.value for e in at.exception]
    shown = _shown(at).replace("\\", "")
    assert says in shown, shown[:2000]


@pytest.mark.parametrize("page", ["overview", "gradients", "memory", "distributed", "checkpoints",
                                  "replay", "profiler", "audit"])
@pytest.mark.parametrize("rid", [b[0] for b in BAD])
def test_every_page_of_a_bad_run_draws_or_shows_an_error_box(store, rid, page):
    at = open_page(page, check=False, run_path=store / rid, run=rid)
    assert not at.exception, (rid, page, [e.value for e in at.exception])
    assert "Traceback" not in _shown(at)


def test_a_page_that_raises_shows_a_box_naming_the_run(store, monkeypatch):
    """An exception no check foresaw (here: the scalars reader raising TypeError) is a box
    naming the run, with no traceback; before, it reached Streamlit, which drew the
    traceback with the server's paths."""
    from debugkit.io.run import Run

    def broken(self, rank=None):
        raise TypeError(f"'<' not supported between instances of 'str' and 'float' in {self.path}")

    monkeypatch.setattr(Run, "scalars", broken)
    at = open_page("overview", check=False, run_path=store / "healthy", run="healthy")
    assert not at.exception, [e.value for e in at.exception]
    boxes = [e.value for e in at.error]
    assert any(b.startswith("Something went wrong in Overview on run `healthy`: TypeError: '<' not "
                            "supported") for b in boxes), boxes
    assert not any(str(store) in b for b in boxes), boxes  # the run's path is shown as its id
    assert "Traceback" not in _shown(at)
