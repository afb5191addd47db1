"""The exception hierarchy of debugkit.

Every error debugkit raises for bad input derives from :class:`DebugkitError`, so
callers (the CLI, the pages) can catch one class and show its message. Messages name
the bad value, where it was found and what was expected. Templates that tests match
live here as module constants.
"""

from __future__ import annotations

__all__ = [
    "DebugkitError",
    "RunDirError",
    "SchemaVersionError",
    "InvalidInputError",
    "UploadError",
    "ReplayError",
    "NonFiniteError",
    "MissingDependencyError",
    "AuditError",
    "ShareTokenError",
    "ProfileFileError",
    "ProfilerFailedError",
    "DebugkitWarning",
    "TruncatedRecordWarning",
]

# Message templates (tests match on these).
MSG_NOT_A_RUN = "{path}: not a debugkit run directory (no manifest.json)"
MSG_NO_SUCH_PATH = "{path}: no such file or directory"
MSG_BAD_MANIFEST = "{path}: manifest.json is not valid JSON ({detail})"
MSG_NEWER_MAJOR = (
    "{path}: schema_version {found!r} is newer than this debugkit ({known}.x); "
    "the run was written by a newer debugkit: upgrade debugkit to read it"
)
MSG_BAD_VERSION = "{path}: schema_version {found!r} is not of the form 'MAJOR.MINOR'"
MSG_BATCH_VIOLATION = "batch rejected by its BatchSpec: {first}{more}"
MSG_FILE_TOO_BIG = ("{path}: {size} bytes is over the limit of {limit} bytes for {what}; "
                    "refusing to read it (a run's JSON files are kilobytes)")
MSG_NOT_REGULAR = "{path}: not a regular file ({kind}); refusing to open it"
MSG_BAD_TYPED_PATH = "path {value!r}: {why}"
MSG_TABLE_UNREADABLE = "{path}: {table} data is unreadable ({detail})"
#: Something other than a DebugkitError broke reading one run (a bug, or a file shape no
#: check foresaw): the run list shows it as that run's error, never a traceback.
MSG_RUN_UNEXPECTED = "run {run}: could not be read ({type}: {detail})"
#: A JSON file of a run whose field does not have its documented type (debugkit.runschema).
MSG_RUN_FILE_FIELD = "{path}: {what} field {field!r} {detail}"
#: A JSON document nested deeper than debugkit reads (debugkit._fsutil.MAX_JSON_DEPTH).
MSG_JSON_TOO_DEEP = "{path}: JSON nested deeper than {limit} levels; refusing to read it"
#: An Arrow stream whose record batch parses but lies about its buffers (offsets past
#: the data, null counts, dictionary indices), or whose columns do not fit the table.
MSG_TABLE_INVALID = "{path}: record batch {batch} is invalid Arrow data, refused ({detail})"
MSG_OUTSIDE_RUN = "{run}: {what} {name!r} is refused: {why}; a run's names must stay inside the run"


class DebugkitError(Exception):
    """Base class of every error debugkit raises for bad input or a failed operation."""


class RunDirError(DebugkitError):
    """A run directory (or zip of one) is missing, unreadable or malformed."""


class RunFileError(RunDirError, ValueError):
    """A file of a run whose content does not have the documented type (a manifest whose
    ``env`` is a string, a checkpoint entry that is a number). A ``ValueError`` too, so
    readers that skip an unreadable file skip this one the same way."""


class OutsideRunError(RunDirError):
    """A name recorded in a run (a checkpoint folder, a profile file, an audit file...)
    resolves outside the run: absolute, with ``..``, another URL, or a link leading out."""


class SchemaVersionError(RunDirError):
    """A run was written with a schema version this debugkit cannot read."""


class InvalidInputError(DebugkitError):
    """A value given by a user (argument, query parameter, batch, file) is invalid."""


class UploadError(InvalidInputError):
    """An uploaded file or archive was refused (unsafe names, links, bombs, limits)."""


class ReplayError(DebugkitError):
    """A captured failure could not be replayed."""


class CodeRefusedError(ReplayError):
    """The capture's code may not run (missing, changed without permission, or unsafe)."""


class NonFiniteError(DebugkitError):
    """A loss or gradient became NaN/Inf and the Recorder was told to halt."""


class MissingDependencyError(DebugkitError):
    """An optional package needed by a feature is not installed."""

    def __init__(self, package: str, feature: str, pip_name: str | None = None):
        self.package = package
        super().__init__(
            f"{feature} needs the optional package {package!r}; "
            f"install it with: pip install {pip_name or package}"
        )


class AuditError(DebugkitError):
    """A bias audit could not be computed, or a stored audit is missing or was altered."""


class ShareTokenError(DebugkitError):
    """A share link's token is malformed, altered, expired, or for another run or audit."""


class ProfileFileError(InvalidInputError):
    """A profile or trace *file* (speedscope, raw stacks, chrome trace, stack dump) is
    truncated, malformed or empty: bad input, raised by the readers in :mod:`debugkit.io`.
    (Was ``ProfileError``.)"""


class ProfilerFailedError(DebugkitError):
    """The profiler *tool* failed: py-spy could not record or dump a process (not
    installed, ptrace refused, no output). (Was ``ProfilerError``.)"""


class DebugkitWarning(UserWarning):
    """Base class of debugkit's warnings."""


class TruncatedRecordWarning(DebugkitWarning):
    """A half-written record at the end of a data file was skipped."""


class FileLimitError(InvalidInputError, ValueError):
    """A file too large to read, or not a regular file (a FIFO, a device).

    Also a ``ValueError``, so a reader that already turns unparsable files into its own
    message (``except ValueError``) does the same for this one.
    """
