"""debugkit.format: the run layout's names, its manifest validator and its one writer."""

from __future__ import annotations

import json
import threading

import pytest

from debugkit import format as fmt
from debugkit.errors import MSG_NO_SUCH_PATH, MSG_NOT_A_RUN, RunDirError, SchemaVersionError


def test_segment_names_and_the_next_segment(tmp_path):
    assert fmt.segment_name("steps", 3) == "steps-003.arrows"
    assert fmt.segment_name(fmt.EVENTS_PREFIX, 12) == "events-012.jsonl"
    assert fmt.RANK_META.format(segment=1) == "meta-001.json"
    assert fmt.next_segment(tmp_path / "missing") == 0
    for name in ("steps-000.arrows", "events-002.jsonl", "meta-007.json", "notes.txt"):
        (tmp_path / name).write_text("")
    assert fmt.next_segment(tmp_path) == 3  # meta files do not count, event logs do
    m = fmt.SEGMENT_FILE.match("grads-010.arrows")
    assert (m.group("table"), m.group("seg"), m.group("suffix")) == ("grads", "010", ".arrows")


def test_read_manifest_says_what_is_wrong(tmp_path):
    with pytest.raises(RunDirError, match="no such file") as e:
        fmt.read_manifest(tmp_path / "nope")
    assert str(e.value) == MSG_NO_SUCH_PATH.format(path=tmp_path / "nope")
    with pytest.raises(RunDirError) as e:
        fmt.read_manifest(tmp_path)
    assert str(e.value) == MSG_NOT_A_RUN.format(path=tmp_path)
    (tmp_path / fmt.MANIFEST).write_text('{"schema_version": "9.0"}')
    with pytest.raises(SchemaVersionError, match="newer"):
        fmt.read_manifest(tmp_path)
    (tmp_path / fmt.MANIFEST).write_text('{"schema_version": "1.0", "name": 3}')
    with pytest.raises(RunDirError, match="field 'name' must be str"):
        fmt.read_manifest(tmp_path)
    (tmp_path / fmt.MANIFEST).write_text('{"schema_version": "1.0", "name": "r"}')
    assert fmt.read_manifest(tmp_path)["_read_as_version"] == "1.3"  # read through the 1.0 -> 1.1 -> 1.2 -> 1.3 upgrade steps


def test_update_manifest_refuses_or_replaces_a_broken_manifest(tmp_path):
    (tmp_path / fmt.MANIFEST).write_text("{not json")
    with pytest.raises(RunDirError, match=r"not valid JSON .*; not adding a profile to it$"):
        fmt.update_manifest(tmp_path, lambda old: {}, action="adding a profile to it")
    assert (tmp_path / fmt.MANIFEST).read_text() == "{not json"  # left as it was
    (tmp_path / fmt.MANIFEST).write_text("[1, 2]")
    with pytest.raises(RunDirError, match="not a JSON object; not changing it"):
        fmt.update_manifest(tmp_path, lambda old: {})
    seen = []
    new = fmt.update_manifest(tmp_path, lambda old: seen.append(old) or {"a": 1}, unreadable="replace")
    assert seen == [None] and new == {"a": 1}
    assert json.loads((tmp_path / fmt.MANIFEST).read_text()) == {"a": 1}


def test_update_manifest_serialises_concurrent_writers(tmp_path):
    fmt.update_manifest(tmp_path, lambda old: fmt.minimal_manifest(tmp_path))

    def add(i):
        for j in range(20):
            fmt.update_manifest(tmp_path, lambda old, j=j: {**old, "items": old.get("items", []) + [(i, j)]})

    threads = [threading.Thread(target=add, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    items = json.loads((tmp_path / fmt.MANIFEST).read_text())["items"]
    assert sorted(map(tuple, items)) == [(i, j) for i in range(4) for j in range(20)]
