"""Structure-aware mutations of an Arrow IPC stream: lies a byte flip rarely tells.

Byte flips mostly break an IPC file's flatbuffer metadata, which pyarrow refuses on its
own. The inputs that crash a reader are well-formed messages whose *buffers* lie: string
offsets past the data or going backwards, an array length longer than its buffers, a
null count that disagrees with the validity bitmap, dictionary indices outside the
dictionary, a values buffer cut short, a column whose bytes are reinterpreted as another
type. :func:`mutate_stream` rebuilds one batch of a real stream with one such lie (with
``pa.Array.from_buffers``, which does not validate) and writes the stream again; the
IPC writer copies buffers as they are, so the lie reaches the file.

Building an input touches only buffers that exist, but run it in a child process anyway
(see :mod:`tests.fuzz.isolated`): the point of these inputs is that they may crash
whatever reads them.
"""

from __future__ import annotations

import struct

#: The kinds of lie :func:`mutate_stream` draws from. The first ones rebuild a column's
#: buffers with pyarrow; the ``meta_*`` ones patch a record batch message's metadata
#: (its flatbuffer: the batch length, each column's FieldNode length and null count,
#: each buffer's offset and length), which pyarrow's own constructors would refuse to
#: build.
KINDS = ("offsets", "validity", "dictionary", "retype", "batch_count",
         "meta_batch_length", "meta_node_length", "meta_null_count", "meta_buffer_length",
         "meta_buffer_offset")


def _read_batches(data: bytes):
    import pyarrow as pa

    reader = pa.ipc.open_stream(pa.py_buffer(data))
    return reader.schema, list(reader)


def _write(schema, batches) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


def _buf(b: bytes):
    import pyarrow as pa

    return pa.py_buffer(bytes(b))


def _lie_offsets(arr, rng):
    """A string/binary column's offsets: one slot set huge, negative or backwards."""
    import pyarrow as pa

    validity, offsets, values = arr.buffers()[:3]
    n = len(arr)
    offs = bytearray(offsets.to_pybytes())
    slot = rng.randrange(n + 1)
    value = rng.choice([2**30, 2**31 - 1, -1, -(2**31), values.size + 1 if values else 1,
                        rng.randrange(2**31)])
    struct.pack_into("<i", offs, 4 * slot, value)
    if rng.random() < 0.3 and n:  # the example of issue 28: [0, 2**30, 4]
        struct.pack_into("<i", offs, 4, 2**30)
    return pa.Array.from_buffers(arr.type, n, [validity, _buf(offs), values], null_count=arr.null_count)


