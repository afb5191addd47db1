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
"""

from __future__ import annotations

import gc
import io
import os
import pickle
from pathlib import Path

from ..errors import InvalidInputError

MSG_GLOBAL = ("{where}: refused to load: the pickle asks for {module}.{name}, and only plain "
              "data (dicts, lists, tuples, strings, numbers) is allowed; nothing was executed")
MSG_PERSISTENT = ("{where}: refused to load: the pickle uses a persistent id (external "
                  "objects), and only plain data is allowed; nothing was executed")
MSG_CORRUPT = "{where}: not a readable pickle ({detail})"


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
            return _load(_Bounded(f), where)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _load(io.BytesIO(source), where or "<bytes>")
    return _load(source, where or getattr(source, "name", "<stream>"))


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
