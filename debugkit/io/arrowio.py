"""Read append-only Arrow IPC streams that may be growing or cut off mid-record."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import MSG_TABLE_INVALID, RunDirError
from ..location import as_path
from .decompress import DecompressionLimitError, check_ipc_stream


@dataclass
class StreamRead:
    """What reading one stream file gave.

    Attributes
    ----------
    table : pyarrow.Table or None
        Every complete record batch (None when the file held no schema yet).
    truncated : bool
        True when bytes after the last complete batch were ignored.
    detail : str
        Why reading stopped early (empty when it did not).
    """

    table: object
    truncated: bool
    detail: str = ""


def read_stream(path: str | os.PathLike, schema=None) -> StreamRead:
    """Read every complete record batch of an Arrow IPC stream file.

    A half-written last batch (the writer was killed, or is writing right now) is
    skipped and reported through ``truncated``; it is never an error.

    Every batch is fully validated (``RecordBatch.validate(full=True)``: offsets inside
    their data, lengths and null counts consistent, dictionary indices in range, UTF-8)
    before anything reads its values: pyarrow trusts an IPC file's buffers, and a string
    column whose offsets lie (``[0, 2**30, 4]``) would make ``to_pandas`` read past the
    buffer and crash the process. Such a batch cannot come from a half-written file
    (that fails to parse), so it is refused, as is a column that cannot be cast to
    ``schema``.

    Raises
    ------
    RunDirError
        A batch fails validation, or a column does not convert to ``schema``.
    """
    import pyarrow as pa

    path = as_path(path)  # a str may be a URL (a run in an object store)
    size = path.stat().st_size
    if size == 0:
        return StreamRead(schema.empty_table() if schema is not None else None, False)
    with path.open("rb") as f:
        data = f.read()
    buf = pa.py_buffer(data)
    try:  # compressed batches (LZ4/ZSTD, never debugkit's own) within the decompression limits
        check_ipc_stream(buf, path)
    except DecompressionLimitError as exc:
        raise RunDirError(str(exc)) from None
    try:
        reader = pa.ipc.open_stream(buf)
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        # Not even a whole schema message: a file cut off at its very start, or not Arrow.
        return StreamRead(schema.empty_table() if schema is not None else None, True, str(exc))
    except pa.ArrowException as exc:  # a whole schema pyarrow cannot read (e.g. a 128-bit int)
        raise RunDirError(MSG_TABLE_INVALID.format(path=path, batch="(schema)", detail=exc)) from None
    batches, truncated, detail = [], False, ""
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except (pa.ArrowInvalid, OSError, ValueError) as exc:
            truncated, detail = True, str(exc)
            break
        except pa.ArrowException as exc:  # not a torn tail: a batch pyarrow cannot read at all
            raise RunDirError(MSG_TABLE_INVALID.format(path=path, batch=len(batches),
                                                       detail=exc)) from None
        try:
            batch.validate(full=True)
        except (pa.ArrowException, ValueError) as exc:
            raise RunDirError(MSG_TABLE_INVALID.format(path=path, batch=len(batches),
                                                       detail=exc)) from None
        batches.append(batch)
    try:
        table = pa.Table.from_batches(batches, schema=reader.schema)
        if schema is not None and not table.schema.equals(schema):
            table = _conform(table, schema)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise RunDirError(MSG_TABLE_INVALID.format(path=path, batch="(schema)", detail=exc)) from None
    return StreamRead(table, truncated, detail)


def _conform(table, schema):
    """Add missing columns as nulls and drop unknown ones, for forward-compatible reads."""
    import pyarrow as pa

    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        else:
            cols.append(pa.nulls(table.num_rows, type=field.type))
    return pa.Table.from_arrays(cols, schema=schema)
