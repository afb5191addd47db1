"""The streamed chrome-trace reader equals json.load on the same file; bad traces."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debugkit.errors import ProfileFileError
from debugkit.io.chrome_trace import INT_ARGS, read_chrome_trace

from ..conftest import SAMPLE_RUNS


def _text(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def naive(doc):
    """What the reader must give, computed the plain way from json.load's objects."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    rows = []
    for ev in events:
        ph = ev.get("ph")
        if ph not in ("X", "i", "I"):
            continue
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        rows.append({
            "ph": "X" if ph == "X" else "i", "cat": _text(ev.get("cat")), "name": _text(ev.get("name")),
            "pid": _text(ev.get("pid")), "tid": _text(ev.get("tid")), "ts_us": float(ev["ts"]),
            "dur_us": float(ev.get("dur", 0.0)) if ph == "X" else 0.0,
            **{col: (args.get(k) if type(args.get(k)) is int else -1) for k, col in INT_ARGS.items()},
            "input_dims": json.dumps(args["Input Dims"], separators=(",", ":")) if "Input Dims" in args else "",
            "input_types": json.dumps(args["Input type"], separators=(",", ":"), ensure_ascii=False)
            if "Input type" in args else "",
        })
    return rows, len(events)


def assert_same(trace, doc):
    rows, n = naive(doc)
    assert trace.n_events == n
    got = trace.events
    assert len(got) == len(rows)
    for col in ("ph", "cat", "name", "pid", "tid", "input_dims", "input_types"):
        assert got[col].astype(str).tolist() == [r[col] for r in rows], col
    for col in ("ts_us", "dur_us"):
        assert np.array_equal(got[col].to_numpy(), np.array([r[col] for r in rows], dtype=np.float64)), col
    for col in INT_ARGS.values():
        assert got[col].tolist() == [r[col] for r in rows], col


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory):
    """A real torch.profiler trace: the digits sample's, unzipped."""
    src = SAMPLE_RUNS / "digits-profiled" / "profiles" / "torch-trace.trace.json.gz"
    out = tmp_path_factory.mktemp("tr") / "trace.json"
    out.write_bytes(gzip.decompress(src.read_bytes()))
    return out


@pytest.mark.parametrize("chunk", [1 << 20, 4096, 97])
def test_streamed_parse_equals_json_load(real_trace, chunk):
    doc = json.loads(real_trace.read_text())
    trace = read_chrome_trace(real_trace, chunk_size=chunk)
    assert_same(trace, doc)
    assert trace.meta["schemaVersion"] == 1
    assert "traceEvents" not in trace.meta
    assert any(n.startswith("ProfilerStep#") for n in trace.events["name"].astype(str))
    assert set(trace.threads.values())  # thread_name metadata was read


def test_gzip_and_plain_read_the_same(real_trace, tmp_path):
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(real_trace.read_bytes()))
    a, b = read_chrome_trace(real_trace), read_chrome_trace(gz)
    assert a.events.equals(b.events) and a.n_events == b.n_events


tricky = st.text(alphabet=st.sampled_from(list('ab"\\{}[]:, \n é')), max_size=10)
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "i", "M", "s", "f"]), "name": tricky, "cat": tricky,
     "pid": st.one_of(st.integers(0, 5), tricky), "tid": st.one_of(st.integers(0, 5), tricky),
     "ts": st.floats(0, 1e13, allow_nan=False), "dur": st.floats(0, 1e6, allow_nan=False),
     "args": st.fixed_dictionaries({}, optional={
         "External id": st.integers(0, 10**9), "correlation": st.integers(0, 10**6),
         "Input Dims": st.lists(st.lists(st.integers(0, 99), max_size=3), max_size=3),
         "Input type": st.lists(tricky, max_size=3), "note": tricky})})


@settings(max_examples=60, deadline=None)
@given(events=st.lists(event, min_size=1, max_size=30), indent=st.sampled_from([None, 2]),
       chunk=st.sampled_from([64, 500, 1 << 16]), array_root=st.booleans())
def test_random_traces_equal_json_load(tmp_path_factory, events, indent, chunk, array_root):
    doc = events if array_root else {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "x"}],
                                     "traceEvents": events, "traceName": "t"}
    f = tmp_path_factory.mktemp("h") / "t.json"
    f.write_text(json.dumps(doc, indent=indent, ensure_ascii=False))
    rows, _ = naive(doc)
    if not rows and not events:
        return
    trace = read_chrome_trace(f, chunk_size=chunk)
    assert_same(trace, doc)


def test_array_format_without_closing_bracket(tmp_path):
    f = tmp_path / "a.json"
    f.write_text('[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},\n'
                 '{"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 4, "dur": 1},\n')
    t = read_chrome_trace(f)
    assert t.events["name"].tolist() == ["a", "b"] and t.meta == {}


def test_begin_end_pairs_become_spans(tmp_path):
    f = tmp_path / "be.json"
    f.write_text(json.dumps({"traceEvents": [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 12},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 15},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 30},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 31}]}))
    t = read_chrome_trace(f)
    assert t.events[["name", "ts_us", "dur_us"]].values.tolist() == [["inner", 12.0, 3.0], ["outer", 10.0, 20.0]]


GOOD_EV = '{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.5, "dur": 2}'


@pytest.mark.parametrize("content, match", [
    ("", "the file is empty"),
    ('{"traceEvents": [' + GOOD_EV + ", " + GOOD_EV[:20],
     r"the trace ends early at byte \d+, inside traceEvents after 1 complete event"),
    ('{"traceEvents": [' + GOOD_EV, r"ends early .* after 1 complete event"),
    ('{"traceEvents": [' + GOOD_EV + '], "traceName": "x', "after traceEvents"),
    ('{"schemaVersion": 1, "other": [1, 2]}', "no 'traceEvents' array at the top level"),
    ('{"traceEvents": {"a": 1}}', "traceEvents: not an array"),
    ('{"traceEvents": []}', "the trace holds no events"),
    ('{"traceEvents": [{"name": "x", "ts": 1}]}', r"traceEvents\[0\]: no 'ph'"),
    ('{"traceEvents": [{"ph": "X", "name": "x", "ts": "soon"}]}', r"traceEvents\[0\]: 'ts' is 'soon'"),
    ('{"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": null}]}', r"'dur' is None"),
    ('{"traceEvents": [' + GOOD_EV + ', 5, ' + GOOD_EV + ']}', r"traceEvents\[1\]: not an object"),
    ('{"traceEvents": [' + GOOD_EV + ', 5]}', "unexpected '5' between events"),
    ('"just a string"', "no 'traceEvents' array"),
])
def test_bad_traces(tmp_path, content, match):
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(ProfileFileError, match=match):
        read_chrome_trace(f)


def test_truncated_gzip_trace(real_trace, tmp_path):
    f = tmp_path / "cut.json.gz"
    f.write_bytes(gzip.compress(real_trace.read_bytes())[:3000])
    with pytest.raises(ProfileFileError, match="ends early"):
        read_chrome_trace(f)


def test_timestamps_keep_their_precision(tmp_path):
    f = tmp_path / "p.json"
    f.write_text('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, '
                 '"ts": 5367808596256.972, "dur": 8309.117}]}')
    t = read_chrome_trace(f)
    assert t.events["ts_us"].iloc[0] == 5367808596256.972
    assert math.isclose(t.events["dur_us"].iloc[0], 8309.117)
