"""Checkpoints in a run directory: written atomically, verified by hash, resumed from.

Layout (see docs/run-format.md, ``checkpoints/``)::

    checkpoints/index.json           {"format": "debugkit-checkpoints", "checkpoints": [entry...]}
    checkpoints/<step:09d>/model.safetensors
    checkpoints/<step:09d>/optimizer.pt      torch.save of optimizer.state_dict() (weights_only-loadable)
    checkpoints/<step:09d>/extra.json

An entry: ``step``, ``wall_time``, ``dir``, ``files`` = ``{name: {"bytes", "sha256"}}``.
Files go to a temporary folder, each fsynced, the folder is renamed into place, and
only then is the index replaced (atomically, fsynced): a checkpoint exists once the
index lists it, so a writer killed at any moment never leaves a half checkpoint that a
reader takes as valid. Plain ``state_dict`` files a user saved (``*.safetensors``,
``*.pt``, ``*.pth``, ``*.bin``) are listed too; they are opened only with safetensors or
``torch.load(weights_only=True)``, never plain pickle.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import warnings
from pathlib import Path

from ._fsutil import atomic_write_json
from ._fsutil import fsync_dir as _fsync_dir
from .errors import DebugkitError, DebugkitWarning, InvalidInputError, RunDirError

DIR = "checkpoints"
INDEX = "index.json"
FORMAT = "debugkit-checkpoints"
USER_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")

MSG_BAD_INDEX = "{path}: checkpoint index is unreadable ({detail})"
MSG_CORRUPT = "{path}: checkpoint at step {step} fails verification ({detail}); skipped"
MSG_UNLOADABLE = "{path}: not a loadable state_dict ({detail})"


class CheckpointWarning(DebugkitWarning):
    """A checkpoint was skipped because it is truncated or corrupted."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_index(run_dir) -> list[dict]:
    """The entries of ``checkpoints/index.json`` (``[]`` when there is none)."""
    p = Path(run_dir) / DIR / INDEX
    if not p.exists():
        return []
    try:
        doc = json.loads(p.read_text())
        entries = doc["checkpoints"]
        if not isinstance(entries, list):
            raise TypeError("'checkpoints' is not a list")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunDirError(MSG_BAD_INDEX.format(path=p, detail=exc)) from exc
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("step"), int)]


def write_checkpoint(run_dir, model, optimizer=None, *, step: int, extra: dict | None = None,
                     keep_last: int | None = None) -> dict:
    """Write one checkpoint atomically and list it in the index; returns its entry."""
    import torch
    from safetensors.torch import save_file

    if not isinstance(step, int) or step < 0:
        raise InvalidInputError(f"step={step!r}: expected an integer >= 0")
    if keep_last is not None and (not isinstance(keep_last, int) or keep_last < 1):
        raise InvalidInputError(f"keep_last={keep_last!r}: expected an integer >= 1")
    root = Path(run_dir) / DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"{step:09d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        tensors = {k: v.detach().to("cpu").contiguous().clone()
                   for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}
        save_file(tensors, str(tmp / "model.safetensors"))
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "extra.json").write_text(json.dumps(extra or {}, default=str))
        files = {}
        for f in sorted(tmp.iterdir()):
            _fsync_file(f)
            files[f.name] = {"bytes": f.stat().st_size, "sha256": _sha256(f)}
        _fsync_dir(tmp)
        final = root / name
        if final.exists():  # the same step checkpointed again: replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    entry = {"step": step, "wall_time": time.time(), "dir": name, "files": files}
    entries = [e for e in read_index(run_dir) if e["step"] != step] + [entry]
    entries.sort(key=lambda e: e["step"])
    pruned = []
    if keep_last is not None and len(entries) > keep_last:
        pruned, entries = entries[:-keep_last], entries[-keep_last:]
    atomic_write_json(root / INDEX, {"format": FORMAT, "checkpoints": entries}, fsync=True)
    for e in pruned:  # after the index no longer lists them
        shutil.rmtree(root / str(e.get("dir", "")), ignore_errors=True)
    return entry


