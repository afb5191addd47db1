"""Find the structure of a JSON document with numpy, without building its values.

Big profiling files are mostly one huge array (a chrome trace's ``traceEvents``, a
speedscope profile's ``samples``). Parsing them whole with ``json.load`` builds one
Python object per value, all at once. Here a single vectorised pass classifies every
byte, and only the *structural* characters outside strings (``{ } [ ] :``) are kept with
their nesting level. Callers then cut the document into pieces (a batch of events, one
sample's stack) and hand each piece to orjson, so at most a batch is ever alive as
Python objects.

Levels: the root container's contents are at level 1. An opening bracket's level is the
level of its contents, a closing bracket carries the same level as its opening one, and a
colon carries the level of the object it separates keys in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Byte classes.
OTHER, QUOTE, BACKSLASH, LBRACE, RBRACE, LBRACKET, RBRACKET, COLON = range(8)
_LUT = np.zeros(256, dtype=np.uint8)
for _ch, _cls in (('"', QUOTE), ("\\", BACKSLASH), ("{", LBRACE), ("}", RBRACE),
                  ("[", LBRACKET), ("]", RBRACKET), (":", COLON)):
    _LUT[ord(_ch)] = _cls
_TABLE = bytes(_LUT.tolist())  # for bytes.translate, faster than a numpy lookup
_DELTA = np.zeros(8, dtype=np.int64)
_DELTA[LBRACE] = _DELTA[LBRACKET] = 1
_DELTA[RBRACE] = _DELTA[RBRACKET] = -1
_WS = b" \t\r\n"


@dataclass
class Structure:
    """The structural characters of a byte range, outside strings.

    Attributes
    ----------
    pos : ndarray of int64
        Byte offsets (absolute, in the scanned buffer) of ``{ } [ ] :``.
    kind : ndarray of uint8
        Their byte class (``LBRACE``, ``RBRACE``, ``LBRACKET``, ``RBRACKET``, ``COLON``).
    level : ndarray of int64
        Their nesting level (see the module docstring).
    quotes : ndarray of int64
        Offsets of the quotes that open or close strings (escaped quotes excluded).
    end_level : int
        The nesting level after the last byte (0 for a complete document).
    end_in_string : bool
        True when the range ends inside a string.
    min_level : int
        The lowest level reached after a closing bracket (negative: more closing than
        opening brackets).
    """

    pos: np.ndarray
    kind: np.ndarray
    level: np.ndarray
    quotes: np.ndarray
    end_level: int
    end_in_string: bool
    min_level: int


def scan(buf, start: int = 0, end: int | None = None, base_level: int = 0) -> Structure:
    """Scan ``buf[start:end]``, which must begin outside any string, at ``base_level``."""
    end = len(buf) if end is None else end
    piece = bytes(buf[start:end]) if (start or end != len(buf) or not isinstance(buf, bytes)) else buf
    cls = np.frombuffer(piece.translate(_TABLE), dtype=np.uint8)
    nz = cls.nonzero()[0]  # no temporary bool array of the buffer's size
    kind = cls[nz]
    del cls, piece
    n = len(nz)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Structure(empty, np.zeros(0, np.uint8), empty, empty, base_level, False, base_level)
    # A quote is escaped when an odd run of backslashes ends right before it.
    is_bs = kind == BACKSLASH
    quote = kind == QUOTE
    if is_bs.any():
        chain = np.zeros(n, dtype=bool)
        chain[1:] = is_bs[:-1] & (np.diff(nz) == 1)
        idx = np.arange(n)
        last_break = np.maximum.accumulate(np.where(chain, 0, idx))
        run = idx - last_break
        quote &= (run % 2) == 0
    qcount = np.cumsum(quote)
    in_string = (qcount % 2) == 1
    # A quote itself toggles; structural characters count as inside when odd.
    struct = (kind >= LBRACE) & ~in_string
    pos = nz[struct] + start
    kind_s = kind[struct]
    depth = base_level + np.cumsum(_DELTA[kind_s])
    level = depth.copy()
    closing = (kind_s == RBRACE) | (kind_s == RBRACKET)
    level[closing] += 1
    end_level = int(depth[-1]) if len(depth) else base_level
    min_level = int(depth.min()) if len(depth) else base_level
    return Structure(pos, kind_s, level, nz[quote] + start, end_level,
                     bool(qcount[-1] % 2), min(min_level, base_level))


def match_pairs(s: Structure) -> np.ndarray:
    """For every structural character, the index of its partner bracket (-1 for colons
    and unmatched brackets).

    Brackets at one level alternate open, close, open, close; a stable sort by level
    pairs them. Mismatched kinds (``[`` closed by ``}``) are reported as unmatched.
    """
    n = len(s.pos)
    partner = np.full(n, -1, dtype=np.int64)
    br = np.flatnonzero(s.kind != COLON)
    if len(br) == 0:
        return partner
    order = br[np.argsort(s.level[br], kind="stable")]
    lv = s.level[order]
    opening = (s.kind[order] == LBRACE) | (s.kind[order] == LBRACKET)
    # Walk each level's run: pair an opening with the next item if it is a closing.
    nxt_same = np.zeros(len(order), dtype=bool)
    nxt_same[:-1] = lv[:-1] == lv[1:]
    cand = np.flatnonzero(opening[:-1] & ~opening[1:] & nxt_same[:-1]) if len(order) > 1 else np.zeros(0, np.int64)
    o, c = order[cand], order[cand + 1]
    ok = ((s.kind[o] == LBRACE) & (s.kind[c] == RBRACE)) | ((s.kind[o] == LBRACKET) & (s.kind[c] == RBRACKET))
    o, c = o[ok], c[ok]
    partner[o] = c
    partner[c] = o
    return partner


def key_before(buf, s: Structure, colon_index: int) -> str | None:
    """The key string that precedes the colon at ``colon_index`` (decoded), or None."""
    import orjson

    p = s.pos[colon_index]
    j = int(np.searchsorted(s.quotes, p)) - 1
    if j < 1:
        return None
    q0, q1 = int(s.quotes[j - 1]), int(s.quotes[j])
    if bytes(buf[q1 + 1:p]).strip(_WS):
        return None
    try:
        key = orjson.loads(bytes(buf[q0:q1 + 1]))
    except orjson.JSONDecodeError:
        return None
    return key if isinstance(key, str) else None


def skip_ws(buf, i: int, end: int | None = None) -> int:
    """The first offset at or after ``i`` that is not JSON whitespace."""
    end = len(buf) if end is None else end
    while i < end and buf[i] in _WS:
        i += 1
    return i


def line_col(buf, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a byte offset, for error messages."""
    head = bytes(buf[:offset])
    line = head.count(b"\n") + 1
    return line, offset - (head.rfind(b"\n") + 1) + 1
