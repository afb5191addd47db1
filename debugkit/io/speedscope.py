"""Read py-spy speedscope JSON into a :class:`~debugkit.io.profile_types.SampledProfile`.

The ``samples`` arrays are cut into per-sample byte slices found by
:mod:`debugkit.io.jsonscan` (the fast scanner below), deduplicated as bytes, and only
the distinct stacks are parsed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ProfileFileError
from . import jsonscan
from .profile_types import _PROCESS_FRAME, MSG_NO_SAMPLES, SampledProfile, _Builder, _parse_tid
from .profiles import MSG_BAD_JSON, MSG_EMPTY_FILE, MSG_SCHEMA, MSG_TRUNCATED, read_bytes

MSG_EVENTED = ("{path}: profiles[{i}] is an 'evented' speedscope profile; debugkit reads "
               "'sampled' profiles (what py-spy writes)")
# py-spy names each speedscope profile ``[Process PID ]Thread TID "name"``; TID is the OS
# thread id in decimal on Linux and Windows, and the pthread id in hex on macOS
# (``Thread 0x1FA08F100 "MainThread"``: py-spy's ``StackTrace::format_threadid``).
_SPEEDSCOPE_THREAD = re.compile(
    r'^(?:Process (?P<pid>\d+) )?Thread (?P<tid>0[xX][0-9a-fA-F]+|\d+)(?: "(?P<name>.*)")?$', re.S)
_TIME_UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6, "nanoseconds": 1e-9}


# ---------------------------------------------------------------------------- speedscope
def read_speedscope(path: str | os.PathLike, data: bytes | None = None,
                    block: int = 200_000, *, drop_pids=(), keep_pids=()) -> SampledProfile:
    """Read a speedscope JSON file of ``sampled`` profiles (py-spy's ``--format speedscope``:
    one profile per thread).

    The ``samples`` and ``weights`` arrays are found without parsing them: in a compact
    file (py-spy's) by their keys, checked byte by byte; otherwise with
    :func:`jsonscan.scan`, which finds every structural character. Samples are then
    deduplicated as bytes in blocks of ``block``, and only the distinct stacks are parsed;
    the rest of the document (frames, names) is small and parsed with orjson.
    """
    import orjson

    data = read_bytes(path) if data is None else data
    if not data.strip():
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    places, doc = None, None
    found = _locate_compact(data)
    if found is not None:
        try:
            doc = orjson.loads(found.skeleton)
            places = _compact_places(doc, found, data)
        except orjson.JSONDecodeError:
            places = None
    if places is None:
        skeleton, samples_of, weights_of = _locate_scanned(data, path, block)
        try:
            doc = orjson.loads(skeleton)
        except orjson.JSONDecodeError as exc:
            raise ProfileFileError(MSG_BAD_JSON.format(path=path, detail=exc)) from exc
    else:
        samples_of, weights_of = places
    if not isinstance(doc, dict):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="(root)", detail="expected a JSON object"))
    frames_doc = (doc.get("shared") or {}).get("frames") if isinstance(doc.get("shared"), dict) else None
    if not isinstance(frames_doc, list):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="shared.frames",
                                             detail="missing or not a list"))
    profiles = doc.get("profiles")
    if not isinstance(profiles, list) or not profiles:
        raise ProfileFileError(MSG_NO_SAMPLES.format(path=path))
    b = _Builder()
    b.drop_pids = tuple(drop_pids)
    b.keep_pids = tuple(keep_pids)
    # speedscope frame index -> our frame id; process pseudo-frames -> -1 - index.
    ss_map = np.empty(len(frames_doc), dtype=np.int64)
    pseudo: dict[int, tuple[int, str]] = {}
    for i, fr in enumerate(frames_doc):
        if not isinstance(fr, dict) or not isinstance(fr.get("name"), str):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=f"shared.frames[{i}]",
                                                 detail="expected an object with a string 'name'"))
        m = _PROCESS_FRAME.match(fr["name"])
        if m and not fr.get("file") and not fr.get("line"):
            pseudo[i] = (int(m.group("pid")), m.group("cmd"))
            ss_map[i] = -1
            continue
        line = fr.get("line")
        ss_map[i] = b.frame(fr["name"], str(fr.get("file") or ""),
                            int(line) if isinstance(line, (int, float)) and line > 0 else None)
    n_frames = len(frames_doc)
    durations, all_w = [], []
    unit = None
    for i, prof in enumerate(profiles):
        where = f"profiles[{i}]"
        if not isinstance(prof, dict):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where, detail="not an object"))
        if prof.get("type") == "evented":
            raise ProfileFileError(MSG_EVENTED.format(path=path, i=i))
        if prof.get("type") != "sampled":
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".type",
                                                 detail=f"{prof.get('type')!r}, expected 'sampled'"))
        punit = str(prof.get("unit") or "none")
        unit = unit or punit
        scale = _TIME_UNITS.get(punit)
        if i not in samples_of:
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="missing or not a list of stacks"))
        n, blocks = samples_of[i]
        if i in weights_of:
            wo, wc = weights_of[i]
            w = _read_numbers(data, wo, wc, path, where + ".weights")
            if w.ndim != 1 or len(w) != n:
                raise ProfileFileError(MSG_SCHEMA.format(
                    path=path, where=where,
                    detail=f"{n} samples but {len(w) if w.ndim == 1 else '?'} weights"))
        else:
            w = np.ones(n, dtype=np.float64)
            scale = None
        local: dict[bytes, int] = {}
        ids = np.empty(n, dtype=np.int64)
        a = 0
        for parts in blocks():
            z = a + len(parts)
            ids[a:z] = _dedup_block(parts, local)
            a = z
        if a != n:
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="expected a list of lists of frame indices"))
        cnt = np.bincount(ids, minlength=len(local))
        wsum = np.bincount(ids, weights=w * (scale if scale else 1.0), minlength=len(local))
        m = _SPEEDSCOPE_THREAD.match(str(prof.get("name") or ""))
        pid = int(m.group("pid")) if m and m.group("pid") else None
        tid = _parse_tid(m.group("tid")) if m else None
        tname = (m.group("name") if m else str(prof.get("name") or f"profile {i}")) or ""
        parsed, chain = _parse_stacks(list(local), ss_map, pseudo, n_frames, path, where)
        chain = chain or []
        if pid is None and chain:
            pid = chain[-1][0]
        th = b.thread(("profile", i), pid=pid, tid=tid, name=tname,
                      process=chain[-1][1] if chain else "", chain=[p for p, _ in chain],
                      chain_cmds=chain)
        for j, st in enumerate(parsed):
            b.add(th, b.stack(st), int(cnt[j]), float(wsum[j]))
        if scale:
            sv, ev = prof.get("startValue"), prof.get("endValue")
            if isinstance(sv, (int, float)) and isinstance(ev, (int, float)):
                durations.append((ev - sv) * scale)
            all_w.append(w * scale)
    rate = None
    if all_w:
        ws = np.concatenate(all_w)
        if len(ws) and np.median(ws) > 0:
            rate = float(round(1.0 / float(np.median(ws)), 3))
    meta = {"exporter": doc.get("exporter"), "name": doc.get("name"), "unit": unit,
            "duration_s": max(durations) if durations else None, "rate_hz": rate}
    return b.build("speedscope", meta, path)




def _dedup_block(parts: list, local: dict):
    """Ids of a block's samples (bytes), new distinct ones added to ``local``.

    pandas' hash table factorizes the block in C; its few distinct stacks then get ids
    that hold across blocks."""
    import pandas as pd

    arr = np.empty(len(parts), dtype=object)
    arr[:] = parts
    codes, uniq = pd.factorize(arr)
    gid = np.fromiter((local.setdefault(k, len(local)) for k in uniq.tolist()),
                      dtype=np.int64, count=len(uniq))
    return gid[codes]


_SAMPLES_KEY = b'"samples":['
_WEIGHTS_KEY = b'"weights":['
_STACK_BYTES = b"0123456789-,[]"
_CHUNK = 8 << 20


@dataclass
class _Compact:
    skeleton: bytes
    samples: list  # (o, c): data[o] is the array's '[', data[c - 1] its ']'
    counts: list   # samples per array
    weights: list  # (o, c) likewise


def _locate_compact(data: bytes) -> _Compact | None:
    """The ``samples``/``weights`` arrays of a compact speedscope file (no blanks in or
    around them, as py-spy writes it), found by their keys; None when the file is not
    like that (the caller then scans its whole structure).

    A key cannot occur inside a JSON string (its quotes would be escaped there). Every
    byte of a samples array is checked to be a digit, sign, comma or bracket, and its
    brackets to pair up as ``[[..],..,[..]]``, so an array is cut exactly where it ends;
    :func:`_compact_places` then checks that the arrays are the profiles' own.
    """
    regions = []  # (o, c, key)
    at = data.find(_SAMPLES_KEY)
    while at >= 0:
        o = at + len(_SAMPLES_KEY) - 1
        if data[o + 1:o + 2] == b"]":
            c = o + 2
        else:
            e = data.find(b"]]", o)
            if e < 0:
                return None
            c = e + 2
        regions.append((o, c, _SAMPLES_KEY))
        at = data.find(_SAMPLES_KEY, c)
    # Weights arrays lie between the samples arrays: search only there.
    gaps = [0] + [x for o, c, _ in regions for x in (o, c)] + [len(data)]
    for a, z in zip(gaps[::2], gaps[1::2]):
        at = data.find(_WEIGHTS_KEY, a, z)
        while at >= 0:
            o = at + len(_WEIGHTS_KEY) - 1
            e = data.find(b"]", o, z)
            if e < 0:
                return None
            regions.append((o, e + 1, _WEIGHTS_KEY))
            at = data.find(_WEIGHTS_KEY, e + 1, z)
    if not regions:
        return None
    regions.sort()
    if any(y[0] < x[1] for x, y in zip(regions, regions[1:])):
        return None
    pieces, last, samples, counts, weights = [], 0, [], [], []
    for o, c, key in regions:
        pieces.append(data[last:o])
        pieces.append(b"null")
        last = c
        if key is _WEIGHTS_KEY:
            weights.append((o, c))
            continue
        for a in range(o, c, _CHUNK):  # only digits, signs, commas, brackets (bounded copies)
            if data[a:min(c, a + _CHUNK)].translate(None, _STACK_BYTES):
                return None
        if c - o == 2:  # "[]"
            samples.append((o, c))
            counts.append(0)
            continue
        if data[o + 1:o + 2] != b"[":
            return None
        # One '[' and one ']' per sample: a nested list or a scalar between samples
        # then shows as a count of '],[' splits that differs (checked by the reader).
        n = data.count(b"[", o + 1, c - 1)
        if data.count(b"]", o + 1, c - 1) != n:
            return None
        samples.append((o, c))
        counts.append(n)
    pieces.append(data[last:])
    return _Compact(b"".join(pieces), samples, counts, weights)


def _compact_places(doc, found: _Compact, data: bytes):
    """``(samples_of, weights_of)`` when the arrays ``found`` are, in order, the profiles'
    ``samples``/``weights`` of the parsed skeleton ``doc``; None otherwise."""
    profiles = doc.get("profiles") if isinstance(doc, dict) else None
    if not isinstance(profiles, list):
        return None
    if any(isinstance(p, dict) and any(k in p and p[k] is not None for k in ("samples", "weights"))
           for p in profiles):
        return None  # an array the key search did not find (blanks around it): scan
    s_idx = [i for i, p in enumerate(profiles) if isinstance(p, dict) and "samples" in p
             and p["samples"] is None]
    w_idx = [i for i, p in enumerate(profiles) if isinstance(p, dict) and "weights" in p
             and p["weights"] is None]
    sk = found.skeleton
    if len(s_idx) != len(found.samples) or len(w_idx) != len(found.weights) or \
            sk.count(b'"samples":null') != len(s_idx) or sk.count(b'"weights":null') != len(w_idx):
        return None  # an array elsewhere in the document, or a null of the user's own
    samples_of = {}
    for i, (o, c), n in zip(s_idx, found.samples, found.counts):
        def blocks(start=o + 2, end=c - 2, n=n):
            """Blocks of samples' bytes (between '[' and ']'), cut at '],[' about every
            _CHUNK bytes."""
            a = start
            while n and a <= end:
                z = min(end, a + _CHUNK)
                if z < end:
                    cut = data.rfind(b"],[", a, z)
                    if cut <= a:
                        cut = data.find(b"],[", z, end)
                    z = end if cut < 0 else cut
                yield data[a:z].split(b"],[")
                a = z + 3
        samples_of[i] = (n, blocks)
    weights_of = {i: (o, c - 1) for i, (o, c) in zip(w_idx, found.weights)}
    return samples_of, weights_of


def _locate_scanned(data: bytes, path, block: int):
    """(skeleton, samples_of, weights_of) found with :func:`jsonscan.scan`."""
    s = jsonscan.scan(data)
    _check_complete(data, s, path)
    partner = jsonscan.match_pairs(s)
    root = _root_keys(data, s, partner, path)
    if "profiles" not in root or s.kind[root["profiles"]] != jsonscan.LBRACKET:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="(root)",
                                             detail="no 'profiles' array (not a speedscope file?)"))
    p_open = root["profiles"]
    p_close = partner[p_open]
    lo, hi = s.pos[p_open], s.pos[p_close]
    # Profile objects: '{' at level 3 inside the profiles array.
    in_range = (s.pos > lo) & (s.pos < hi)
    prof_open = np.flatnonzero(in_range & (s.kind == jsonscan.LBRACE) & (s.level == 3))
    colons = np.flatnonzero(in_range & (s.kind == jsonscan.COLON) & (s.level == 3))
    big: dict[tuple[int, str], tuple[int, int]] = {}
    for c in colons:
        key = jsonscan.key_before(data, s, int(c))
        if key not in ("samples", "weights") or c + 1 >= len(s.pos):
            continue
        nxt = c + 1
        if s.kind[nxt] != jsonscan.LBRACKET or s.pos[nxt] != jsonscan.skip_ws(data, int(s.pos[c]) + 1):
            continue
        k = int(np.searchsorted(s.pos[prof_open], s.pos[c])) - 1
        big[(k, key)] = (int(nxt), int(partner[nxt]))
    # The skeleton: the document with those arrays replaced by null.
    pieces, last = [], 0
    for (_, _), (o, c) in sorted(big.items(), key=lambda kv: s.pos[kv[1][0]]):
        pieces.append(data[last:s.pos[o]])
        pieces.append(b"null")
        last = int(s.pos[c]) + 1
    pieces.append(data[last:])
    # Every sample's '[': level 5 (root 1, profiles 2, a profile 3, its samples 4).
    inner_all = np.flatnonzero((s.kind == jsonscan.LBRACKET) & (s.level == 5))
    inner_pos = s.pos[inner_all]
    samples_of, weights_of = {}, {}
    for (i, key), (so, sc) in big.items():
        if key == "weights":
            weights_of[i] = (int(s.pos[so]), int(s.pos[sc]))
            continue
        where = f"profiles[{i}]"
        lo_i, hi_i = np.searchsorted(inner_pos, [s.pos[so], s.pos[sc]])
        inner_open = inner_all[lo_i:hi_i]
        inner_close = partner[inner_open]
        if (inner_close < 0).any():
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="a sample is not a list of frame indices"))
        if _has_scalars(data, s, so, sc, inner_open, inner_close):
            raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                                 detail="expected a list of lists of frame indices"))
        starts = s.pos[inner_open] + 1
        ends = s.pos[inner_close]
        n = len(inner_open)

        def blocks(starts=starts, ends=ends, n=n):
            for a in range(0, n, block):
                z = min(n, a + block)
                # C-level loops only. Compact JSON ('],[' between samples) splits in one
                # call; otherwise slice at the scanned positions.
                parts = data[starts[a]:ends[z - 1]].split(b"],[")
                if len(parts) != z - a:
                    parts = list(map(data.__getitem__, map(slice, starts[a:z].tolist(), ends[a:z].tolist())))
                yield parts
        samples_of[i] = (n, blocks)
    return b"".join(pieces), samples_of, weights_of


def _read_numbers(data: bytes, o: int, c: int, path, where: str) -> np.ndarray:
    """The JSON array of numbers at ``data[o:c+1]`` as float64."""
    import orjson

    try:
        w = np.asarray(orjson.loads(data[o:c + 1]), dtype=np.float64)
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where,
                                             detail=f"not a list of numbers ({exc})")) from exc
    if w.ndim != 1:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where, detail="not a flat list of numbers"))
    return w


def _parse_stacks(raw_stacks: list[bytes], ss_map, pseudo, n_frames, path, where):
    """Parse distinct sample byte strings into tuples of our frame ids (pseudo-frames
    removed), and the process chain the first stack carries."""
    import itertools

    import orjson

    try:  # one parse for all distinct stacks
        lists = orjson.loads(b"[[" + b"],[".join(raw_stacks) + b"]]") if raw_stacks else []
    except orjson.JSONDecodeError as exc:
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail=f"unreadable stack ({exc})")) from exc
    if len(lists) != len(raw_stacks):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail="a sample is not a flat list of frame indices"))
    lens = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    # Only digits, signs, commas and blanks in the raw stacks means only integers (a
    # float, a string, true/false/null all bring another byte); the per-value check runs
    # only when that fails, to name the bad value.
    ints = not b"".join(raw_stacks).translate(None, b"0123456789-, \t\r\n") or \
        all(type(v) is int for v in itertools.chain.from_iterable(lists))
    if not ints:
        bad = next(v for v in itertools.chain.from_iterable(lists) if type(v) is not int)
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail=f"frame index {bad!r} is not an integer"))
    flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))
    if len(flat) and (flat.min() < 0 or flat.max() >= n_frames):
        bad = int(flat[(flat < 0) | (flat >= n_frames)][0])
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where=where + ".samples",
                                             detail=f"frame index {bad} outside 0..{n_frames - 1}"))
    mapped = ss_map[flat] if len(flat) else flat
    chain = None
    if pseudo and len(flat):
        first = np.flatnonzero(mapped < 0)
        if len(first):
            k = int(np.searchsorted(np.cumsum(lens), first[0], side="right"))
            a = int(lens[:k].sum())
            chain = [pseudo[int(v)] for v in flat[a:a + lens[k]] if int(v) in pseudo]
    keep = mapped >= 0
    ends = np.cumsum(lens)
    cs = np.zeros(len(flat) + 1, dtype=np.int64)
    np.cumsum(keep, out=cs[1:])
    kept_lens = cs[ends] - cs[ends - lens]
    vals = mapped[keep].tolist()
    out, a = [], 0
    for n in kept_lens.tolist():
        out.append(tuple(vals[a:a + n]))
        a += n
    return out, chain or []


def _has_scalars(data, s, so, sc, inner_open, inner_close) -> bool:
    """True when the samples array holds anything but lists separated by single commas."""
    gaps_start = np.concatenate([[s.pos[so] + 1], s.pos[inner_close] + 1]).astype(np.int64)
    gaps_end = np.concatenate([s.pos[inner_open], [s.pos[sc]]]).astype(np.int64)
    lengths = gaps_end - gaps_start
    total = int(lengths.sum())
    if total == 0:
        return len(inner_open) > 1  # two lists with no comma between them
    arr = np.frombuffer(data, dtype=np.uint8)
    first = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    idx = np.repeat(gaps_start - first, lengths) + np.arange(total)
    g = arr[idx]
    comma = g == ord(",")
    ws = (g == 32) | (g == 9) | (g == 10) | (g == 13)
    if not (comma | ws).all():
        return True
    cs = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(comma, out=cs[1:])
    commas = cs[first + lengths] - cs[first]
    want = np.ones(len(lengths), dtype=np.int64)
    want[0] = want[-1] = 0
    return not np.array_equal(commas, want)


def _check_complete(data, s: jsonscan.Structure, path) -> None:
    first = jsonscan.skip_ws(data, 0)
    if first >= len(data):
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    if s.end_in_string or s.end_level > 0:
        line, _ = jsonscan.line_col(data, len(data))
        detail = " inside a string" if s.end_in_string else f" with {s.end_level} bracket(s) still open"
        raise ProfileFileError(MSG_TRUNCATED.format(path=path, offset=len(data), line=line, detail=detail))
    if s.min_level < 0:
        raise ProfileFileError(MSG_BAD_JSON.format(path=path, detail="more closing than opening brackets"))


def _root_keys(data, s: jsonscan.Structure, partner, path) -> dict[str, int]:
    """Key -> index of the value's opening bracket (or -1 for a scalar) of the root object."""
    if not len(s.pos) or s.kind[0] != jsonscan.LBRACE or s.pos[0] != jsonscan.skip_ws(data, 0):
        raise ProfileFileError(MSG_SCHEMA.format(path=path, where="(root)", detail="expected a JSON object"))
    out = {}
    for c in np.flatnonzero((s.kind == jsonscan.COLON) & (s.level == 1)):
        key = jsonscan.key_before(data, s, int(c))
        if key is None:
            continue
        nxt = int(c) + 1
        opens = nxt < len(s.pos) and s.kind[nxt] in (jsonscan.LBRACE, jsonscan.LBRACKET) \
            and s.pos[nxt] == jsonscan.skip_ws(data, int(s.pos[c]) + 1)
        out[key] = nxt if opens else -1
    return out
