"""Bounded decompression of the gzip files a run carries (profiles, traces).

A run is a stranger's: a 600 KB ``.json.gz`` can unpack to 512 MiB of JSON. Every gzip
read goes through :func:`open_maybe_gzip` / :func:`read_maybe_gzip`, which count the
bytes actually inflated while streaming (not what the header claims) and stop at

- ``max_bytes``: ``$DEBUGKIT_MAX_UNPACKED_MB`` (default 1,024 MiB) per file, and
- ``max_ratio``: 200x the file's compressed size (the upload unpacker's zip limit),
  checked once the output passes :data:`RATIO_FLOOR` (8 MiB), so a small file that
  compresses well (a speedscope profile of one repeated stack) still opens. The
  bundled samples' traces and profiles compress 13x to 45x.

A refusal is remembered for the file (its path, size and modification time), so each
view, rerun or visitor after the first is refused at once instead of inflating the
file again (:func:`check_not_refused`); a changed file is read again.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import FileLimitError

GZIP_MAGIC = b"\x1f\x8b"
#: Below this many inflated bytes the ratio is not checked (a small file cannot hurt).
RATIO_FLOOR = 8 << 20
CHUNK = 1 << 20

MSG_UNPACKS_TOO_BIG = ("{path}: refused: it unpacks to more than {limit} bytes "
                       "(DEBUGKIT_MAX_UNPACKED_MB); a compressed file that large is not read")
MSG_UNPACKS_RATIO = ("{path}: refused: it unpacks more than {ratio}x its {size} bytes "
                     "(limit {ratio}x); this looks like a compression bomb")
MSG_BAD_SETTING = "{name}={value!r}: expected a whole number of MiB > 0"


class DecompressionLimitError(FileLimitError):
    """A compressed file that unpacks past the size or ratio limit."""


@dataclass(frozen=True)
class DecompressLimits:
    """Bounds on one compressed file's inflated bytes (see the module docstring)."""

    max_bytes: int = 1 << 30
    max_ratio: int = 200

    @classmethod
    def from_env(cls) -> DecompressLimits:
        value = os.environ.get("DEBUGKIT_MAX_UNPACKED_MB")
        if value is None or not value.strip():
            return cls()
        if not value.strip().isdigit() or int(value) <= 0:
            raise FileLimitError(MSG_BAD_SETTING.format(name="DEBUGKIT_MAX_UNPACKED_MB", value=value[:40]))
        return cls(max_bytes=int(value) << 20)


# ---------------------------------------------------------------------------- refusals
_REFUSED: OrderedDict[tuple, str] = OrderedDict()
_REFUSED_MAX = 1024
_LOCK = threading.Lock()


def file_key(path) -> tuple | None:
    """``(path, size, mtime)`` of a local path or an fsspec ``UPath``; None if unknown."""
    try:
        st = path.stat() if _is_upath(path) else os.stat(path)
    except (OSError, ValueError, TypeError):
        return None
    mtime = getattr(st, "st_mtime_ns", None) or getattr(st, "st_mtime", None)
    return (str(path), getattr(st, "st_size", None), mtime)


def check_not_refused(key: tuple | None) -> None:
    """Raise the remembered refusal of this file (same path, size and mtime), if any."""
    if key is None:
        return
    with _LOCK:
        msg = _REFUSED.get(key)
        if msg is not None:
            _REFUSED.move_to_end(key)
    if msg is not None:
        raise DecompressionLimitError(msg)


def remember_refusal(key: tuple | None, message: str) -> None:
    if key is None:
        return
    with _LOCK:
        _REFUSED[key] = message
        _REFUSED.move_to_end(key)
        while len(_REFUSED) > _REFUSED_MAX:
            _REFUSED.popitem(last=False)


def forget_refusals() -> None:
    """Forget every remembered refusal (tests; an operator who raised a limit restarts)."""
    with _LOCK:
        _REFUSED.clear()


# ---------------------------------------------------------------------------- reading
class _BoundedGzip(io.RawIOBase):
    """A raw stream over a gzip file's inflated bytes that stops at the limits."""

    def __init__(self, f: BinaryIO, path, size: int | None, limits: DecompressLimits, key):
        super().__init__()
        self._f = f
        self._gz = gzip.GzipFile(fileobj=f, mode="rb")
        self._path, self._size, self._limits, self._key = path, size, limits, key
        self._n = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        view = memoryview(b)[:CHUNK]  # inflate at most a chunk past the limit
        n = self._gz.readinto(view)
        self._n += n
        self._check()
        return n

    def _check(self) -> None:
        lim = self._limits
        msg = None
        if self._n > lim.max_bytes:
            msg = MSG_UNPACKS_TOO_BIG.format(path=self._path, limit=lim.max_bytes)
        elif self._size and self._n > max(RATIO_FLOOR, lim.max_ratio * self._size):
            msg = MSG_UNPACKS_RATIO.format(path=self._path, ratio=lim.max_ratio, size=self._size)
        if msg is not None:
            remember_refusal(self._key, msg)
            raise DecompressionLimitError(msg)

    def close(self) -> None:
        if not self.closed:
            try:
                self._gz.close()
            finally:
                self._f.close()
        super().close()


