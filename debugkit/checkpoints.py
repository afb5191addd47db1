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

from ._fsutil import atomic_write_json, in_run
from ._fsutil import fsync_dir as _fsync_dir
from .errors import DebugkitError, DebugkitWarning, InvalidInputError, OutsideRunError, RunDirError
from .format import CHECKPOINTS_DIR
from .location import as_path, is_local, load_safetensors, open_binary
from .runschema import read_run_json

# The folder's name is the format's; ``DIR`` stays as the public name users and
# examples/ read checkpoints by (``run_dir / DIR / entry["dir"]``).
DIR = CHECKPOINTS_DIR
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
    with open_binary(path) as f:
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
    p = as_path(run_dir) / DIR / INDEX
    if not p.exists():
        return []
    try:
        doc = read_run_json(p, "checkpoints/index.json")  # every field typed (runschema)
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
        try:
            shutil.rmtree(checkpoint_dir(run_dir, e), ignore_errors=True)
        except OutsideRunError:
            pass  # an index entry naming a folder outside the run: never delete there
    return entry


def checkpoint_dir(run_dir, entry: dict) -> Path:
    """The folder of an index entry, inside the run's ``checkpoints/``
    (:class:`~debugkit.errors.OutsideRunError` for a ``dir`` that leads out of the run:
    ``"../../etc"``, ``"/etc"``, a link)."""
    return in_run(as_path(run_dir), DIR, entry.get("dir"), what="checkpoint folder")


def verify(run_dir, entry: dict) -> str | None:
    """None when every file of ``entry`` exists with its recorded size and hash, else why not.

    A folder or file name that leads outside the run is a problem too (it is neither
    opened nor hashed)."""
    run_dir = as_path(run_dir)
    try:
        checkpoint_dir(run_dir, entry)
    except OutsideRunError as exc:
        return str(exc)
    files = entry.get("files")
    if not isinstance(files, dict) or "model.safetensors" not in files:
        return "the index lists no model.safetensors"
    for fname, meta in files.items():
        try:
            p = in_run(run_dir, DIR, entry.get("dir"), fname, what="checkpoint file")
        except OutsideRunError as exc:
            return str(exc)
        if not isinstance(meta, dict):
            return f"{fname}: its record is not an object"
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
        local = is_local(path)
        if path.suffix == ".safetensors":
            return load_safetensors(path)
        import io

        import torch

        return torch.load(path if local else io.BytesIO(path.read_bytes()), map_location="cpu",
                          weights_only=True)
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
    run_dir = as_path(run_dir)
    for e in read_index(run_dir):
        problem = verify(run_dir, e) or ""
        files = e.get("files") if isinstance(e.get("files"), dict) else {}
        try:
            folder_path = str(checkpoint_dir(run_dir, e))
        except OutsideRunError:
            folder_path = ""  # never a path outside the run, not even as text
        model = files.get("model.safetensors")
        rows.append({"step": float(e["step"]), "path": folder_path,
                     "bytes": int(sum(m.get("bytes") for m in files.values() if isinstance(m, dict)
                                      and isinstance(m.get("bytes"), int))),
                     "sha256": str(model.get("sha256", "")) if isinstance(model, dict) else "",
                     "ok": not problem, "source": "debugkit", "problem": problem})
    where = as_path(folder) if folder is not None else run_dir
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

    for e in sorted(read_index(run_dir), key=lambda e: e["step"], reverse=True):
        problem = verify(run_dir, e)
        d = as_path(run_dir) / DIR if problem else checkpoint_dir(run_dir, e)
        if problem:
            warnings.warn(MSG_CORRUPT.format(path=d, step=e["step"], detail=problem),
                          CheckpointWarning, stacklevel=2)
            continue
        try:
            state = load_safetensors(d / "model.safetensors")
        except Exception as exc:
            warnings.warn(MSG_CORRUPT.format(path=d, step=e["step"], detail=exc), CheckpointWarning,
                          stacklevel=2)
            continue
        model.load_state_dict(state)
        if optimizer is not None and (d / "optimizer.pt").is_file():
            optimizer.load_state_dict(torch.load(d / "optimizer.pt", map_location="cpu", weights_only=True))
        return int(e["step"])
    return None


