"""Every JSON file of the run format is type-checked against its schema, nesting is
capped, and the 64 MiB cap holds for data.json, batch specs and event logs (issue 28)."""

from __future__ import annotations

import json
import re
import shutil

import msgspec
import pytest

from debugkit import format as fmt
from debugkit import open_run
from debugkit._fsutil import MAX_JSON_BYTES, MAX_JSON_DEPTH, read_json
from debugkit.errors import FileLimitError, RunDirError, RunFileError
from debugkit.runschema import SCHEMAS, Manifest, check, read_run_json
from tests.conftest import ROOT

SAMPLES = ROOT / "sample_runs"


def _schema_of(p) -> str | None:
    n, s = p.name, p.as_posix()
    if "/models/" in s or (n == "extra.json" and "/checkpoints/" in s):
        return None  # a training script's own files, not the run format's
    if re.match(r"meta-\d+\.json$", n):
        return "meta.json"
    if re.match(r"batch_spec(-\d+)?\.json$", n):
        return "batch_spec.json"
    if "/ranks/" in s and "/hangs/" in s:
        return "hang dump"
    if "/hangs/" in s:
        return "hang request"
    if "/memory_snapshots/" in s:
        return "snapshot sidecar"
    if s.endswith("checkpoints/index.json"):
        return "checkpoints/index.json"
    return n if n in SCHEMAS else None


def test_every_json_file_of_every_sample_run_passes_its_schema():
    checked = 0
    for p in sorted(SAMPLES.rglob("*.json")):
        schema = _schema_of(p)
        if schema:
            read_run_json(p, schema)
            checked += 1
    for p in SAMPLES.rglob("events*.jsonl"):
        for line in p.read_text().splitlines():
            check(json.loads(line), "event", p)
            checked += 1
    assert checked > 200


def _odd(field_type) -> object:
    """A value the field's type refuses: a number for a string, a string otherwise."""
    return 3 if "str" in str(field_type) and "int" not in str(field_type) else "x"


MANIFEST_FIELDS = [f for f in msgspec.structs.fields(Manifest) if f.name not in ("schema_version", "profiles")]
NESTED = [("env", {"gpus": "x"}), ("env", {"argv": [1]}), ("env", {"cuda_available": "yes"}),
          ("env", {"packages": {"torch": 2}}), ("distributed", {"world_size": "4"}),
          ("code", {"model_factory": 3}), ("code", {"model_factory": {"sha256": 5}}),
          ("guard", {"spec": "x"}), ("resumed_at", ["x"]), ("env", "x")]


@pytest.mark.parametrize("field", MANIFEST_FIELDS, ids=lambda f: f.name)
def test_a_manifest_field_of_another_type_refuses_the_run(tmp_path, field):
    doc = json.loads((SAMPLES / "digits-mlp/manifest.json").read_text())
    doc[field.name] = _odd(field.type)
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(RunFileError, match=rf"manifest.json: manifest.json field '{field.name}' must be "):
        fmt.read_manifest(tmp_path)


@pytest.mark.parametrize("field, value", NESTED, ids=lambda v: json.dumps(v)[:30])
def test_a_nested_manifest_field_of_another_type_refuses_the_run(tmp_path, field, value):
    doc = json.loads((SAMPLES / "digits-mlp/manifest.json").read_text())
    doc[field] = value
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(RunDirError, match=rf"manifest.json field '{field}"):
        open_run(tmp_path)


