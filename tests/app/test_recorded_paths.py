"""No folder of the machine that recorded a run on the pages (follow-up to issues 28/35).

A run's manifest and captures record absolute paths of the recording machine: the model
factory's file, the working folder, the script, the interpreter, every frame of a
traceback and of a hang dump. Uploaded, those are the uploader's home folders; recorded on
the server, the server's. The pages show each such path relative to the recorded code root
or project folder (``examples/watch_loop.py``, line and function kept), after
``site-packages/`` for an installed package, else by its file name.

Each test copies a sample run into the run store and moves every path it recorded under a
made-up home folder (``/home/alice/secret-project``) or under the server's own folders
(this checkout, the run store), then scans everything the page sends: every element's
text, markdown, code, JSON, dataframe cells and figure JSON.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLE_RUNS

from ._apptest import open_page

HOME = "/home/alice/secret-project"


def _store() -> Path:
    return Path(os.environ["DEBUGKIT_STORE"])


def _prefixes(variant: str) -> tuple[str, str]:
    """(project folder, interpreter prefix) the copied run was recorded under."""
    if variant == "home":
        return HOME, "/home/alice/.pyenv/versions/3.11.7"
    store = _store()
    return str(ROOT), str(store.parent / "server-python")


def _relocate(sample: str, name: str, variant: str) -> tuple[Path, tuple[str, ...]]:
    """A copy of ``sample`` in the store as ``name``, every recorded path of its project
    and interpreter moved under ``variant``'s folders; returns the run and the folders the
    pages must not show."""
    import shutil

    project, interp = _prefixes(variant)
    dst = _store() / name
    shutil.copytree(SAMPLE_RUNS / sample, dst)
    env = json.loads((dst / "manifest.json").read_text())["env"]
    old_project = env["cwd"]
    old_interp = env["executable"].rsplit("/bin/", 1)[0]
    def move(text: str) -> str:
        # through placeholders, so a new folder that itself lies under /work/ (a checkout at
        # /check/work/main) is not moved again
        text = text.replace(old_interp, "\0interp\0").replace(old_project, "\0project\0")
        # other checkouts of the samples, whole paths only (not /work/ inside a longer path)
        text = re.sub(r"(?<![\w./-])/work/[\w.-]+/[\w.-]+", "\0project\0", text)
        return text.replace("\0interp\0", interp).replace("\0project\0", project)

    for f in sorted(dst.rglob("*")):
        if f.suffix in (".json", ".txt") and f.is_file():
            f.chmod(0o644)
            f.write_text(move(f.read_text()))
        elif f.name.endswith(".json.gz"):  # a profile: its hash and size in the manifest follow
            data = gzip.compress(move(gzip.decompress(f.read_bytes()).decode()).encode(), mtime=0)
            f.write_bytes(data)
            manifest = json.loads((dst / "manifest.json").read_text())
            for entry in manifest.get("profiles") or []:
                if entry.get("file") == f.relative_to(dst).as_posix():
                    entry.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
            (dst / "manifest.json").write_text(json.dumps(manifest))
    for audit in sorted((dst / "audits").glob("*/audit.json")):  # an audit's id is its content's
        from debugkit.audit.stored_audits import content_id

        doc = json.loads(audit.read_text())
        doc["id"] = content_id(doc)
        audit.chmod(0o644)
        audit.write_text(json.dumps(doc))
        audit.parent.rename(audit.parent.with_name(doc["id"]))
    banned = [project + "/", interp + "/", "/work/", "/root/", str(_store()) + "/"]
    if variant == "home":
        banned += ["/home/alice", "secret-project"]
    return dst, tuple(banned)


def _scan(at) -> str:
    """Everything the page shows: each element's message (markdown, code, captions, JSON,
    figure specs, labels, help, widget ids) and each dataframe's cells."""
    parts = []

    def walk(node):
        proto = getattr(node, "proto", None)
        if proto is not None:  # widget ids too: a key reaches the browser (its st-key- class)
            parts.append(str(proto))
        for child in (getattr(node, "children", None) or {}).values():
            walk(child)

    walk(at._tree)
    parts += [df.value.to_string() for df in at.dataframe]
    parts += [t.value.to_string() for t in at.table]
    return "\n".join(parts)


def _no_folder(at, banned) -> None:
    assert not at.exception, [e.value for e in at.exception]
    shown = _scan(at)
    for folder in banned:
        assert folder not in shown, (folder, shown[max(0, shown.find(folder) - 300):shown.find(folder) + 200])


def _codes(at) -> str:
    return "\n".join(c.value for c in at.code)


def _captions(at) -> str:
    return "\n".join(c.value for c in at.caption)


