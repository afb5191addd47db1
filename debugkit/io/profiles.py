"""Profile files: reading their bytes (plain or gzip-compressed, detected by the magic
bytes) and telling what a file is (:func:`sniff_format`).

The readers are one module per kind: :mod:`debugkit.io.profile_types` (the
:class:`~debugkit.io.profile_types.SampledProfile` model both sampled formats are read into),
:mod:`debugkit.io.collapsed` (py-spy raw / collapsed stacks), :mod:`debugkit.io.speedscope`
(py-spy speedscope JSON, with its fast scanner), :mod:`debugkit.io.stackdump` (py-spy
dumps), :mod:`debugkit.io.chrome_trace` (torch.profiler traces);
:func:`debugkit.io.run_profiles.read_any` reads any of them.
"""

from __future__ import annotations

import os
import re
import zlib
from typing import Any

from ..errors import ProfileFileError
from ..location import as_path
from ..location import open_binary as _open_file
from .decompress import GZIP_MAGIC, check_not_refused, file_key, wrap_maybe_gzip  # noqa: F401  (GZIP_MAGIC: run_profiles reads it here)

# Message templates (tests match on these).
MSG_EMPTY_FILE = "{path}: the file is empty"
MSG_BAD_JSON = "{path}: not valid JSON ({detail})"
MSG_TRUNCATED = ("{path}: the JSON ends early at byte {offset} (line {line}){detail}; "
                 "the file was probably cut off while being written")
MSG_SCHEMA = "{path}: {where}: {detail}"
MSG_UNKNOWN_FORMAT = ("{path}: not a profile debugkit can read: expected py-spy speedscope "
                      "JSON, raw/collapsed stacks (`py-spy record --format raw`), a torch.profiler "
                      "chrome trace (.json or .json.gz) or a py-spy dump")

SPEEDSCOPE_SCHEMA = "speedscope.app/file-format-schema"


# ---------------------------------------------------------------------------- files
def read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when it is gzip-compressed (within the limits of
    :mod:`debugkit.io.decompress`: a compression bomb is refused, and remembered)."""
    with open_binary(path) as f:
        try:
            return f.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise ProfileFileError(MSG_TRUNCATED.format(
                path=path, offset="?", line="?", detail=f" (gzip stream: {exc})")) from exc


def open_binary(path: str | os.PathLike):
    """A binary file object over the file's (gunzipped) bytes, for streaming readers.

    A gzip file is inflated as it is read, within :mod:`debugkit.io.decompress`'s limits
    (:class:`~debugkit.io.decompress.DecompressionLimitError` past them). ``path`` may be a
    URL (a run in an object store)."""
    p = as_path(path)
    try:
        key = file_key(p)
        check_not_refused(key)  # refused before: refused again at once, not inflated again
        f = _open_file(p)  # a local FIFO is refused (it would block open() forever)
    except FileNotFoundError as exc:
        raise ProfileFileError(f"{p}: no such file") from exc
    except IsADirectoryError as exc:
        raise ProfileFileError(f"{p}: is a directory, expected a profile file") from exc
    return wrap_maybe_gzip(f, p, key=key)


def sniff_format(path: str | os.PathLike) -> str:
    """``speedscope``, ``raw``, ``chrome-trace`` or ``pyspy-dump``, from the content.

    Raises
    ------
    ProfileFileError
        The file is empty or none of those.
    """
    with open_binary(path) as f:
        try:
            head = f.read(1 << 16)
        except (OSError, EOFError, zlib.error) as exc:
            raise ProfileFileError(MSG_TRUNCATED.format(path=path, offset=0, line=1,
                                                    detail=f" (gzip stream: {exc})")) from exc
    return sniff_bytes(head, path)


def sniff_bytes(head: bytes, path: Any = "<bytes>") -> str:
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        raise ProfileFileError(MSG_EMPTY_FILE.format(path=path))
    if text[:1] == b"{":
        if SPEEDSCOPE_SCHEMA.encode() in head or (b'"shared"' in head and b'"profiles"' in head):
            return "speedscope"
        if b'"traceEvents"' in head:
            return "chrome-trace"
        if b'"debugkit-stacks"' in head:
            return "pyspy-dump"
        raise ProfileFileError(MSG_UNKNOWN_FORMAT.format(path=path))
    if text[:1] == b"[":
        body = text[1:].lstrip()
        if body[:1] in (b"{", b"]", b""):
            if b'"thread_id"' in head and b'"frames"' in head:
                return "pyspy-dump"
            if b'"ph"' in head or body[:1] in (b"]", b""):
                return "chrome-trace"
        raise ProfileFileError(MSG_UNKNOWN_FORMAT.format(path=path))
    first = text.split(b"\n", 1)[0].rstrip(b"\r")
    if re.match(rb"^.+ \d+$", first):
        return "raw"
    raise ProfileFileError(MSG_UNKNOWN_FORMAT.format(path=path))
