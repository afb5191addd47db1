"""A restricted unpickler for data files that hold only plain Python values.

A pickle is a program: its ``GLOBAL``/``STACK_GLOBAL``/``INST`` opcodes import any
callable (``os.system``, ``subprocess.Popen``, ``builtins.eval``) and ``REDUCE``/
``NEWOBJ``/``OBJ``/``BUILD`` call it. Every one of those needs a callable on the stack,
and the only ways to put one there go through :meth:`pickle.Unpickler.find_class`
(``EXT1/2/4`` extension codes included) or :meth:`persistent_load`. This unpickler
refuses both, so a file can produce dicts, lists, tuples, strings, numbers, booleans and
None (and bytes, sets and frozensets, which have opcodes of their own from protocol 3/4
on), and nothing else; a file that asks for anything more is refused with
:class:`UnsafePickleError` before the request is honoured, and nothing in it is run.
PyTorch's snapshots (``pickle.dump`` of plain dicts at the default protocol) need no
global at all.

It keeps the C unpickler's speed (hundreds of MB per second), which is what makes
hundreds of MB of PyTorch memory snapshot readable at all.

A pickle can also claim memory it does not hold: the C unpickler allocates a
``BINBYTES`` object of the length the opcode states before reading it (179 random bytes
claimed 464 MiB), and a ``LONG_BINPUT``/``PUT`` with index *n* grows its memo table to
*2n* slots at once (a 10-byte file can ask for 64 GiB). Nothing in the C unpickler can be
hooked to stop either, so :func:`check_stream` first walks the opcodes (a regular
expression over the fixed-length runs, which are almost all of a snapshot: about a
quarter of the time the C unpickler then takes) and refuses any length past the end of
the data, any memo index larger than the file, a frame that an opcode crosses (where
the C unpickler's view of the bytes would differ from this walk's), and any unknown
opcode. Only a stream that passed is handed to the unpickler, so what it allocates is
bounded by a small multiple of the file's size.
"""

from __future__ import annotations

import gc
import io
import mmap
import os
import pickle
import pickletools
import re
from pathlib import Path

from ..errors import InvalidInputError

MSG_GLOBAL = ("{where}: refused to load: the pickle asks for {module}.{name}, and only plain "
              "data (dicts, lists, tuples, strings, numbers) is allowed; nothing was executed")
MSG_PERSISTENT = ("{where}: refused to load: the pickle uses a persistent id (external "
                  "objects), and only plain data is allowed; nothing was executed")
MSG_CORRUPT = "{where}: not a readable pickle ({detail})"
MSG_BOUND = ("{where}: refused to load: {what} at byte {pos} (a file of {size:,} bytes); "
             "the pickle is damaged or made to exhaust memory, and nothing was allocated for it")


class UnsafePickleError(InvalidInputError):
    """A pickle asked for something other than plain data and was refused."""


class _PlainDataUnpickler(pickle.Unpickler):
    def __init__(self, f, where: str):
        super().__init__(f)
        self._where = where

    def find_class(self, module, name):  # noqa: D401 - pickle's hook
        raise UnsafePickleError(MSG_GLOBAL.format(where=self._where, module=module, name=name))

    def persistent_load(self, pid):
        raise UnsafePickleError(MSG_PERSISTENT.format(where=self._where))