def _is_upath(path) -> bool:
    return type(path).__module__.split(".")[0] == "upath"


def _open(path) -> BinaryIO:
    return path.open("rb") if _is_upath(path) else open(path, "rb")


def wrap_maybe_gzip(f: BinaryIO, path, *, key: tuple | None = None,
                    limits: DecompressLimits | None = None) -> BinaryIO:
    """``f`` itself (rewound) for a plain file, or a bounded stream of its inflated bytes
    for a gzip one. ``f`` must be seekable and is closed with the returned stream."""
    head = f.read(2)
    f.seek(0)
    if head != GZIP_MAGIC:
        return f
    key = key if key is not None else file_key(path)
    check_not_refused(key)
    size = key[1] if key is not None else None
    if size is None:
        try:
            size = f.seek(0, os.SEEK_END)
        finally:
            f.seek(0)
    raw = _BoundedGzip(f, path, size, limits or DecompressLimits.from_env(), key)
    return io.BufferedReader(raw, buffer_size=CHUNK)


def open_maybe_gzip(path, *, limits: DecompressLimits | None = None) -> BinaryIO:
    """A binary stream over the file's bytes, inflated (within the limits) when it is
    gzip-compressed. ``path`` is a local path or an fsspec ``UPath``."""
    key = file_key(path)
    check_not_refused(key)
    return wrap_maybe_gzip(_open(path), path, key=key, limits=limits)


def read_maybe_gzip(path, *, limits: DecompressLimits | None = None) -> bytes:
    """The file's bytes, inflated (within the limits) when it is gzip-compressed.

    Raises
    ------
    DecompressionLimitError
        It inflates past ``$DEBUGKIT_MAX_UNPACKED_MB`` or 200x its size (now or before).
    OSError, EOFError, zlib.error
        A broken gzip stream (the caller words its own message).
    """
    with open_maybe_gzip(path, limits=limits) as f:
        return f.read()


def gunzip_bytes(data: bytes, what, *, limits: DecompressLimits | None = None) -> bytes:
    """``data`` inflated within the limits when it is gzip, else ``data`` itself."""
    if data[:2] != GZIP_MAGIC:
        return data
    raw = _BoundedGzip(io.BytesIO(data), what, len(data), limits or DecompressLimits.from_env(), None)
    with io.BufferedReader(raw, buffer_size=CHUNK) as f:
        return f.read()


__all__ = ["DecompressLimits", "DecompressionLimitError", "GZIP_MAGIC", "MSG_UNPACKS_RATIO",
           "MSG_UNPACKS_TOO_BIG", "check_not_refused", "file_key", "forget_refusals",
           "gunzip_bytes", "open_maybe_gzip", "read_maybe_gzip", "remember_refusal",
           "wrap_maybe_gzip"]


# ---------------------------------------------------------------------------- Arrow IPC
MSG_IPC_BOMB = ("{path}: refused: record batch {batch} unpacks its {size} compressed bytes to "
                "{unpacked} bytes ({why}); this looks like a compression bomb")
_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2  # flatbuffers MessageHeader union tags


_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_I64 = struct.Struct("<q")
_BUFFER = struct.Struct("<qq")


def _ipc_unpacked_bytes(meta, body) -> int | None:
    """The bytes a compressed record (or dictionary) batch message inflates to (the sum
    of its buffers' stated uncompressed lengths), or None for an uncompressed one.

    Reads the message's flatbuffers metadata (``Message.header`` -> ``RecordBatch``:
    field 2 ``buffers``, field 3 ``compression``) as Arrow's ``Message.fbs`` defines it.
    Written out flat: it runs for every batch of every stream read."""
    u16, u32, i32 = _U16.unpack_from, _U32.unpack_from, _I32.unpack_from
    root = u32(meta, 0)[0]
    vt = root - i32(meta, root)[0]
    vt_size = u16(meta, vt)[0]
    if vt_size < 10:  # no header field
        return None
    kind_off, header_off = u16(meta, vt + 6)[0], u16(meta, vt + 8)[0]
    if not kind_off or not header_off:
        return None
    kind = meta[root + kind_off]
    if kind != _RECORD_BATCH and kind != _DICTIONARY_BATCH:
        return None
    at = root + header_off
    table = at + u32(meta, at)[0]
    if kind == _DICTIONARY_BATCH:  # DictionaryBatch.data (field 1) is the RecordBatch
        dvt = table - i32(meta, table)[0]
        if u16(meta, dvt)[0] < 8 or not u16(meta, dvt + 6)[0]:
            return None
        at = table + u16(meta, dvt + 6)[0]
        table = at + u32(meta, at)[0]
    hvt = table - i32(meta, table)[0]
    hvt_size = u16(meta, hvt)[0]
    if hvt_size < 12 or not u16(meta, hvt + 10)[0]:  # no BodyCompression: stored as is
        return None
    buffers_off = u16(meta, hvt + 8)[0]
    if not buffers_off:
        return 0
    at = table + buffers_off
    vec = at + u32(meta, at)[0]
    n = u32(meta, vec)[0]
    raw = memoryview(body)
    total = 0
    for i in range(n):
        offset, length = _BUFFER.unpack_from(meta, vec + 4 + 16 * i)
        if length < 8 or offset < 0 or offset + 8 > len(raw):
            continue  # empty, or out of the body: pyarrow refuses it without inflating
        stated = _I64.unpack_from(raw, offset)[0]
        total += length - 8 if stated < 0 else stated  # -1: stored uncompressed
    return total


