"""The vectorised JSON structure scanner against a plain character walk."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debugkit.io import jsonscan

# Strings full of what trips a scanner: quotes, backslashes, brackets, colons.
tricky = st.text(alphabet=st.sampled_from(list('ab"\\{}[]:,\n\t é\u2028')), max_size=12)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False, width=32), tricky)
docs = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                    st.dictionaries(tricky, kids, max_size=5)),
                    max_leaves=40)


def reference(text: bytes):
    """(pos, char, level) of structural characters outside strings, by walking bytes."""
    out, level, in_str, esc = [], 0, False, False
    for i, b in enumerate(text):
        c = chr(b)
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            continue
        if c == '"':
            in_str = True
        elif c in "{[":
            level += 1
            out.append((i, c, level))
        elif c in "}]":
            out.append((i, c, level))
            level -= 1
        elif c == ":":
            out.append((i, c, level))
    return out


@settings(max_examples=120, deadline=None)
@given(doc=docs, indent=st.sampled_from([None, 1, 2]))
def test_scan_matches_a_character_walk(doc, indent):
    text = json.dumps({"k": doc, "x": [doc, {"y": doc}]}, indent=indent, ensure_ascii=False).encode()
    s = jsonscan.scan(text)
    ref = reference(text)
    assert s.pos.tolist() == [p for p, _, _ in ref]
    assert [chr(text[p]) for p in s.pos.tolist()] == [c for _, c, _ in ref]
    assert s.level.tolist() == [lv for _, _, lv in ref]
    assert s.end_level == 0 and not s.end_in_string
    partner = jsonscan.match_pairs(s)
    stack = []
    for i, (_, c, _) in enumerate(ref):
        if c in "{[":
            stack.append(i)
        elif c in "}]":
            o = stack.pop()
            assert partner[o] == i and partner[i] == o
        else:
            assert partner[i] == -1


def test_escaped_quotes_and_backslash_runs():
    text = rb'{"a\\": "\"[", "b": "\\\\", "c": ["\\\"}"]}'
    assert json.loads(text)  # valid JSON
    s = jsonscan.scan(text)
    assert [chr(text[p]) for p in s.pos] == ["{", ":", ":", ":", "[", "]", "}"]
    assert s.level.tolist() == [1, 1, 1, 1, 2, 2, 1]


def test_truncated_document_reports_open_levels():
    text = b'{"a": [1, 2, {"b": "x'
    s = jsonscan.scan(text)
    assert s.end_in_string
    s = jsonscan.scan(b'{"a": [1, 2')
    assert s.end_level == 2 and not s.end_in_string


def test_scan_a_slice_with_a_base_level():
    text = b'xx, {"a": [1]}, {"b": 2}]'
    s = jsonscan.scan(text, 2, len(text), base_level=2)
    assert s.pos.tolist() == [4, 8, 10, 12, 13, 16, 20, 23, 24]
    assert s.level.tolist() == [3, 3, 4, 4, 3, 3, 3, 3, 2]
    assert s.end_level == 1


def test_key_before_decodes_escaped_keys():
    text = b'{"we\\"ird": 1, "plain" : 2}'
    s = jsonscan.scan(text)
    colons = np.flatnonzero(s.kind == jsonscan.COLON)
    assert [jsonscan.key_before(text, s, int(c)) for c in colons] == ['we"ird', "plain"]


def test_line_col():
    assert jsonscan.line_col(b"ab\ncd\nef", 7) == (3, 2)


@pytest.mark.parametrize("text", [b"", b"   ", b"123"])
def test_no_structure(text):
    s = jsonscan.scan(text)
    assert len(s.pos) == 0 and s.end_level == 0