def test_json_nested_deeper_than_the_cap_is_refused_without_recursion_error(tmp_path):
    p = tmp_path / "deep.json"
    p.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(FileLimitError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        read_json(p)
    p.write_text("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(FileLimitError):
        read_json(p)
    p.write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert read_json(p)


def test_mistyped_records_are_skipped_with_a_warning(tmp_path):
    run = tmp_path / "r"
    shutil.copytree(SAMPLES / "digits-bad-label", run)
    f = next((run / "failures").iterdir()) / "failure.json"
    rec = json.loads(f.read_text())
    rec["step"] = "seventy-five"
    f.write_text(json.dumps(rec))
    ev = run / "ranks/0/events-000.jsonl"
    ev.write_text(ev.read_text() + json.dumps({"time": "noon", "kind": "start"}) + "\n")
    r = open_run(run)
    assert r.failures() == []
    assert len(r.events()) == len(open_run(SAMPLES / "digits-bad-label").events())
    text = "\n".join(r.warnings)
    assert "failure.json field 'step' must be int | null, got str" in text
    assert "event field 'time' must be" in text


def _sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)


def test_the_64_mib_cap_holds_for_data_batch_spec_and_events(tmp_path):
    """They were read whole with read_text(), past the cap every other JSON file has."""
    run = tmp_path / "r"
    shutil.copytree(SAMPLES / "digits-mlp", run)
    over = MAX_JSON_BYTES + 1
    _sparse(run / fmt.DATA_FILE, over)
    _sparse(run / "ranks/0/batch_spec-000.json", over)
    _sparse(run / "ranks/0/events-000.jsonl", over)
    r = open_run(run)
    assert r.datasets() is None
    assert r.batch_spec() is None
    assert r.events() == []
    text = "\n".join(r.warnings)
    for name in ("data.json", "batch_spec-000.json", "events-000.jsonl"):
        assert re.search(rf"{name}: {over} bytes is over the limit of {MAX_JSON_BYTES} bytes", text), (name, text)


def test_a_failure_s_batch_spec_is_capped_in_size_and_depth(tmp_path):
    """``BatchSpec.load`` (the Replay page's guard suggestion) read the file whole and
    parsed it with json.loads: 65 MiB were read, 100,000 brackets a RecursionError."""
    from debugkit.errors import InvalidInputError
    from debugkit.recorder.batchspec import BatchSpec

    p = tmp_path / "batch_spec.json"
    _sparse(p, MAX_JSON_BYTES + 1)
    with pytest.raises(FileLimitError, match="over the limit"):
        BatchSpec.load(p)
    p.write_bytes(b'{"tensors": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(InvalidInputError, match="nested deeper than 64"):
        BatchSpec.load(p)


#: Each documented manifest field and the JSON kinds docs/run-format.md gives it.
DOC_KINDS = {
    "run_id": {"str"}, "name": {"str"}, "created_at": {"int", "float"}, "resumed_at": {"list"},
    "config": {"dict"}, "model_factory": {"str"}, "step_fn": {"str"}, "factory_kwargs": {"dict"},
    "num_classes": {"int"}, "log_every": {"int", "float"}, "flush_every_s": {"int", "float"},
    "world_size": {"int"}, "distributed": {"dict"}, "model_class": {"str"},
    "optimizer_class": {"str"}, "code": {"dict"}, "guard": {"dict"}, "env": {"dict"},
    "imported_from": {"dict"}, "profiles": {"list"},
}
ODD = {"str": "x", "int": 3, "float": 1.5, "bool": True, "list": [], "dict": {}}


def test_odd_typed_manifests_pass_only_where_the_format_allows_the_type(tmp_path):
    """The issue's experiment, 20 fields x 6 JSON kinds = 120 manifests (null is allowed
    everywhere): before, 5 of 140 odd-typed manifests passed read_manifest; now exactly
    those whose kind the format documents pass (an empty list where a list is expected)."""
    base = json.loads((SAMPLES / "digits-mlp/manifest.json").read_text())
    passed, wrong = [], []
    for field, kinds in DOC_KINDS.items():
        for kind, value in ODD.items():
            doc = {**base, field: value}
            (tmp_path / "manifest.json").write_text(json.dumps(doc))
            try:
                fmt.read_manifest(tmp_path)
                ok = True
            except RunFileError:
                ok = False
            (passed if ok else []).append((field, kind))
            allowed = kind in kinds or (kind == "int" and "float" in kinds)
            if ok != allowed:
                wrong.append((field, kind, ok))
    assert not wrong, wrong
    assert len(passed) == sum(len(k) + ("float" in k and "int" not in k) for k in DOC_KINDS.values())