def load_plain(source, where: str | None = None):
    """Unpickle plain data from a path, bytes or a binary file object.

    Parameters
    ----------
    source : str, Path, bytes or binary file
        What to read.
    where : str, optional
        How to name the source in error messages (default: the path).

    Raises
    ------
    UnsafePickleError
        The pickle referenced a global (a class or function) or a persistent id.
    InvalidInputError
        The bytes are not a complete pickle.
    """
    if isinstance(source, (str, Path)):
        where = where or str(source)
        with open(source, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise InvalidInputError(MSG_CORRUPT.format(where=where, detail="EOFError: the file is empty"))
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
                check_stream(view, where)
            return _load(_Bounded(f), where)
    if not isinstance(source, (bytes, bytearray, memoryview)):
        where = where or getattr(source, "name", "<stream>")
        source = source.read()
    where = where or "<bytes>"
    data = bytes(source)
    check_stream(data, where)
    return _load(io.BytesIO(data), where)


# The opcodes whose argument is a fixed number of bytes and that can neither claim memory
# nor move the walk anywhere but forward (BINPUT's index is one byte: at most 256 slots).
# Ordered by how often they occur in PyTorch's snapshots; LONG1 (the addresses) is a
# one-byte length, spelled out for the lengths an int takes.
_ZERO_ARG = re.escape(bytes(ord(op.code) for op in pickletools.opcodes
                            if op.arg is None and op.code not in ".\x95"))
_FIXED_RUN = re.compile(
    b"(?:[Jj].{4}|[hKq].|[" + _ZERO_ARG + b"]|\x8a(?:"
    + b"|".join(re.escape(bytes([k])) + (b".{%d}" % k if k else b"") for k in (8, 5, 6, 7, 4, 3, 2, 1, 0, 9))
    + b")|M.{2}|G.{8}|\x80.|\x82.|\x83.{2}|\x84.{4})*+", re.S)

_ARG = {ord(op.code): (0 if op.arg is None else op.arg.n) for op in pickletools.opcodes}
_UP_TO_NEWLINE, _LEN1, _LEN4S, _LEN4U, _LEN8 = (pickletools.UP_TO_NEWLINE, pickletools.TAKEN_FROM_ARGUMENT1,
                                                pickletools.TAKEN_FROM_ARGUMENT4,
                                                pickletools.TAKEN_FROM_ARGUMENT4U,
                                                pickletools.TAKEN_FROM_ARGUMENT8U)
_FRAME, _STOP, _PUT, _LONG_BINPUT = 0x95, ord("."), ord("p"), ord("r")
_TWO_LINES = {ord("c"), ord("i")}  # GLOBAL, INST: module and name, one line each


def check_stream(data, where: str = "<bytes>") -> None:
    """Walk the opcodes of the pickle in ``data`` (bytes or an mmap) up to its STOP and
    refuse what would make the C unpickler allocate more than the data can justify.

    Raises
    ------
    InvalidInputError
        A length or memo index past what the data holds, an opcode that crosses the end
        of its frame, a frame inside a frame, an unknown opcode, or no STOP.
    """
    size = len(data)

    def refuse(what: str, pos: int):
        raise InvalidInputError(MSG_BOUND.format(where=where, what=what, pos=pos, size=size))

    def corrupt(kind: str, what: str, pos: int):
        raise InvalidInputError(MSG_CORRUPT.format(where=where, detail=f"{kind}: {what} at byte {pos}"))

    run = _FIXED_RUN.match
    i, end, in_frame = 0, size, False  # end: where the current frame (or the data) ends
    while True:
        i = run(data, i, end).end()
        if i >= end:
            if in_frame and i == end:
                in_frame, end = False, size
                continue
            corrupt("EOFError", "the data ends before the pickle's STOP", min(i, size))
        op = data[i]
        n = _ARG.get(op)
        if n is None:
            corrupt("UnpicklingError", f"unknown opcode {op:#04x}", i)
        start = i
        if op == _STOP:
            return
        if op == _FRAME:
            if in_frame:
                corrupt("UnpicklingError", "a frame that begins inside another frame", i)
            if i + 9 > size:
                refuse("a frame header past the end of the data", i)
            length = int.from_bytes(data[i + 1:i + 9], "little")
            if i + 9 + length > size:
                refuse(f"a frame of {length:,} bytes, past the end of the data", i)
            i, end, in_frame = i + 9, i + 9 + length, True
            continue
        if n == _UP_TO_NEWLINE:
            j = data.find(b"\n", i + 1, end)
            if j >= 0 and op in _TWO_LINES:
                j = data.find(b"\n", j + 1, end)
            if j < 0:
                corrupt("UnpicklingError", "a text argument with no end of line", i)
            if op == _PUT:
                try:
                    index = int(data[i + 1:j])
                except ValueError:
                    corrupt("UnpicklingError", "a PUT whose memo index is not a number", i)
                if not 0 <= index <= size:
                    refuse(f"memo index {index:,}", i)
            i = j + 1
        elif n in (_LEN1, _LEN4S, _LEN4U, _LEN8):
            width = {_LEN1: 1, _LEN4S: 4, _LEN4U: 4, _LEN8: 8}[n]
            if i + 1 + width > end:
                refuse("a length past the end of the data", i)
            length = int.from_bytes(data[i + 1:i + 1 + width], "little", signed=n == _LEN4S)
            if length < 0 or i + 1 + width + length > end:
                refuse(f"an object of {length:,} bytes, past the end of the "
                       f"{'frame' if in_frame else 'data'}", i)
            i += 1 + width + length
        else:  # a fixed-length argument the run above does not take: LONG_BINPUT
            if i + 1 + n > end:
                refuse("an argument past the end of the "
                       f"{'frame' if in_frame else 'data'}", i)
            if op == _LONG_BINPUT:
                index = int.from_bytes(data[i + 1:i + 5], "little")
                if index > size:
                    refuse(f"memo index {index:,}", i)
            i += 1 + n
        if i > end:  # pragma: no cover - each branch checked its own bound
            refuse("an opcode that crosses the end of its frame", start)


class _Bounded:
    """A file whose ``read(n)`` never asks for more than the file still holds.

    A length-prefixed pickle opcode may claim gigabytes; a buffered file's ``read(n)``
    allocates ``n`` bytes before it finds the file shorter (a 73-byte file made the
    unpickler allocate 1.8 GiB, found by the fuzz suite's memory bound)."""

    def __init__(self, f):
        self._f = f
        self._size = os.fstat(f.fileno()).st_size

    def read(self, n=-1):
        left = max(0, self._size - self._f.tell())
        return self._f.read(left if n is None or n < 0 else min(n, left))

    def readline(self, limit=-1):
        return self._f.readline(limit)


def _load(f, where: str):
    # Millions of small containers: the cyclic collector would rescan them again and
    # again while they are built (none of them can be garbage yet), so pause it.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _PlainDataUnpickler(f, where).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, OverflowError, MemoryError, RecursionError) as exc:
        raise InvalidInputError(MSG_CORRUPT.format(
            where=where, detail=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)) from None
    finally:
        if was_enabled:
            gc.enable()