def _flat_tensors(obj) -> dict:
    """The tensors of a loaded state_dict (``{"model": {...}}``-style wrappers unwrapped)."""
    import torch

    if isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
        if tensors:
            return tensors
        for key in ("model", "state_dict", "model_state_dict", "module"):
            inner = obj.get(key)
            if isinstance(inner, dict):
                found = _flat_tensors(inner)
                if found:
                    return found
    return {}


def load_weights(path) -> dict:
    """The model tensors of one checkpoint: a debugkit checkpoint folder (its
    ``model.safetensors``) or a user's state_dict file, loaded safely.

    Raises
    ------
    InvalidInputError
        The file does not load as a state_dict (or holds no tensors).
    """
    p = as_path(path)
    if p.is_dir():
        p = p / "model.safetensors"
    if not p.is_file():
        raise InvalidInputError(MSG_UNLOADABLE.format(path=p, detail="no such file"))
    tensors = _flat_tensors(_load_user_file(p))
    if not tensors:
        raise InvalidInputError(MSG_UNLOADABLE.format(path=p, detail="it holds no tensors"))
    return tensors


def _as_array(v):
    """A torch tensor as a numpy array: bfloat16 (which numpy lacks) widened to float32,
    exactly."""
    import torch

    v = v.detach().cpu()
    return (v.float() if v.dtype == torch.bfloat16 else v).numpy()


def load_weight_arrays(path) -> dict:
    """The model tensors of one checkpoint as numpy arrays, as :func:`load_weights` finds
    them. A safetensors file is read without torch (``safetensors.numpy``), so listing a
    run's checkpoints does not pay torch's import; torch is imported only for a
    ``torch.save`` file or a dtype numpy lacks (bfloat16, read through torch and widened
    to float32, exactly).

    Raises
    ------
    InvalidInputError
        As :func:`load_weights`.
    """
    p = as_path(path)
    if p.is_dir():
        p = p / "model.safetensors"
    if p.suffix == ".safetensors" and p.is_file():
        try:
            return load_safetensors(p, numpy=True)
        except Exception:  # noqa: BLE001 - bfloat16 or a bad file: torch's path says which
            pass
    return {k: _as_array(v) for k, v in load_weights(p).items()}


def _f64(v):
    """An array as float64, complex values as their magnitudes."""
    import numpy as np

    return np.abs(v).astype(np.float64) if v.dtype.kind == "c" else v.astype(np.float64)


def _finite_stats(v):
    """(values as :func:`_f64`, finite mask, NaN count, Inf count)."""
    import numpy as np

    floating = v.dtype.kind in "fc"
    f = _f64(v)
    finite = np.isfinite(f)
    nan = int(np.isnan(f).sum()) if floating else 0
    inf = int((~finite).sum()) - nan if floating else 0
    return f, finite, nan, inf