def verify(run_dir, entry: dict) -> str | None:
    """None when every file of ``entry`` exists with its recorded size and hash, else why not."""
    d = Path(run_dir) / DIR / str(entry.get("dir", ""))
    files = entry.get("files")
    if not isinstance(files, dict) or "model.safetensors" not in files:
        return "the index lists no model.safetensors"
    for fname, meta in files.items():
        p = d / fname
        if not p.is_file():
            return f"{fname} is missing"
        if p.stat().st_size != meta.get("bytes"):
            return f"{fname} has {p.stat().st_size} bytes, {meta.get('bytes')} recorded"
        if _sha256(p) != meta.get("sha256"):
            return f"{fname}: SHA-256 differs from the recorded one"
    return None


def _load_user_file(path: Path):
    """A user's state_dict file, loaded safely (safetensors or weights_only)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch's unpickler raises many types for hostile input
        raise InvalidInputError(MSG_UNLOADABLE.format(path=path, detail=str(exc).splitlines()[0][:200])) from None


def list_checkpoints(run_dir, folder=None):
    """One row per checkpoint: the run's own (from the index) and plain state_dict files
    in the run directory or in ``folder``.

    Returns
    -------
    DataFrame with columns ``step`` (float: NaN for a user file without a number in its
    name), ``path`` (str), ``bytes`` (int), ``sha256`` (of the model file), ``ok`` (bool:
    hashes verify / the file loads safely), ``source`` (``"debugkit"`` or ``"file"``),
    ``problem`` (str: why ``ok`` is False, else "").
    """
    import pandas as pd

    rows = []
    run_dir = Path(run_dir)
    for e in read_index(run_dir):
        problem = verify(run_dir, e) or ""
        files = e.get("files") or {}
        rows.append({"step": float(e["step"]), "path": str(run_dir / DIR / str(e.get("dir", ""))),
                     "bytes": int(sum(int(m.get("bytes") or 0) for m in files.values())),
                     "sha256": (files.get("model.safetensors") or {}).get("sha256", ""),
                     "ok": not problem, "source": "debugkit", "problem": problem})
    where = Path(folder) if folder is not None else run_dir
    for p in sorted(where.iterdir()) if where.is_dir() else []:
        if not p.is_file() or p.is_symlink() or p.suffix not in USER_SUFFIXES:
            continue
        m = re.findall(r"\d+", p.stem)
        problem = ""
        try:
            _load_user_file(p)
        except DebugkitError as exc:
            problem = str(exc)
        rows.append({"step": float(m[-1]) if m else float("nan"), "path": str(p),
                     "bytes": p.stat().st_size, "sha256": _sha256(p), "ok": not problem,
                     "source": "file", "problem": problem})
    cols = ["step", "path", "bytes", "sha256", "ok", "source", "problem"]
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values(["step"], kind="stable", na_position="first").reset_index(drop=True)


def resume_latest(run_dir, model, optimizer=None) -> int | None:
    """Load the newest checkpoint of the run whose hashes verify into ``model`` (and
    ``optimizer``) and return its step; None when there is none.

    Truncated or corrupted checkpoints are skipped with a :class:`CheckpointWarning`
    naming the file, so a restarted job continues from the last good state.
    """
    import torch
    from safetensors.torch import load_file

    for e in sorted(read_index(run_dir), key=lambda e: e["step"], reverse=True):
        d = Path(run_dir) / DIR / str(e.get("dir", ""))
        problem = verify(run_dir, e)
        if problem:
            warnings.warn(MSG_CORRUPT.format(path=d, step=e["step"], detail=problem),
                          CheckpointWarning, stacklevel=2)
            continue
        try:
            state = load_file(str(d / "model.safetensors"))
        except Exception as exc:
            warnings.warn(MSG_CORRUPT.format(path=d, step=e["step"], detail=exc), CheckpointWarning,
                          stacklevel=2)
            continue
        model.load_state_dict(state)
        if optimizer is not None and (d / "optimizer.pt").is_file():
            optimizer.load_state_dict(torch.load(d / "optimizer.pt", map_location="cpu", weights_only=True))
        return int(e["step"])
    return None
