"""Read a failure capture for replay: pick it, check its files, address its batch.

Nothing here executes the capture's code: tensors load through safetensors and the
batch structure is JSON (:mod:`debugkit.tensortree`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .._fsutil import in_run, sha256_file
from ..errors import InvalidInputError, ReplayError, RunDirError
from ..location import as_path

MSG_NO_CAPTURES = ("{run}: no failure captures (failures/ is empty): nothing to replay; "
                   "a step that raises inside `with rec.step(batch):` is captured automatically")
MSG_UNKNOWN_FAILURE = "{run}: no failure capture {fid!r}; captures: {known}"
MSG_BAD_FAILURE_ID = ("failure id {value!r}: expected an id like 'r0-s0000075-exception' "
                      "(a training step) or 'r0-000-req0000012-error' (an inference request)")
MSG_FILE_MISSING = "{path}: missing from the capture ({part}); cannot replay without it"
MSG_FILE_CHANGED = ("{path}: SHA-256 {found} differs from the {expected} that failure.json "
                    "recorded: the capture is corrupt or was edited")
MSG_PART_FAILED = "{where}: the {part} was not captured ({detail}); cannot replay without it"

# r<rank>-s<step>-<kind> (a training step's capture) or r<rank>-<segment>-req<request>-<outcome>
# (an inference request's, debugkit.serve), with a -N suffix when the folder existed.
FAILURE_ID = re.compile(r"^r\d{1,6}-(s\d{7,12}|\d{3,6}-req\d{7,12})-[a-z_]{1,32}(-\d{1,6})?$")

# Parts a replay needs, and parts it can do without (replaying with fresh weights or
# the default RNG state, and saying so).
REQUIRED_PARTS = ("batch",)
OPTIONAL_PARTS = ("model", "rng")


def validate_failure_id(value) -> str:
    """Check the shape of a failure id (it may come from a stranger's URL)."""
    if not isinstance(value, str) or not FAILURE_ID.match(value):
        raise InvalidInputError(MSG_BAD_FAILURE_ID.format(value=str(value)[:80]))
    return value


def select_failure(run, failure_id: str | None = None) -> dict:
    """The failure record to replay: ``failure_id``, or the run's first capture."""
    failures = run.failures()
    if not failures:
        raise ReplayError(MSG_NO_CAPTURES.format(run=run.path))
    if failure_id is None:
        return failures[0]
    validate_failure_id(failure_id)
    for f in failures:
        if f["id"] == failure_id:
            return f
    raise ReplayError(MSG_UNKNOWN_FAILURE.format(run=run.path, fid=failure_id,
                                                 known=", ".join(f["id"] for f in failures)))


def capture_file(record_or_dir, name: str):
    """The file ``name`` of a failure capture (its record or its folder), refused with
    :class:`~debugkit.errors.OutsideRunError` when it would lead outside the capture's
    folder (an absolute or ``..`` name, a link to ``/etc/passwd``)."""
    d = record_or_dir["path"] if isinstance(record_or_dir, dict) else record_or_dir
    return in_run(as_path(d), name, what="capture file")


def verify_files(record: dict) -> dict[str, bool]:
    """Check the capture's files against the digests in ``failure.json``.

    Returns ``{part: present}`` for the parts replay uses. A required part that is
    missing, or any present file whose digest differs, raises :class:`ReplayError`.
    """
    d = as_path(record["path"])
    digests = record.get("sha256") or {}
    files = record.get("files") or {}
    errors = record.get("capture_errors") or {}
    present: dict[str, bool] = {}
    for part in REQUIRED_PARTS + OPTIONAL_PARTS:
        names = files.get(part)
        if not names:
            if part in REQUIRED_PARTS:
                detail = errors.get(part) or "not listed in failure.json"
                raise ReplayError(MSG_PART_FAILED.format(where=d, part=part, detail=detail))
            present[part] = False
            continue
        for name in names:
            if not isinstance(name, str) or "/" in name or name.startswith("."):
                raise ReplayError(f"{d / fmt_name(name)}: refused file name in failure.json")
            p = capture_file(d, name)
            if not p.is_file():
                raise ReplayError(MSG_FILE_MISSING.format(path=p, part=part))
            want = digests.get(name)
            if want is not None:
                got = sha256_file(p)
                if got != want:
                    raise ReplayError(MSG_FILE_CHANGED.format(path=p, found=got[:16] + "…",
                                                              expected=str(want)[:16] + "…"))
        present[part] = True
    return present


def fmt_name(name) -> str:
    return str(name)[:80]


def factory_kwargs(record: dict, manifest: dict) -> dict:
    """The model factory's keyword arguments (the capture's, else the manifest's)."""
    kw = record.get("factory_kwargs")
    if kw is None:
        kw = manifest.get("factory_kwargs")
    if kw is None:
        return {}
    if not isinstance(kw, dict) or not all(isinstance(k, str) for k in kw):
        raise RunDirError(f"{record.get('path')}: factory_kwargs must be an object with string keys")
    return kw


# --------------------------------------------------------------------------- batch paths
def format_path(tokens) -> str:
    """``("x", 0)`` -> ``"batch['x'][0]"``; ``()`` -> ``"batch"``."""
    out = "batch"
    for t in tokens:
        out += f"[{t!r}]" if isinstance(t, str) else f"[{int(t)}]"
    return out


_TOKEN = re.compile(r"\[(?:(-?\d+)|'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\")\]")


def parse_path(text: str) -> tuple:
    """Inverse of :func:`format_path` (for paths shown in reports and links)."""
    if not isinstance(text, str) or not text.startswith("batch"):
        raise InvalidInputError(f"batch path {str(text)[:80]!r}: expected e.g. \"batch[0]\"")
    rest, tokens = text[len("batch"):], []
    while rest:
        m = _TOKEN.match(rest)
        if not m:
            raise InvalidInputError(f"batch path {text[:80]!r}: cannot parse {rest[:40]!r}")
        if m.group(1) is not None:
            tokens.append(int(m.group(1)))
        else:
            tokens.append((m.group(2) if m.group(2) is not None else m.group(3)).encode()
                          .decode("unicode_escape"))
        rest = rest[m.end():]
    return tuple(tokens)


def iter_leaves(obj: Any, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """``(path, leaf)`` for every tensor or numpy array in a nested batch, in order."""
    if isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            yield from iter_leaves(x, prefix + (i,))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from iter_leaves(v, prefix + (k,))
    elif hasattr(obj, "shape") and hasattr(obj, "dtype"):
        yield prefix, obj


def get_at(obj: Any, tokens: tuple) -> Any:
    for t in tokens:
        try:
            obj = obj[t]
        except (KeyError, IndexError, TypeError) as exc:
            raise InvalidInputError(f"{format_path(tokens)}: not in the batch ({exc})") from None
    return obj


def load_batch(record: dict):
    """The captured batch (tensors on the CPU)."""
    from ..tensortree import load_tree

    return load_tree(capture_file(record, "batch.safetensors"), capture_file(record, "batch.json"))


def read_sample(record: dict, input_path: str, sample_index: int):
    """One sample of one batch input, for display.

    Returns
    -------
    DataFrame with columns ``position`` (str: the element's index within the sample,
    ``"()"`` for a scalar), ``value`` (float64) and ``finite`` (bool).
    """
    import numpy as np
    import pandas as pd

    batch = load_batch(record)
    t = get_at(batch, parse_path(input_path))
    if not hasattr(t, "shape") or len(t.shape) == 0:
        raise InvalidInputError(f"{input_path}: not a batched tensor")
    n = int(t.shape[0])
    if not isinstance(sample_index, int) or not 0 <= sample_index < n:
        raise InvalidInputError(f"sample {sample_index!r}: expected 0..{n - 1} for {input_path}")
    row = np.asarray(t[sample_index].detach().cpu().double().numpy()
                     if hasattr(t, "detach") else t[sample_index], dtype=np.float64)
    if row.ndim == 0:
        pos = ["()"]
        vals = row.reshape(1)
    else:
        pos = [str(ix[0]) if len(ix) == 1 else str(ix) for ix in np.ndindex(row.shape)]
        vals = row.reshape(-1)
    return pd.DataFrame({"position": pos, "value": vals, "finite": np.isfinite(vals)})