def check_ipc_stream(buf, path, *, limits: DecompressLimits | None = None) -> None:
    """Refuse an Arrow IPC stream whose compressed record batches (LZ4 or ZSTD buffer
    compression, which pyarrow inflates as it reads) would unpack past the limits,
    before any batch is read. Uncompressed batches (debugkit's writer's) cost a glance at
    their metadata. A message cut short ends the check (the reader reports it).

    Raises
    ------
    DecompressionLimitError
        A batch states more than ``$DEBUGKIT_MAX_UNPACKED_MB`` in all, or more than 200x
        its compressed bytes past 8 MiB.
    """
    import pyarrow as pa

    limits = limits or DecompressLimits.from_env()
    try:
        reader = pa.ipc.MessageReader.open_stream(buf)
    except (pa.ArrowInvalid, OSError, ValueError):
        return
    total = 0
    batch = 0
    while True:
        try:
            msg = reader.read_next_message()
        except (StopIteration, pa.ArrowInvalid, OSError, ValueError):
            return
        if msg is None:
            return
        if msg.type not in ("record batch", "dictionary"):
            continue
        body = msg.body if msg.body is not None else b""
        try:
            unpacked = _ipc_unpacked_bytes(msg.metadata, body)
        except (struct.error, IndexError, ValueError):
            unpacked = None  # malformed metadata: pyarrow refuses it when it reads the batch
        if unpacked is not None:
            size = len(body)
            total += unpacked
            why = None
            if unpacked > max(RATIO_FLOOR, limits.max_ratio * size):
                why = f"over {limits.max_ratio}x"
            elif total > limits.max_bytes:
                why = f"the stream over {limits.max_bytes} bytes, DEBUGKIT_MAX_UNPACKED_MB"
            if why:
                raise DecompressionLimitError(MSG_IPC_BOMB.format(
                    path=path, batch=batch, size=size, unpacked=unpacked, why=why))
        batch += msg.type == "record batch"


# ---------------------------------------------------------------------------- Parquet
def _value_bytes(t) -> int:
    """Bytes one value of Arrow type ``t`` takes once read (at least; offsets for strings)."""
    try:
        return max(1, t.bit_width // 8)
    except ValueError:  # not fixed-width: strings, lists, structs ...
        return 4


MSG_PARQUET_BOMB = ("{path}: refused: its metadata states {rows} rows of {columns} columns, at "
                    "least {unpacked} bytes once read, from {size} bytes ({why}); this looks like "
                    "a compression bomb")


def check_parquet(path, *, limits: DecompressLimits | None = None) -> None:
    """Refuse a Parquet file whose footer states more data than the limits allow, before
    any column is read: the column chunks' uncompressed sizes, and (for run-length or
    dictionary encoded columns, whose "uncompressed" bytes can be a few bytes for millions
    of values) at least a byte per value. Only the footer is read.

    Raises
    ------
    DecompressionLimitError
        Past ``$DEBUGKIT_MAX_UNPACKED_MB``, or 200x the file's size beyond 8 MiB.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    limits = limits or DecompressLimits.from_env()
    key = file_key(path)
    check_not_refused(key)
    size = key[1] if key is not None and key[1] is not None else 0
    try:
        with _open(path) as f:
            pf = pq.ParquetFile(f)
            md = pf.metadata
            rows, columns = md.num_rows, md.num_columns
            chunks = sum(md.row_group(g).column(c).total_uncompressed_size
                         for g in range(md.num_row_groups) for c in range(columns))
            row_bytes = sum(_value_bytes(field.type) for field in pf.schema_arrow)
    except (pa.ArrowException, OSError, ValueError):
        return  # unreadable: the reader says so
    unpacked = max(chunks, rows * max(row_bytes, 1))
    why = None
    if unpacked > limits.max_bytes:
        why = f"over {limits.max_bytes} bytes, DEBUGKIT_MAX_UNPACKED_MB"
    elif size and unpacked > max(RATIO_FLOOR, limits.max_ratio * size):
        why = f"over {limits.max_ratio}x"
    if why:
        msg = MSG_PARQUET_BOMB.format(path=path, rows=rows, columns=columns, unpacked=unpacked,
                                      size=size, why=why)
        remember_refusal(key, msg)
        raise DecompressionLimitError(msg)