def read_weight_stats(checkpoints, *, max_checkpoints: int = 60):
    """Per-tensor weight statistics of each checkpoint, and the change from the previous one.

    Reads each checkpoint with :func:`load_weight_arrays` (numpy; torch only for
    ``torch.save`` files and bfloat16 tensors).

    Parameters
    ----------
    checkpoints : DataFrame
        From :func:`list_checkpoints`; rows whose ``ok`` is False are skipped, and only
        the newest ``max_checkpoints`` are read (one checkpoint's tensors in memory at a time,
        plus the previous one's).

    Returns
    -------
    DataFrame with one row per (checkpoint, tensor): ``step`` (float), ``checkpoint`` (a
    label: ``"step 40"`` or the file name), ``order`` (int, position of the checkpoint),
    ``layer`` (tensor name), ``numel`` (int), ``norm`` (L2 norm of the finite values),
    ``nan_count``, ``inf_count`` (int), ``delta_norm`` (L2 norm of the difference from the
    same tensor in the previous checkpoint; NaN for the first checkpoint, for a tensor
    it lacks, a changed shape or non-finite values), ``changed`` (bool: any element differs
    from the previous checkpoint; False for the first).
    """
    import numpy as np
    import pandas as pd

    cols = ["step", "checkpoint", "order", "layer", "numel", "norm", "nan_count", "inf_count",
            "delta_norm", "changed"]
    ok = checkpoints[checkpoints["ok"]].tail(int(max_checkpoints))
    rows = []
    prev: dict | None = None
    for order, (step, path) in enumerate(zip(ok["step"], ok["path"])):
        label = f"step {int(step)}" if step == step else as_path(path).name
        w = load_weight_arrays(path)
        for name, v in w.items():
            f, finite, nan, inf = _finite_stats(v)
            norm = float(np.linalg.norm(np.where(finite, f, 0.0).ravel())) if v.size else 0.0
            delta, changed = float("nan"), False
            old = prev.get(name) if prev is not None else None
            if old is not None and old.shape == v.shape:
                changed = not np.array_equal(old, v)
                if not (nan or inf):
                    delta = float(np.linalg.norm((f - _f64(old)).ravel())) if v.size else 0.0
            elif old is not None:
                changed = True
            rows.append((float(step), label, order, name, int(v.size), norm, nan, inf, delta, changed))
        prev = w
    return pd.DataFrame(rows, columns=cols)


def read_checkpoint_diff(path_a, path_b):
    """Tensor-by-tensor comparison of two checkpoints (``b`` relative to ``a``), read with
    :func:`load_weight_arrays` (numpy; torch only for ``torch.save`` files and bfloat16).

    Returns
    -------
    DataFrame with one row per tensor name in either: ``layer``, ``shape_a``, ``shape_b``
    (str, "" when absent), ``norm_a``, ``norm_b``, ``diff_norm`` (L2 norm of b - a; NaN
    when the shapes differ or a value is non-finite), ``rel_change`` (diff_norm / norm_a),
    ``max_abs_diff``, ``changed`` (bool), ``nonfinite_a``, ``nonfinite_b`` (int counts).
    """
    import numpy as np
    import pandas as pd

    a, b = load_weight_arrays(path_a), load_weight_arrays(path_b)
    rows = []
    for name in list(a) + [k for k in b if k not in a]:
        ta, tb = a.get(name), b.get(name)

        def stats(t):
            if t is None:
                return "", float("nan"), 0
            d = _f64(t)
            fin = np.isfinite(d)
            return str(list(t.shape)), float(np.linalg.norm(np.where(fin, d, 0.0).ravel())), int((~fin).sum())
        sa, na, bad_a = stats(ta)
        sb, nb, bad_b = stats(tb)
        diff = maxd = float("nan")
        changed = ta is None or tb is None or ta.shape != tb.shape
        if not changed:
            changed = not np.array_equal(ta, tb)
            if not (bad_a or bad_b) and ta.size:
                dd = (_f64(tb) - _f64(ta)).ravel()
                diff = float(np.linalg.norm(dd))
                maxd = float(np.abs(dd).max())
            elif not ta.size:
                diff = maxd = 0.0
        rel = diff / na if na and na == na and diff == diff else (0.0 if diff == 0 else float("nan"))
        rows.append((name, sa, sb, na, nb, diff, rel, maxd, bool(changed), bad_a, bad_b))
    return pd.DataFrame(rows, columns=["layer", "shape_a", "shape_b", "norm_a", "norm_b", "diff_norm",
                                       "rel_change", "max_abs_diff", "changed", "nonfinite_a",
                                       "nonfinite_b"])