def _lie_validity(arr, rng):
    """A validity bitmap of random bits, with a null count that disagrees with it."""
    import pyarrow as pa

    n = len(arr)
    bufs = list(arr.buffers())
    bufs[0] = _buf(rng.randbytes((n + 7) // 8))
    return pa.Array.from_buffers(arr.type, n, bufs, null_count=rng.choice([0, n, 1]))


def _retype(arr, rng):
    """The column's buffers read as another type of the same layout."""
    import pyarrow as pa

    same = {pa.int64(): [pa.float64(), pa.timestamp("ns"), pa.uint64()],
            pa.float64(): [pa.int64(), pa.date64()],
            pa.int32(): [pa.float32(), pa.uint32(), pa.date32()],
            pa.string(): [pa.binary()],
            pa.bool_(): [pa.int8()]}
    options = same.get(arr.type)
    if not options:
        return arr
    t = rng.choice(options)
    # a binary column where a string one is expected: bytes that need not be UTF-8.
    return pa.Array.from_buffers(t, len(arr), arr.buffers(), null_count=arr.null_count)


def _dictionary(arr, rng):
    """The column dictionary-encoded, with indices outside the dictionary."""
    import numpy as np
    import pyarrow as pa

    enc = arr.dictionary_encode() if not pa.types.is_dictionary(arr.type) else arr
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    if len(idx):
        k = rng.randrange(len(idx))
        idx[k] = rng.choice([len(enc.dictionary), len(enc.dictionary) + 1000, -1, 2**31 - 1])
    indices = pa.Array.from_buffers(pa.int32(), len(idx), [None, _buf(idx.tobytes())], null_count=0)
    return pa.DictionaryArray.from_buffers(pa.dictionary(pa.int32(), enc.dictionary.type), len(idx),
                                           indices.buffers(), enc.dictionary, null_count=0)


def mutate_stream(data: bytes, rng, kind: str | None = None) -> bytes:
    """One structure-aware lie in one column of one batch of the stream ``data``.

    ``rng`` is a ``random.Random``; ``kind`` one of :data:`KINDS` (default: drawn).
    Falls back to the plain stream when the stream has no batch.
    """
    import pyarrow as pa

    schema, batches = _read_batches(data)
    if not batches:
        return data
    kind = kind or rng.choice(KINDS)
    bi = rng.randrange(len(batches))
    batch = batches[bi]
    if kind == "batch_count":  # the batch repeated and reordered: valid data, odd order
        batches = batches + [batch] * rng.randint(1, 3)
        rng.shuffle(batches)
        return _write(schema, batches)
    if kind.startswith("meta_"):
        return patch_metadata(data, rng, kind)
    strings = [i for i, f in enumerate(schema) if pa.types.is_string(f.type) or pa.types.is_binary(f.type)]
    if kind in ("offsets",) and not strings:
        kind = "validity"
    ci = rng.choice(strings) if kind == "offsets" else rng.randrange(batch.num_columns)
    col = batch.column(ci)
    make = {"offsets": _lie_offsets, "validity": _lie_validity, "dictionary": _dictionary,
            "retype": _retype}[kind]
    arr = make(col, rng)
    new = _replace(batch, ci, arr)
    if kind in ("dictionary", "retype"):  # the other batches cannot share a changed schema
        return _write(new.schema, [new])
    return _write(schema, batches[:bi] + [new] + batches[bi + 1:])


def _replace(batch, ci: int, arr):
    """``batch`` with column ``ci`` replaced by ``arr``. A column that claims more rows
    than the batch (the ``length`` lie) makes every column claim them: the batch's
    length field lies, and every other column's buffers are short of it."""
    import pyarrow as pa

    cols = [batch.column(i) for i in range(batch.num_columns)]
    n = len(arr)
    if n != batch.num_rows:
        cols = [pa.Array.from_buffers(c.type, n, c.buffers(), null_count=0) for c in cols]
    cols[ci] = arr
    fields = [batch.schema.field(i) for i in range(batch.num_columns)]
    fields[ci] = pa.field(fields[ci].name, arr.type)
    return pa.RecordBatch.from_arrays(cols, schema=pa.schema(fields))


# ------------------------------------------------------------ the IPC metadata, patched
_CONTINUATION = 0xFFFFFFFF
_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2


def _field(buf: bytes, table: int, i: int) -> int | None:
    """Position of field ``i`` of the flatbuffer table at ``table`` (None: absent)."""
    vt = table - struct.unpack_from("<i", buf, table)[0]
    vt_size = struct.unpack_from("<H", buf, vt)[0]
    if 4 + 2 * i + 2 > vt_size:
        return None
    off = struct.unpack_from("<H", buf, vt + 4 + 2 * i)[0]
    return table + off if off else None


def _deref(buf: bytes, pos: int) -> int:
    return pos + struct.unpack_from("<I", buf, pos)[0]


def batch_metadata(data: bytes) -> list[dict]:
    """Where each record batch message keeps its numbers, as absolute offsets into
    ``data``: ``length`` (the batch's row count, or None when it is absent), ``nodes``
    (per column: the offsets of its FieldNode's length and null count) and ``buffers``
    (per buffer: the offsets of its offset and length), for record batches and the
    record batch inside a dictionary batch."""
    out, pos = [], 0
    while pos + 8 <= len(data):
        (word,) = struct.unpack_from("<I", data, pos)
        if word == _CONTINUATION:
            pos += 4
        (size,) = struct.unpack_from("<i", data, pos)
        pos += 4
        if size <= 0:
            break
        meta = data[pos:pos + size]
        base = pos
        root = _deref(meta, 0)
        kind_at = _field(meta, root, 1)
        kind = meta[kind_at] if kind_at is not None else 0
        body_at = _field(meta, root, 3)
        body = struct.unpack_from("<q", meta, body_at)[0] if body_at is not None else 0
        header_at = _field(meta, root, 2)
        if header_at is not None and kind in (_RECORD_BATCH, _DICTIONARY_BATCH):
            rb = _deref(meta, header_at)
            if kind == _DICTIONARY_BATCH:
                data_at = _field(meta, rb, 1)
                rb = _deref(meta, data_at) if data_at is not None else None
            if rb is not None:
                rec = {"kind": kind, "length": None, "nodes": [], "buffers": []}
                la = _field(meta, rb, 0)
                rec["length"] = base + la if la is not None else None
                for i, key, width in ((1, "nodes", 16), (2, "buffers", 16)):
                    fa = _field(meta, rb, i)
                    if fa is None:
                        continue
                    vec = _deref(meta, fa)
                    (n,) = struct.unpack_from("<I", meta, vec)
                    rec[key] = [(base + vec + 4 + width * j, base + vec + 12 + width * j) for j in range(n)]
                out.append(rec)
        pos += size + body
    return out


def patch_metadata(data: bytes, rng, kind: str) -> bytes:
    """One number of one record batch message's metadata set to a lie (see KINDS)."""
    metas = [m for m in batch_metadata(data) if m["nodes"]]
    if not metas:
        return data
    m = rng.choice(metas)
    b = bytearray(data)

    def put(at, value):
        struct.pack_into("<q", b, at, value)

    def get(at):
        return struct.unpack_from("<q", b, at)[0]

    big = [1, 7, 1000, 2**20, 2**31 - 1, 2**40, -1, -(2**62)]
    if kind == "meta_batch_length" and m["length"] is not None:
        put(m["length"], get(m["length"]) + rng.choice(big))
    elif kind == "meta_node_length" or (kind == "meta_batch_length"):
        at = rng.choice(m["nodes"])[0]
        put(at, get(at) + rng.choice(big))
    elif kind == "meta_null_count":
        length_at, nulls_at = rng.choice(m["nodes"])
        put(nulls_at, rng.choice([get(length_at), get(length_at) + 1, 1, -1, 2**31]))
    elif kind == "meta_buffer_length" and m["buffers"]:
        at = rng.choice(m["buffers"])[1]
        put(at, rng.choice([0, max(0, get(at) - 8), get(at) // 2, get(at) + 8, 2**31, -8]))
    elif kind == "meta_buffer_offset" and m["buffers"]:
        at = rng.choice(m["buffers"])[0]
        put(at, rng.choice([0, get(at) + 8, get(at) - 8, 2**31, -8, 2**62]))
    return bytes(b)