VARIANTS = ["home", "server"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_replay_shows_the_code_and_traceback_relative_to_the_project(variant):
    _, banned = _relocate("watch-bad-label", "their-run", variant)
    at = open_page("replay", run="their-run")
    caps = _captions(at)
    assert "Recorded at: `examples/watch_loop.py`" in caps, caps
    tb = _codes(at)
    assert 'File "examples/watch_loop.py", line 54, in train' in tb, tb
    assert 'File "torch/nn/functional.py", line 3555, in cross_entropy' in tb, tb
    _no_folder(at, banned)


def test_replay_names_this_server_s_copy_of_the_code_relative_to_its_code_root(monkeypatch):
    """The file the replay would run, on this server: "File here" and the trust box name it
    from the code root it was found in, not with the server's folders."""
    monkeypatch.setenv("DEBUGKIT_CODE_ROOTS", str(ROOT / "examples"))
    monkeypatch.setenv("DEBUGKIT_CODE_TRUST", "anyone")
    _, banned = _relocate("watch-bad-label", "their-run", "home")
    at = open_page("replay", run="their-run")
    caps = _captions(at)
    assert "File here: `examples/watch_loop.py`" in caps, caps
    assert "from `examples/watch_loop.py`" in at.checkbox[0].label, at.checkbox[0].label
    _no_folder(at, banned + (str(ROOT),))


@pytest.mark.parametrize("variant", VARIANTS)
def test_overview_shows_the_traceback_relative_to_the_project(variant):
    _, banned = _relocate("watch-bad-label", "their-run", variant)
    at = open_page("overview", run="their-run")
    assert "Target 12 is out of bounds." in "\n".join(t.value for t in at.text)
    _no_folder(at, banned)
    at.session_state["ov_tb_r0-s0000009-exception"] = True  # as a click on the expander does
    at.run()
    tb = _codes(at)
    assert 'File "examples/watch_loop.py", line 67, in main' in tb, tb
    _no_folder(at, banned)


@pytest.mark.parametrize("variant", VARIANTS)
def test_compare_shows_the_code_table_relative_to_the_project(variant):
    # the run recorded under one folder, the base under the other: the file row differs
    # by the folders only, and shows both files as the project's examples/digits.py
    other = "server" if variant == "home" else "home"
    _, banned = _relocate("digits-compare-lr", "their-run", variant)
    _, banned_base = _relocate("digits-compare-base", "their-base", other)
    at = open_page("compare", run="their-run", base="their-base")
    (code,) = [df.value for df in at.dataframe
               if {"name", "run", "base"} <= set(df.value.columns) and "file" in set(df.value["name"])]
    row = code[code["name"] == "file"].iloc[0]
    assert (row["run"], row["base"]) == ("examples/digits.py", "examples/digits.py"), code
    _no_folder(at, banned + banned_base)


@pytest.mark.parametrize("variant", VARIANTS)
def test_distributed_hang_frames_are_relative_to_the_project(variant):
    _, banned = _relocate("ddp-hang", "their-run", variant)
    at = open_page("distributed", run="their-run", tab="hangs")
    codes = _codes(at)
    assert "train (examples/ddp_digits.py:108)" in codes, codes
    assert 'File "examples/ddp_digits.py", line' in codes, codes
    assert 'File "threading.py", line' in codes, codes
    _no_folder(at, banned)


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_failing_request_shows_its_traceback_relative_to_the_project(variant):
    _, banned = _relocate("serve-leak", "their-run", variant)
    at = open_page("overview", run="their-run")
    _no_folder(at, banned)
    f = next((SAMPLE_RUNS / "serve-leak" / "failures").iterdir()).name
    at = open_page("replay", run="their-run", failure=f)
    assert "examples/serve_leak.py" in _captions(at) + _codes(at)
    _no_folder(at, banned)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_audit_s_provenance_names_the_command_relative_to_the_project(variant):
    """The owner's view of a stored audit: its Provenance table's command (recorded as
    ``/…/examples/credit.py --out /…/sample_runs/credit-audit``) and run folder. (The
    shared view leaves the command out: tests/app/test_audit_page.py.)"""
    _, banned = _relocate("credit-audit", "their-run", variant)
    at = open_page("audit", timeout=240, run="their-run")
    # a Markdown table (st.table loaded 1 MB of Arrow JavaScript); its cells are escaped
    table = next(m.value for m in at.markdown if m.value.startswith("| what | value |")).replace("\\", "")
    assert "examples/credit.py --out sample_runs/credit-audit" in table, table
    _no_folder(at, banned)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("view", ["flame", "functions", "threads"])
def test_the_profiler_shows_no_folder_of_the_profiled_machine(variant, view):
    """digits-profiled: the profiled command, the training loop, the function tables and the
    flamegraph's hover, each sampled view, and the torch.profiler trace."""
    _, banned = _relocate("digits-profiled", "their-run", variant)
    at = open_page("profiler", run="their-run", view=view)
    _no_folder(at, banned)
    if view == "flame":
        caps = _captions(at)
        assert "examples.digits --out sample_runs/digits-profiled" in caps, caps
        assert "examples/digits.py, lines" in caps, caps
    at = open_page("profiler", run="their-run", profile="torch-trace")
    _no_folder(at, banned)


def test_compare_s_code_diff_names_each_file_relative_to_its_project(tmp_path):
    """Both runs' factory files still on this server (the run under one project folder,
    the base under another) and different: the diff's header names each as
    ``examples/digits.py``, not at the folder it lies in."""
    import hashlib

    for name, sample, folder, extra in (("their-run", "digits-compare-lr", "proj-run", "# run\n"),
                                        ("their-base", "digits-compare-base", "proj-base", "")):
        dst, _ = _relocate(sample, name, "server")
        factory = tmp_path / folder / "examples" / "digits.py"
        factory.parent.mkdir(parents=True)
        factory.write_text((ROOT / "examples" / "digits.py").read_text() + extra)
        manifest = json.loads((dst / "manifest.json").read_text())
        manifest["env"]["cwd"] = str(tmp_path / folder)
        manifest["code"]["model_factory"].update(
            file=str(factory), sha256=hashlib.sha256(factory.read_bytes()).hexdigest())
        (dst / "manifest.json").write_text(json.dumps(manifest))
    at = open_page("compare", run="their-run", base="their-base")
    diffs = [c.value for c in at.code if c.language == "diff"]
    assert diffs and diffs[0].startswith("--- base: examples/digits.py\n+++ run: examples/digits.py"), diffs
    assert "+# run" in diffs[0]
    _no_folder(at, (str(tmp_path),))
